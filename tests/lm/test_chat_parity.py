"""`jaxrl.lm.chat` against `transformers`' `apply_chat_template` on the same Llama-3-,
Qwen2.5- and Qwen3-style templates (tests/lm/fixtures/chat_templates): the same text,
byte for byte, and the same assistant-token mask (`return_assistant_tokens_mask`, which
reads `{% generation %}` blocks). Optional tier: it needs transformers, which CI installs
in its optional venv (.ci/optional_venv.sh)."""

from __future__ import annotations

import json
import pathlib

import pytest

from jaxrl.lm.chat import ChatTemplate, tokenize_chat

pytestmark = pytest.mark.optional
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEMPLATES = pathlib.Path(__file__).parent / "fixtures" / "chat_templates"
_CASES = json.loads((TEMPLATES / "conversations.json").read_text())
CONVERSATION, TOOLS, TOOL_CONVERSATION = (
    _CASES["conversation"],
    _CASES["tools"],
    _CASES["tool_conversation"],
)
QWEN3_TURNS = [
    {"role": "system", "content": "Think, then answer."},
    {"role": "user", "content": "2+3?"},
    {"role": "assistant", "content": "<think>\nadd\n</think>\n\n5"},
    {"role": "user", "content": "4+4?"},
    {"role": "assistant", "content": "<think>\nadd again\n</think>\n\n8"},
]
CASES = {
    "llama3_style": [(CONVERSATION, None), (TOOL_CONVERSATION, TOOLS)],
    "qwen25_style": [(CONVERSATION, None), (TOOL_CONVERSATION, TOOLS), (CONVERSATION[:1], TOOLS)],
    "qwen3_style": [(QWEN3_TURNS, None), (QWEN3_TURNS[:2], None)],
}


def _hf_tokenizer(source: str, texts: list[str]):
    """A character-level `PreTrainedTokenizerFast` over the characters of `texts`, with
    `source` as its chat template (no files, no download)."""
    alphabet = sorted({c for text in texts for c in text})
    vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(alphabet)}}
    model = tokenizers.models.WordLevel(vocab, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split("", behavior="isolated")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    hf.chat_template = source
    hf.bos_token = "<|begin_of_text|>"
    return hf


class _CharBackend:
    """jaxrl's view of the same character-level tokenizer (ids and offsets)."""

    def __init__(self, hf):
        self.backend = hf.backend_tokenizer


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_the_same_text_as_transformers(name, generation_prompt):
    source = (TEMPLATES / f"{name}.jinja").read_text()
    ours = ChatTemplate(source, bos_token="<|begin_of_text|>")
    for messages, tools in CASES[name]:
        expected_texts = [
            ours.render(messages, tools=tools, add_generation_prompt=generation_prompt)
        ]
        hf = _hf_tokenizer(source, expected_texts)
        theirs = hf.apply_chat_template(
            messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=False
        )
        assert expected_texts[0] == theirs


def test_the_same_assistant_mask_as_transformers_on_generation_blocks():
    source = (TEMPLATES / "qwen3_style.jinja").read_text()
    ours = ChatTemplate(source)
    text = ours.render(QWEN3_TURNS)
    hf = _hf_tokenizer(source, [text])
    theirs = hf.apply_chat_template(
        QWEN3_TURNS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = tokenize_chat(ours, _CharBackend(hf), QWEN3_TURNS)
    assert ids == list(theirs["input_ids"])
    assert mask == list(theirs["assistant_masks"])
    assert sum(mask) > 0
