"""Multi-digit multiplication: prompt `"1234*567="`, answer `"699678"`.

The first factor has exactly `digits` digits and the second `digits - 1` (one digit:
both 0-9), so every prompt has the same length. A pair is identified by its index
`i * m + j` among the operand pairs, and held-out indices are never drawn for training
(as in `addition`). The default 4 x 3 digits is beyond what a small model computes in
its head, which is the point of `tool_multiply` (`jaxrl/tasks/tool_use.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"digits": 4, "num_eval": 256, "split_seed": 0}
MAX_DIGITS = 9


def _operands(digits: int) -> tuple[int, int]:
    """`(lowest, count)` of the numbers with exactly `digits` digits (0-9 for one)."""
    low = 0 if digits <= 1 else 10 ** (digits - 1)
    return low, 10**digits - low


class Multiply(Task):
    """`digits` x (`digits` - 1)-digit multiplication, `num_eval` held out by `split_seed`."""

    name = "multiply"

    def __init__(self, digits: int = 4, num_eval: int = 256, split_seed: int = 0) -> None:
        if not (isinstance(digits, int) and 1 <= digits <= MAX_DIGITS):
            raise ConfigError(f"invalid digits={digits!r}: must be an integer in [1, {MAX_DIGITS}]")
        self.digits = digits
        self._a = _operands(digits)
        self._b = _operands(max(1, digits - 1))
        space = self._a[1] * self._b[1]
        if not (isinstance(num_eval, int) and 1 <= num_eval <= space // 2):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {space // 2}] "
                f"(half of the {space} distinct prompts)"
            )
        self._held_out = np.random.default_rng(split_seed).choice(space, num_eval, replace=False)

    @property
    def alphabet(self) -> str:
        return "0123456789*="

    def _example(self, pair_id: int) -> Example:
        i, j = divmod(int(pair_id), self._b[1])
        a, b = self._a[0] + i, self._b[0] + j
        return Example(f"{a}*{b}=", str(a * b))

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        space = self._a[1] * self._b[1]
        ids: list[int] = []
        while len(ids) < n:  # rejection sampling; held-out ids are at most half the space
            draw = rng.integers(0, space, size=2 * (n - len(ids)), dtype=np.int64)
            ids.extend(draw[~np.isin(draw, self._held_out)][: n - len(ids)].tolist())
        return [self._example(i) for i in ids]

    def eval_examples(self) -> list[Example]:
        return [self._example(i) for i in self._held_out]

    def longest_examples(self) -> Sequence[Example]:
        a = self._a[0] + self._a[1] - 1
        b = self._b[0] + self._b[1] - 1
        return [Example(f"{a}*{b}=", str(a * b))]


def make(arg: str | None, **knobs: int) -> Multiply:
    """`multiply` takes no argument after a colon; knobs: `digits`, `num_eval`, `split_seed`."""
    if arg is not None:
        raise ConfigError(f"invalid task='multiply:{arg}': multiply takes no ':' argument")
    return Multiply(**knobs)
