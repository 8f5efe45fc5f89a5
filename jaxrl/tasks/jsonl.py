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

from jaxrl.config import ConfigError

from .base import Example, Task

KNOBS = {"num_eval": 256, "split_seed": 0}


def read_examples(path: str | pathlib.Path) -> list[Example]:
    """The examples of a JSONL file, in file order; `ConfigError` naming file and line."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"invalid task='jsonl:{path}': no such file")
    examples = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                examples.append(_parse_line(path, lineno, line))
    if not examples:
        raise ConfigError(f"invalid task='jsonl:{path}': the file has no examples")
    return examples


def _parse_line(path: pathlib.Path, lineno: int, line: str) -> Example:
    where = f"{path}:{lineno}"
    try:
        record: Any = json.loads(line)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected an object with 'prompt' and 'answer'")
    for key in ("prompt", "answer"):
        if key not in record:
            raise ConfigError(f"{where}: missing key {key!r}")
        if not isinstance(record[key], str):
            found = type(record[key]).__name__
            raise ConfigError(f"{where}: {key!r} must be a string, got {found}")
    if not record["prompt"]:
        raise ConfigError(f"{where}: 'prompt' must not be empty")
    return Example(record["prompt"], record["answer"])


class JsonlTask(Task):
    """The examples of one JSONL file, split by prompt (see module docstring)."""

    name = "jsonl"

    def __init__(self, path: str | pathlib.Path, num_eval: int = 256, split_seed: int = 0):
        if not (isinstance(num_eval, int) and num_eval >= 1):
            raise ConfigError(f"invalid num_eval={num_eval!r}: must be an integer >= 1")
        self.path = pathlib.Path(path)
        examples = read_examples(self.path)
        prompts = list(dict.fromkeys(e.prompt for e in examples))
        if len(prompts) < 2:
            raise ConfigError(
                f"invalid task='jsonl:{self.path}': needs at least 2 distinct prompts to hold "
                f"one out for evaluation, found {len(prompts)}"
            )
        order = np.random.default_rng(split_seed).permutation(len(prompts))
        num_held = min(num_eval, max(1, len(prompts) // 5))
        held = {prompts[i] for i in order[:num_held]}
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
