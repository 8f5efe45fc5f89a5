"""A user's JSONL file of `{"prompt": ..., "answer": ...}` objects as a task (`jsonl:PATH`).

Each non-blank line is one JSON object with string fields `prompt` (non-empty) and
`answer`; other keys are ignored. Everything else is a `ConfigError` naming the file and
the line number, raised when the task is made (before a run writes anything).

Split: the distinct prompts, in order of first appearance, are permuted by
`numpy.random.default_rng(split_seed)` and the first `min(num_eval, max(1, n // 5))` are
held out (at most a fifth of the prompts, so small files keep most for training). Every
line with a held-out prompt is held out, so a prompt repeated with another answer cannot
leak into training. Training examples are drawn uniformly with replacement.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"num_eval": 256, "split_seed": 0}


def read_examples(path: str | pathlib.Path) -> list[Example]:
    """The examples of a JSONL file, in file order; `ConfigError` naming file and line."""
    path = pathlib.Path(path)
    records = read_records(path, ("prompt", "answer"), f"task='jsonl:{path}'", "examples")
    return [Example(*record) for record in records]


def read_records(
    path: str | pathlib.Path, keys: Sequence[str], source: str, what: str
) -> list[tuple[str, ...]]:
    """The string fields `keys` of each non-blank line's JSON object, in file order.

    `keys[0]` is the prompt and must not be empty; other keys are ignored. A bad line is
    a `ConfigError` naming the file and line; a missing or empty file one naming
    `source` (e.g. "task='jsonl:PATH'"), with `what` the file's records ("examples").
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"invalid {source}: no such file")
    records = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                records.append(_parse_line(path, lineno, line, keys))
    if not records:
        raise ConfigError(f"invalid {source}: the file has no {what}")
    return records


def _parse_line(path: pathlib.Path, lineno: int, line: str, keys: Sequence[str]) -> tuple[str, ...]:
    where = f"{path}:{lineno}"
    try:
        record: Any = json.loads(line)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected an object with {' and '.join(map(repr, keys))}")
    for key in keys:
        if key not in record:
            raise ConfigError(f"{where}: missing key {key!r}")
        if not isinstance(record[key], str):
            found = type(record[key]).__name__
            raise ConfigError(f"{where}: {key!r} must be a string, got {found}")
    if not record[keys[0]]:
        raise ConfigError(f"{where}: {keys[0]!r} must not be empty")
    return tuple(record[key] for key in keys)


def held_out_prompts(
    prompts: Sequence[str], num_eval: int, split_seed: int, source: str
) -> set[str]:
    """The held-out prompts of a file (see the module docstring): of the distinct
    `prompts`, in order of first appearance, `min(num_eval, max(1, n // 5))` chosen by
    `split_seed`. `ConfigError` naming `source` when fewer than 2 are distinct."""
    if not (isinstance(num_eval, int) and num_eval >= 1):
        raise ConfigError(f"invalid num_eval={num_eval!r}: must be an integer >= 1")
    distinct = list(dict.fromkeys(prompts))
    if len(distinct) < 2:
        raise ConfigError(
            f"invalid {source}: needs at least 2 distinct prompts to hold one out for "
            f"evaluation, found {len(distinct)}"
        )
    order = np.random.default_rng(split_seed).permutation(len(distinct))
    return {distinct[i] for i in order[: min(num_eval, max(1, len(distinct) // 5))]}


class JsonlTask(Task):
    """The examples of one JSONL file, split by prompt (see module docstring)."""

    name = "jsonl"

    def __init__(self, path: str | pathlib.Path, num_eval: int = 256, split_seed: int = 0):
        self.path = pathlib.Path(path)
        examples = read_examples(self.path)
        held = held_out_prompts(
            [e.prompt for e in examples], num_eval, split_seed, f"task='jsonl:{self.path}'"
        )
        self._train = [e for e in examples if e.prompt not in held]
        self._eval = [e for e in examples if e.prompt in held]
        self._alphabet = "".join(sorted({c for e in examples for c in e.prompt + e.answer}))

    @property
    def alphabet(self) -> str:
        return self._alphabet

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return [self._train[i] for i in rng.integers(0, len(self._train), size=n)]

    def eval_examples(self) -> list[Example]:
        return list(self._eval)

    def longest_examples(self) -> Sequence[Example]:
        return self._train + self._eval


def make(arg: str | None, **knobs: int) -> JsonlTask:
    """`jsonl:PATH`; knobs: `num_eval`, `split_seed`."""
    if not arg:
        raise ConfigError("invalid task='jsonl': give the file as jsonl:PATH")
    return JsonlTask(arg, **knobs)
