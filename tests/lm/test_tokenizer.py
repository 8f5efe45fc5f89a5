"""Tests for jaxrl.lm.tokenizer: CharTokenizer, load_tokenizer and batching helpers."""

import json

import numpy as np
import pytest

from jaxrl.lm.tokenizer import (
    CharTokenizer,
    HFTokenizer,
    Tokenizer,
    decode_completions,
    encode_batch_left_padded,
    load_tokenizer,
)

CORPUS = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog",
    "reinforcement learning with language models",
]


def _train_bpe(directory, *, config=None, special_map=None):
    """Train a tiny byte-level BPE on CORPUS and save it (plus configs) in ``directory``."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = RustTokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    tok.save(str(directory / "tokenizer.json"))
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if special_map is not None:
        (directory / "special_tokens_map.json").write_text(json.dumps(special_map))
    return tok


def test_char_tokenizer_round_trip_and_ids():
    tok = CharTokenizer("abc +=0123456789")
    assert isinstance(tok, Tokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.vocab_size == 3 + 16
    ids = tok.encode("12+3=15", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert all(3 <= i < tok.vocab_size for i in ids[1:-1])
    assert tok.decode(ids) == "12+3=15"
    assert tok.decode(ids, skip_special_tokens=False) == "<bos>12+3=15<eos>"
    assert tok.decode_batch(tok.encode_batch(["ab", "c"])) == ["ab", "c"]


def test_char_tokenizer_rejects_bad_input():
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer("aab")
    tok = CharTokenizer("ab")
    with pytest.raises(ValueError, match="not in the alphabet"):
        tok.encode("abz")
    with pytest.raises(ValueError, match="outside vocabulary"):
        tok.decode([99])


def test_left_padding_puts_last_token_in_last_column():
    tok = CharTokenizer("abcd")
    tokens, mask = encode_batch_left_padded(tok, ["abc", "d", ""])
    assert tokens.dtype == np.int32 and mask.dtype == bool
    assert tokens.shape == mask.shape == (3, 3)
    np.testing.assert_array_equal(mask, [[1, 1, 1], [0, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(tokens[1], [0, 0, tok.encode("d")[0]])
    assert np.all(tokens[~mask] == tok.pad_id)
    tokens, mask = encode_batch_left_padded(tok, ["ab"], max_len=5)
    assert tokens.shape == (1, 5) and mask.sum() == 2 and mask[0, -1]
    with pytest.raises(ValueError, match="max_len=2"):
        encode_batch_left_padded(tok, ["abc"], max_len=2)


def test_decode_completions_uses_mask():
    tok = CharTokenizer("abcd")
    comp = np.array([[3, 4, tok.eos_id, 5], [6, 6, 6, 6]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=bool)
    assert decode_completions(tok, comp, mask) == ["ab", "dd"]


def test_load_tokenizer_round_trip_with_configs(tmp_path):
    raw = _train_bpe(
        tmp_path,
        config={"eos_token": {"content": "</s>", "special": True}, "bos_token": "<s>"},
        special_map={"pad_token": "<pad>", "eos_token": "<pad>"},
    )
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, HFTokenizer) and isinstance(tok, Tokenizer)
    # tokenizer_config.json wins over special_tokens_map.json for eos.
    assert tok.eos_id == raw.token_to_id("</s>")
    assert tok.bos_id == raw.token_to_id("<s>")
    assert tok.pad_id == raw.token_to_id("<pad>")
    assert tok.vocab_size == raw.get_vocab_size()
    for text in CORPUS + ["the cat and the log"]:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_id  # post-processor adds BOS, as in HF
        assert tok.decode(ids) == text
        assert tok.encode(text, add_special_tokens=False) == ids[1:]
    assert tok.decode_batch(tok.encode_batch(CORPUS)) == CORPUS
    # Loading the file path directly gives the same ids.
    assert load_tokenizer(tmp_path / "tokenizer.json").encode("a cat") == tok.encode("a cat")


def test_load_tokenizer_without_configs_falls_back(tmp_path):
    _train_bpe(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert tok.eos_id is None and tok.bos_id is None and tok.pad_id == 0
    tokens, mask = encode_batch_left_padded(tok, ["a cat", "the dog sat on the log"])
    assert tokens.shape[0] == 2 and mask[0].sum() < mask[1].sum()
    assert decode_completions(tok, tokens, mask) == ["a cat", "the dog sat on the log"]


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path)
    _train_bpe(tmp_path, config={"eos_token": "<nope>"})
    with pytest.raises(ValueError, match="eos_token"):
        load_tokenizer(tmp_path)
