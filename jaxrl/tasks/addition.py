"""Multi-digit addition: prompt `"123+456="`, answer `"579"`.

Operands have exactly `digits` digits (uniform in `[10**(digits-1), 10**digits)`; 0-9
for one digit), so every prompt has the same length and each digit the same position;
the answer is their sum, most significant digit first, as in the example. A pair is
identified by its index `i * n + j` among the `n * n` operand pairs, so the held-out set
is a set of integers and a training draw is rejected when its index is held out: no
held-out prompt is ever trained on (`"456+123="` is a different prompt from
`"123+456="` and may be).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"digits": 3, "num_eval": 256, "split_seed": 0}
MAX_DIGITS = 9  # pair indices (< 10**18) must fit in int64


class Addition(Task):
    """`digits`-digit addition with `num_eval` held-out prompts chosen by `split_seed`."""

    name = "addition"

    def __init__(self, digits: int = 3, num_eval: int = 256, split_seed: int = 0) -> None:
        if not (isinstance(digits, int) and 1 <= digits <= MAX_DIGITS):
            raise ConfigError(f"invalid digits={digits!r}: must be an integer in [1, {MAX_DIGITS}]")
        self.digits = digits
        self._low = 0 if digits == 1 else 10 ** (digits - 1)
        self._count = 10**digits - self._low  # operands with exactly `digits` digits
        space = self._count**2
        if not (isinstance(num_eval, int) and 1 <= num_eval <= space // 2):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {space // 2}] "
                f"(half of the {space} distinct {digits}-digit addition prompts)"
            )
        rng = np.random.default_rng(split_seed)
        self._held_out = rng.choice(space, size=num_eval, replace=False)

    @property
    def alphabet(self) -> str:
        return "0123456789+="

    def _example(self, pair_id: int) -> Example:
        i, j = divmod(int(pair_id), self._count)
        a, b = self._low + i, self._low + j
        return Example(f"{a}+{b}=", str(a + b))

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        ids: list[int] = []
        while len(ids) < n:  # rejection sampling; held-out ids are at most half the space
            draw = rng.integers(0, self._count**2, size=2 * (n - len(ids)), dtype=np.int64)
            ids.extend(draw[~np.isin(draw, self._held_out)][: n - len(ids)].tolist())
        return [self._example(i) for i in ids]

    def eval_examples(self) -> list[Example]:
        return [self._example(i) for i in self._held_out]

    def longest_examples(self) -> Sequence[Example]:
        top = 10**self.digits - 1
        return [Example(f"{top}+{top}=", str(2 * top))]


def make(arg: str | None, **knobs: int) -> Addition:
    """`addition` takes no argument after a colon; knobs: `digits`, `num_eval`, `split_seed`."""
    if arg is not None:
        raise ConfigError(f"invalid task='addition:{arg}': addition takes no ':' argument")
    return Addition(**knobs)
