"""What every task is: a seeded source of (prompt, answer) pairs with a held-out split.

A `Task` draws training examples from a `numpy.random.Generator` the caller owns (so a
data loader's position is the caller's RNG state, and a resumed run can redraw exactly
the same batches) and holds a fixed held-out split that no training example ever shares
a prompt with. `is_correct` decides whether a model's completion answers a prompt;
here it is exact match after stripping whitespace, the check SFT evaluates with and the
first reward the GRPO issue builds on.

A `StepTask` is a task whose answers are written in steps (split by a separator) and
whose verifier labels each step correct or not: the data of a process reward model
(`jaxrl train prm`) and the `verifier` source of process rewards in GRPO and PPO-LM.

What does not live here: tokenization and padding (the algorithm's data loader does
that), and the concrete tasks (one module each: `addition.py`, `jsonl.py`,
`addition_steps.py`).
"""

from __future__ import annotations

import abc
import string
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

# Characters every character-level model gets, so a model trained on one task can be
# fine-tuned on another without growing its vocabulary: printable ASCII and newline.
BASE_ALPHABET: str = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")


class Example(NamedTuple):
    """One prompt and its reference answer (the completion a model should produce)."""

    prompt: str
    answer: str


def exact_match(completion: str, answer: str) -> bool:
    """True when `completion` equals `answer` once surrounding whitespace is stripped."""
    return completion.strip() == answer.strip()


class Task(abc.ABC):
    """A seeded source of `Example`s with a disjoint held-out split (see module docstring).

    Subclasses implement `sample_train`, `eval_examples`, `longest_examples` and
    `alphabet`; `is_correct` defaults to `exact_match`.
    """

    name: str = ""

    @abc.abstractmethod
    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        """`n` training examples drawn with `rng`; never one with a held-out prompt."""

    @abc.abstractmethod
    def eval_examples(self) -> list[Example]:
        """The held-out split: fixed by the task's seed, the same on every call."""

    @abc.abstractmethod
    def longest_examples(self) -> Sequence[Example]:
        """Examples at least as long as any the task can produce, in characters.

        Algorithms encode these to check, before a run starts, that every example fits
        the model's context (a finite dataset returns all its examples).
        """

    @property
    @abc.abstractmethod
    def alphabet(self) -> str:
        """Every character that may appear in a prompt or an answer."""

    def is_correct(self, completion: str, answer: str) -> bool:
        """Whether `completion` answers correctly; exact match after stripping."""
        return exact_match(completion, answer)


class StepExample(NamedTuple):
    """A prompt, a solution written as steps, and each step's label (True: correct).

    The PRM trains on these (Lightman et al. 2023, "Let's verify step by step": one binary
    label per step); `solution` joins the steps with the task's separator."""

    prompt: str
    steps: tuple[str, ...]
    labels: tuple[bool, ...]


class StepTask(Task):
    """A task whose completions are steps joined by `separator`, with a step verifier.

    Subclasses implement `step_labels` (the verifier) and `labelled_solutions` (correct
    and corrupted solutions with their labels: the training data of a PRM); splitting and
    joining are here. The separator must not be whitespace (completions are stripped) and
    must not occur inside a step.
    """

    separator: str = ";"

    def split_steps(self, completion: str) -> list[str]:
        """The steps of `completion`: its text (stripped) split at every separator; an
        empty completion is one empty step."""
        return completion.strip().split(self.separator)

    def join_steps(self, steps: Sequence[str]) -> str:
        """The completion that writes `steps`."""
        return self.separator.join(steps)

    @abc.abstractmethod
    def step_labels(self, completion: str, example: Example) -> list[bool]:
        """One verdict per step of `completion` (`split_steps`) as an answer to `example`."""

    @abc.abstractmethod
    def labelled_solutions(
        self, rng: np.random.Generator, examples: Sequence[Example], corrupt_fraction: float
    ) -> list[StepExample]:
        """A solution of each example with its step labels: the reference with probability
        `1 - corrupt_fraction`, else a corrupted one, all drawn with `rng`."""

    def prm_eval_examples(self, corrupt_fraction: float = 0.5) -> list[StepExample]:
        """Labelled solutions of the held-out prompts, fixed by the task's split: the
        held-out set of a process reward model."""
        rng = np.random.default_rng(getattr(self, "split_seed", 0) + 1)
        return self.labelled_solutions(rng, self.eval_examples(), corrupt_fraction)
