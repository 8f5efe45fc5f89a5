"""Tokenizers for the language-model policy stack.

What lives here:
- ``Tokenizer``: the small protocol the rest of ``jaxrl.lm`` relies on
  (``encode``, ``decode``, ``pad_id``, ``eos_id``, ``bos_id``, ``vocab_size``).
- ``CharTokenizer``: a character-level tokenizer over a given alphabet, for
  synthetic tasks and tests (nothing to download).
- ``HFTokenizer`` / ``load_tokenizer``: a thin wrapper around the ``tokenizers``
  library's ``tokenizer.json``, with special-token ids read from
  ``tokenizer_config.json`` / ``special_tokens_map.json`` when present.
- ``encode_batch_left_padded`` / ``decode_completions``: host-side helpers that
  turn text into the left-padded ``(tokens, mask)`` arrays ``generate`` expects,
  and completions back into text.

What does not: chat templates (callers format their prompts) and anything that
runs under ``jit`` -- tokenization is host-side Python.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "CharTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "decode_completions",
    "encode_batch_left_padded",
    "load_tokenizer",
]


@runtime_checkable
class Tokenizer(Protocol):
    """What ``jaxrl.lm`` needs from a tokenizer.

    ``pad_id`` is always an int (used to fill padding); ``eos_id`` / ``bos_id``
    may be ``None`` when the vocabulary has no such token.
    """

    @property
    def pad_id(self) -> int: ...

    @property
    def eos_id(self) -> int | None: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


# --------------------------------------------------------------------------- chars


@dataclasses.dataclass(frozen=True)
class CharTokenizer:
    """Character-level tokenizer: ids ``0, 1, 2`` are pad, bos, eos; then the alphabet.

    ``encode`` maps each character to its id (no BOS/EOS added unless asked);
    unknown characters raise ``ValueError`` so synthetic tasks fail loudly.
    ``decode`` drops special tokens by default.
    """

    alphabet: str
    pad_token: str = "<pad>"
    bos_token: str = "<bos>"
    eos_token: str = "<eos>"

    def __post_init__(self) -> None:
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet has repeated characters: {self.alphabet!r}")
        if not self.alphabet:
            raise ValueError("alphabet must not be empty")

    @property
    def num_special(self) -> int:
        """Number of special ids before the first character id."""
        return 3

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    @property
    def vocab_size(self) -> int:
        return self.num_special + len(self.alphabet)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Character ids of ``text``, optionally framed by BOS / EOS."""
        index = {c: i + self.num_special for i, c in enumerate(self.alphabet)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(f"characters not in the alphabet: {unknown!r}")
        ids = [index[c] for c in text]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens are dropped, or spelled out if not skipped."""
        special = {
            self.pad_id: self.pad_token,
            self.bos_id: self.bos_token,
            self.eos_id: self.eos_token,
        }
        out = []
        for i in ids:
            i = int(i)
            if i in special:
                if not skip_special_tokens:
                    out.append(special[i])
            elif self.num_special <= i < self.vocab_size:
                out.append(self.alphabet[i - self.num_special])
            else:
                raise ValueError(f"token id {i} outside vocabulary of size {self.vocab_size}")
        return "".join(out)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` over a list."""
        return [self.encode(t) for t in texts]

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        """``decode`` over a list."""
        return [self.decode(ids) for ids in batch]


# --------------------------------------------------------------------------- HF json


def _token_content(entry: Any) -> str | None:
    """A special-token entry is either a string or ``{"content": str, ...}``."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def _read_json(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data if isinstance(data, dict) else {}


def _special_tokens(directory: str) -> dict[str, str]:
    """``{"pad_token": ..., "eos_token": ..., "bos_token": ...}`` from the config files.

    ``tokenizer_config.json`` wins over ``special_tokens_map.json`` (as in HF).
    """
    found: dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        data = _read_json(os.path.join(directory, name))
        for key in ("pad_token", "eos_token", "bos_token"):
            content = _token_content(data.get(key))
            if content is not None:
                found[key] = content
    return found


class HFTokenizer:
    """``tokenizers.Tokenizer`` behind the ``Tokenizer`` protocol.

    ``encode`` applies the tokenizer.json post-processor (``add_special_tokens``,
    default True, as Hugging Face does), so a Llama-style BOS is added if the
    file says so. ``pad_id`` falls back to ``eos_id`` and then to 0 when the
    vocabulary defines no pad token (common for causal LMs; padded positions are
    masked anyway).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        pad_token: str | None = None,
        eos_token: str | None = None,
        bos_token: str | None = None,
    ) -> None:
        self._tok = tokenizer
        self._eos_id = self._lookup(eos_token, "eos_token")
        self._bos_id = self._lookup(bos_token, "bos_token")
        pad = self._lookup(pad_token, "pad_token")
        self._pad_id = pad if pad is not None else (self._eos_id if self._eos_id is not None else 0)

    def _lookup(self, token: str | None, what: str) -> int | None:
        if token is None:
            return None
        idx = self._tok.token_to_id(token)
        if idx is None:
            raise ValueError(f"{what} {token!r} is not in the tokenizer's vocabulary")
        return int(idx)

    @property
    def backend(self) -> Any:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tok

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def eos_id(self) -> int | None:
        return self._eos_id

    @property
    def bos_id(self) -> int | None:
        return self._bos_id

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (special tokens dropped by default)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def encode_batch(
        self, texts: Sequence[str], *, add_special_tokens: bool = True
    ) -> list[list[int]]:
        """``encode`` over a list (parallel in the Rust backend)."""
        encs = self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [list(e.ids) for e in encs]

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, skip_special_tokens: bool = True
    ) -> list[str]:
        """``decode`` over a list."""
        return self._tok.decode_batch(
            [[int(i) for i in ids] for ids in batch], skip_special_tokens=skip_special_tokens
        )


def load_tokenizer(path: str | os.PathLike[str]) -> HFTokenizer:
    """Load a Hugging Face ``tokenizer.json`` (a file, or a directory holding one).

    Special tokens come from ``tokenizer_config.json`` / ``special_tokens_map.json``
    beside it when present. Nothing is downloaded.
    """
    try:
        from tokenizers import Tokenizer as _RustTokenizer
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("load_tokenizer needs the `tokenizers` package") from e
    path = os.fspath(path)
    if os.path.isdir(path):
        directory, file = path, os.path.join(path, "tokenizer.json")
    else:
        directory, file = os.path.dirname(path) or ".", path
    if not os.path.exists(file):
        raise FileNotFoundError(f"no tokenizer.json at {file}")
    special = _special_tokens(directory)
    return HFTokenizer(
        _RustTokenizer.from_file(file),
        pad_token=special.get("pad_token"),
        eos_token=special.get("eos_token"),
        bos_token=special.get("bos_token"),
    )


# --------------------------------------------------------------------------- batching


def _encode_all(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    batch = getattr(tokenizer, "encode_batch", None)
    return (
        [list(x) for x in batch(texts)] if callable(batch) else [tokenizer.encode(t) for t in texts]
    )


def encode_batch_left_padded(
    tokenizer: Tokenizer, texts: Sequence[str], max_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Encode ``texts`` into left-padded ``(tokens int32 (B, L), mask bool (B, L))``.

    Left padding puts every prompt's last token in the last column, which is
    what ``generate`` needs to start decoding all rows at the same cache index.
    ``L`` is the longest encoding, or ``max_len`` if given (a fixed ``L`` avoids
    recompiling ``generate`` for every batch); an encoding longer than
    ``max_len`` raises ``ValueError`` rather than being silently truncated.
    """
    if len(texts) == 0:
        raise ValueError("texts must not be empty")
    encoded = _encode_all(tokenizer, texts)
    longest = max(len(e) for e in encoded)
    length = longest if max_len is None else int(max_len)
    if longest > length:
        raise ValueError(f"an encoded text has {longest} tokens, more than max_len={length}")
    tokens = np.full((len(encoded), length), tokenizer.pad_id, dtype=np.int32)
    mask = np.zeros((len(encoded), length), dtype=bool)
    for row, ids in enumerate(encoded):
        if ids:
            tokens[row, length - len(ids) :] = ids
            mask[row, length - len(ids) :] = True
    return tokens, mask


def decode_completions(tokenizer: Tokenizer, tokens: Any, mask: Any | None = None) -> list[str]:
    """Decode completion rows, keeping only positions where ``mask`` is True.

    ``mask`` is typically ``SampleOutput.completion_mask`` (which includes the
    EOS token; ``decode`` drops it as a special token).
    """
    tokens = np.asarray(tokens)
    keep = np.ones(tokens.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    return [tokenizer.decode(row[m].tolist()) for row, m in zip(tokens, keep, strict=True)]


def save_char_tokenizer(tokenizer: CharTokenizer, directory: str | pathlib.Path) -> None:
    """Writes a character tokenizer as Hugging Face `tokenizer.json` + `tokenizer_config.json`.

    A BPE model with no merges over the same ids (so every character is one token), the
    specials as added tokens, bos prepended by the post-processor and a `Fuse` decoder:
    `load_tokenizer(directory).encode(text)` equals `tokenizer.encode(text, add_bos=True)`.
    """
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, processors

    specials = [tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token]
    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({c: i + tokenizer.num_special for i, c in enumerate(tokenizer.alphabet)})
    rust = RustTokenizer(models.BPE(vocab=vocab, merges=[]))
    rust.add_special_tokens(specials)
    rust.decoder = decoders.Fuse()
    rust.post_processor = processors.TemplateProcessing(
        single=f"{tokenizer.bos_token} $A", special_tokens=[(tokenizer.bos_token, tokenizer.bos_id)]
    )
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rust.save(str(directory / "tokenizer.json"))
    special_map = dict(zip(("pad_token", "bos_token", "eos_token"), specials, strict=True))
    (directory / "tokenizer_config.json").write_text(json.dumps(special_map, indent=2) + "\n")
