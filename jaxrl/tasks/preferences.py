"""Preference pairs (prompt, chosen, rejected) for DPO and reward models, with a held-out split.

Two sources, one interface (`PreferenceData`):

* `PairFile`: a JSONL file with one `{"prompt", "chosen", "rejected"}` object per
  non-blank line (strings; the prompt non-empty; other keys ignored). Bad lines are
  `ConfigError`s naming the file and the line, raised before a run writes anything. The
  split is the `jsonl` task's (`jaxrl/tasks/jsonl.py`): of the distinct prompts,
  `min(num_eval, max(1, n // 5))` chosen by `split_seed` are held out with every pair
  that has them. Training walks the remaining pairs in epochs, each a fresh permutation.
* `TaskPairs`: synthetic pairs from any task with an answer checker (`addition`,
  `countdown`, `strings`, `jsonl:PATH`): the chosen completion is the task's reference
  answer, the rejected one a seeded corruption of it (`corrupt_answer`: for a number,
  half the time the answer off by 1 to 9, else one digit changed; for other text, one
  character replaced by another of its kind), redrawn until the task's own check says
  it is wrong. The prompts are the task's, so the held-out pairs are built on the task's
  held-out prompts and no training pair ever shares a prompt with them.

A batch is a pure function of `(seed, stream, index)`, so a data loader's position is a
counter and a resumed run redraws exactly the batches an uninterrupted one saw. A
`PairFile` is also a `Task` whose examples are the prompts with their chosen
completions (what a character tokenizer's alphabet and an SFT warm start would use).
"""

from __future__ import annotations

import abc
import pathlib
import string
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task
from .jsonl import held_out_prompts, read_records

PAIR_KEYS = ("prompt", "chosen", "rejected")
MAX_CORRUPTION_TRIES = 64  # draws of a wrong answer before giving up on an example


class Pair(NamedTuple):
    """One prompt, the completion preferred for it and the one rejected."""

    prompt: str
    chosen: str
    rejected: str


class PreferenceData(abc.ABC):
    """A seeded source of preference pairs with a fixed held-out split.

    `task` is the verifiable task behind synthetic pairs (so a trainer can also measure
    held-out exact match), None for a file; `num_train` the number of training pairs of
    a finite source (None for an endless stream).
    """

    task: Task | None = None
    num_train: int | None = None

    @abc.abstractmethod
    def train_batch(self, seed: int, stream: int, index: int, size: int) -> list[Pair]:
        """Batch `index` (0, 1, ...) of `size` training pairs of stream `stream` (an
        agent) of a run seeded `seed`; a pure function of its arguments."""

    @abc.abstractmethod
    def eval_pairs(self) -> list[Pair]:
        """The held-out pairs: fixed by the split seed, the same on every call."""

    @abc.abstractmethod
    def longest_pairs(self) -> Sequence[Pair]:
        """Pairs whose chosen and rejected rows are at least as long as any the source
        can produce, in characters (to check a run's rows fit before it starts)."""


# ---------------------------------------------------------------------- a JSONL file
def read_pairs(path: str | pathlib.Path, source: str | None = None) -> list[Pair]:
    """The pairs of a JSONL file in file order; `ConfigError` naming the file and line.
    `source` names the option that gave the file in messages (default "data='PATH'")."""
    source = source or f"data={str(path)!r}"
    return [Pair(*r) for r in read_records(path, PAIR_KEYS, source, "preference pairs")]


class PairFile(Task, PreferenceData):
    """The pairs of one JSONL file, split by prompt (see the module docstring)."""

    name = "pairs"

    def __init__(self, path: str | pathlib.Path, num_eval: int = 256, split_seed: int = 0):
        self.path = pathlib.Path(path)
        source = f"data={str(path)!r}"
        pairs = read_pairs(self.path, source)
        held = held_out_prompts([p.prompt for p in pairs], num_eval, split_seed, source)
        self._train = [p for p in pairs if p.prompt not in held]
        self._eval = [p for p in pairs if p.prompt in held]
        self.num_train = len(self._train)
        self._alphabet = "".join(sorted({c for p in pairs for c in "".join(p)}))
        self._epochs: dict[tuple[int, int, int], np.ndarray] = {}

    def _epoch_order(self, seed: int, stream: int, epoch: int) -> np.ndarray:
        key = (seed, stream, epoch)
        if key not in self._epochs:
            if len(self._epochs) > 8:  # a loader reads one or two epochs at a time
                self._epochs.clear()
            self._epochs[key] = np.random.default_rng(key).permutation(self.num_train)
        return self._epochs[key]

    def train_batch(self, seed: int, stream: int, index: int, size: int) -> list[Pair]:
        """Positions `index * size ...` of the stream's epochs, each epoch a permutation
        of the training pairs drawn from `(seed, stream, epoch)`."""
        batch = []
        for position in range(index * size, (index + 1) * size):
            epoch, i = divmod(position, self.num_train)
            batch.append(self._train[self._epoch_order(seed, stream, epoch)[i]])
        return batch

    def eval_pairs(self) -> list[Pair]:
        return list(self._eval)

    def longest_pairs(self) -> Sequence[Pair]:
        return self._train + self._eval

    # -- the file as a Task: prompts and their chosen completions
    @property
    def alphabet(self) -> str:
        return self._alphabet

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return [Example(*self._train[i][:2]) for i in rng.integers(0, self.num_train, size=n)]

    def eval_examples(self) -> list[Example]:
        return [Example(p.prompt, p.chosen) for p in self._eval]

    def longest_examples(self) -> Sequence[Example]:
        return [Example(p.prompt, c) for p in self._train + self._eval for c in p[1:]]


# ---------------------------------------------------------------------- a verifiable task
def corrupt_answer(
    answer: str,
    rng: np.random.Generator,
    alphabet: str,
    is_correct: Callable[[str], bool],
) -> str:
    """A wrong answer of the same length as `answer`, drawn with `rng`.

    A number (all digits) is, half the time, moved by +-1..9 when that keeps its digit
    count; otherwise (and for any other text) one position is replaced by a different
    character of the same kind from `alphabet` (digit, lower- or upper-case letter, or
    other non-space symbol), never a leading zero. Redrawn until `is_correct` rejects
    it; `ConfigError` after `MAX_CORRUPTION_TRIES` draws (e.g. an empty answer).
    """
    for _ in range(MAX_CORRUPTION_TRIES if answer else 0):
        candidate = _corrupt_once(answer, rng, alphabet)
        if candidate != answer and not is_correct(candidate):
            return candidate
    raise ConfigError(
        f"cannot make a wrong answer for {answer!r}: {MAX_CORRUPTION_TRIES} corruptions "
        "were all judged correct (synthetic preference pairs need non-empty answers that "
        "one changed character makes wrong)"
    )


def _corrupt_once(answer: str, rng: np.random.Generator, alphabet: str) -> str:
    if answer.isdigit() and rng.random() < 0.5:
        moved = str(int(answer) + int(rng.choice([-1, 1])) * int(rng.integers(1, 10)))
        if len(moved) == len(answer) and not moved.startswith("-"):
            return moved
    position = int(rng.integers(len(answer)))
    old = answer[position]
    kinds = (string.digits, string.ascii_lowercase, string.ascii_uppercase)
    kind = next((k for k in kinds if old in k), None)
    symbols = [c for c in alphabet if c not in "".join(kinds) and not c.isspace()]
    pool = [c for c in (kind or symbols) if c != old]
    if position == 0 and len(answer) > 1 and answer.isdigit():
        pool = [c for c in pool if c != "0"]
    if not pool:
        return answer  # nothing to swap in: the caller draws again
    return answer[:position] + str(rng.choice(pool)) + answer[position + 1 :]


class TaskPairs(PreferenceData):
    """Synthetic pairs from a task: its reference answer over a corrupted one."""

    def __init__(self, task: Task, split_seed: int = 0):
        self.task = task
        self.split_seed = split_seed
        self._eval: list[Pair] | None = None

    def _pairs(self, examples: Sequence[Example], rng: np.random.Generator) -> list[Pair]:
        def wrong(example: Example) -> str:
            return corrupt_answer(
                example.answer,
                rng,
                self.task.alphabet,
                lambda text: self.task.is_correct(text, example.answer),
            )

        return [Pair(e.prompt, e.answer, wrong(e)) for e in examples]

    def train_batch(self, seed: int, stream: int, index: int, size: int) -> list[Pair]:
        """The task's training examples and their corruptions, all drawn from
        `numpy.random.default_rng((seed, stream, index))`."""
        rng = np.random.default_rng((seed, stream, index))
        return self._pairs(self.task.sample_train(rng, size), rng)

    def eval_pairs(self) -> list[Pair]:
        """The task's held-out examples, corrupted with `default_rng((split_seed, 1))`."""
        if self._eval is None:
            rng = np.random.default_rng((self.split_seed, 1))
            self._eval = self._pairs(self.task.eval_examples(), rng)
        return list(self._eval)

    def longest_pairs(self) -> Sequence[Pair]:
        """Corruptions keep the answer's length: the task's longest examples, twice."""
        return [Pair(e.prompt, e.answer, e.answer) for e in self.task.longest_examples()]


def make_pairs(task: Task, split_seed: int = 0) -> PreferenceData:
    """The preference pairs of `task`: a `PairFile` is its own, any other task gives
    synthetic `TaskPairs`."""
    return task if isinstance(task, PairFile) else TaskPairs(task, split_seed)
