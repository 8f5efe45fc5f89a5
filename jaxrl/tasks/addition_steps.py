"""Step-by-step addition with a step verifier: the task of process reward models.

Prompt `"357+486="` (as `addition`), answer `"13;14;08;843"`: one step per column, the
least significant first, each the column's sum with the carry in written as two digits
(the tens digit is the carry out, the units digit the answer's digit), then the sum
itself as the last step; steps are joined by the separator `;`. With `digits` digits a
solution has `digits + 1` steps.

The verifier (`step_labels`) labels step k correct when it and every step before it
equal the reference's: after the first error every step is incorrect. That is
Math-Shepherd's hard label (Wang et al. 2024, "Math-Shepherd": a step is good when the
correct answer can still be reached from it; here a wrong column always makes a wrong
sum) and the first-error convention of PRM800K (Lightman et al. 2023), where labelling
stops at the first wrong step. The outcome check (`is_correct`) reads the last step
only: the final answer, as a final-answer checker of a math task would.

PRM training data (`labelled_solutions`): the reference solution, or (with probability
`corrupt_fraction`) a corrupted one, Math-Shepherd style: a step k drawn uniformly gets a
wrong value, and the steps after it are computed correctly *from the written steps* (the
wrong carry propagates), so the solution stays locally consistent after its first error
and a PRM must check each step against the operands to find it. A wrong column step is
any other two-digit value 00..19; a wrong final answer is the sum off by 1..9.

The held-out split is `addition`'s (same prompts for the same `digits`, `num_eval`,
`split_seed`), and the held-out PRM examples are fixed by `split_seed`
(`StepTask.prm_eval_examples`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .addition import Addition
from .base import Example, StepExample, StepTask

KNOBS = {"digits": 3, "num_eval": 256, "split_seed": 0}


def column_steps(a: int, b: int, digits: int) -> list[str]:
    """The reference steps of `a + b`: each column's sum with the carry in, two digits,
    least significant column first, then the sum."""
    steps, carry = [], 0
    for k in range(digits):
        total = (a // 10**k) % 10 + (b // 10**k) % 10 + carry
        steps.append(f"{total:02d}")
        carry = total // 10
    return [*steps, str(a + b)]


def _operands(prompt: str) -> tuple[int, int]:
    left, _, right = prompt.rstrip("=").partition("+")
    return int(left), int(right)


class AdditionSteps(StepTask, Addition):
    """`digits`-digit addition written column by column (see the module docstring)."""

    name = "addition_steps"
    separator = ";"

    def __init__(self, digits: int = 3, num_eval: int = 256, split_seed: int = 0) -> None:
        super().__init__(digits, num_eval, split_seed)
        self.split_seed = split_seed

    @property
    def alphabet(self) -> str:
        return "0123456789+=" + self.separator

    def _example(self, pair_id: int) -> Example:
        prompt = super()._example(pair_id).prompt
        return Example(prompt, self.join_steps(column_steps(*_operands(prompt), self.digits)))

    def longest_examples(self) -> Sequence[Example]:
        top = 10**self.digits - 1
        prompt = f"{top}+{top}="
        return [Example(prompt, self.join_steps(column_steps(top, top, self.digits)))]

    def is_correct(self, completion: str, answer: str) -> bool:
        """The outcome: the completion's last step is the reference's last (the sum)."""
        return self.split_steps(completion)[-1] == self.split_steps(answer)[-1]

    def step_labels(self, completion: str, example: Example) -> list[bool]:
        """Step k is correct when steps 0..k all equal the reference's (see the module
        docstring); steps beyond the reference's count are incorrect."""
        reference = self.split_steps(example.answer)
        labels, ok = [], True
        for k, step in enumerate(self.split_steps(completion)):
            ok = ok and k < len(reference) and step == reference[k]
            labels.append(ok)
        return labels

    def labelled_solutions(
        self, rng: np.random.Generator, examples: Sequence[Example], corrupt_fraction: float
    ) -> list[StepExample]:
        if not 0 <= corrupt_fraction <= 1:
            raise ConfigError(
                f"invalid corrupt_fraction={corrupt_fraction!r}: must be a fraction in [0, 1]"
            )
        out = []
        for example in examples:
            a, b = _operands(example.prompt)
            steps = column_steps(a, b, self.digits)
            first_error = len(steps)  # none
            if rng.random() < corrupt_fraction:
                first_error = int(rng.integers(0, len(steps)))
                steps = self._corrupted(a, b, first_error, rng)
            labels = tuple(k < first_error for k in range(len(steps)))
            out.append(StepExample(example.prompt, tuple(steps), labels))
        return out

    def _corrupted(self, a: int, b: int, k: int, rng: np.random.Generator) -> list[str]:
        """The steps of `a + b` with step `k` wrong and the later steps computed from it."""
        if k == self.digits:  # the final answer, off by 1..9 (never negative)
            steps = column_steps(a, b, self.digits)
            offsets = [d for d in range(-9, 10) if d != 0 and a + b + d >= 0]
            return [*steps[:-1], str(a + b + int(rng.choice(offsets)))]
        steps, carry, value = [], 0, 0
        for j in range(self.digits):
            total = (a // 10**j) % 10 + (b // 10**j) % 10 + carry
            if j == k:
                total = int(rng.choice([v for v in range(20) if v != total]))
            steps.append(f"{total:02d}")
            value += (total % 10) * 10**j
            carry = total // 10
        return [*steps, str(value + carry * 10**self.digits)]


def make(arg: str | None, **knobs: int) -> AdditionSteps:
    """`addition_steps` takes no argument after a colon; knobs: `digits`, `num_eval`,
    `split_seed`."""
    if arg is not None:
        raise ConfigError(
            f"invalid task='addition_steps:{arg}': addition_steps takes no ':' argument"
        )
    return AdditionSteps(**knobs)
