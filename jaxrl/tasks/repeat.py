"""Repetition with skewed answer lengths: prompt `"13*ab="`, answer `"ab"` 13 times.

A length-skewed workload for the LM sampler: most answers are short, a few are long,
as with reasoning traces. The answer's length is drawn first, log-uniformly between
`MIN_LEN` and the task's maximum (`repeat` 255, so that with eos a completion needs at
most 256 tokens; `repeat:N` for another maximum N), so its median is about the
geometric mean of the two (32 characters for `repeat`), and a quarter of the answers
are longer than about 2.8 times the median. Then a unit of 1 to 3 letters (uniform,
from `LETTERS`, at most the drawn length) and the count `n = length // len(unit)`; the
answer is the unit `n` times (its length is the drawn length, rounded down to a
multiple of the unit's). The verifier is exact match after stripping.

Split: `num_eval` distinct prompts drawn with `split_seed` are held out, and a training
draw with one of those prompts is redrawn (the space has over a hundred thousand
prompts at the default maximum, so redraws are rare).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"num_eval": 256, "split_seed": 0}
LETTERS = "abcdefghij"
MIN_LEN = 4
DEFAULT_MAX_LEN = 255
MAX_UNIT = 3
LIMIT = 4096  # the largest maximum accepted (a completion that long is no test workload)


def answer_length(rng: np.random.Generator, max_len: int) -> int:
    """An answer length, log-uniform on [min(MIN_LEN, max_len), max_len]: the integer
    part of exp(u), u uniform on [log low, log(max_len + 1))."""
    low = min(MIN_LEN, max_len)
    return min(int(np.exp(rng.uniform(np.log(low), np.log(max_len + 1)))), max_len)


class Repeat(Task):
    """Repeat a unit of 1-3 letters a prompt-given number of times, answers of at most
    `max_len` characters, skewed towards short ones (see the module docstring)."""

    name = "repeat"

    def __init__(self, max_len: int = DEFAULT_MAX_LEN, num_eval: int = 256, split_seed: int = 0):
        if not (isinstance(max_len, int) and 1 <= max_len <= LIMIT):
            raise ConfigError(
                f"invalid task='repeat:{max_len}': the maximum answer length must be an "
                f"integer in [1, {LIMIT}]"
            )
        if not (isinstance(num_eval, int) and 1 <= num_eval <= 10_000):
            raise ConfigError(f"invalid num_eval={num_eval!r}: must be an integer in [1, 10000]")
        self.max_len = max_len
        if self._space() < 2 * num_eval:
            raise ConfigError(
                f"invalid num_eval={num_eval}: must be at most half of the {self._space()} "
                f"distinct prompts of task 'repeat:{max_len}'"
            )
        held: dict[str, Example] = {}
        rng = np.random.default_rng(split_seed)
        while len(held) < num_eval:
            example = self._draw(rng)
            held.setdefault(example.prompt, example)
        self._held_out = list(held.values())
        self._held_prompts = frozenset(held)

    def _space(self) -> int:
        """How many distinct prompts the task makes (unit, count) (an upper bound for
        small maxima, where different draws may repeat a prompt)."""
        return sum(
            len(LETTERS) ** k * (self.max_len // k)
            for k in range(1, MAX_UNIT + 1)
            if k <= self.max_len
        )

    def _draw(self, rng: np.random.Generator) -> Example:
        length = answer_length(rng, self.max_len)
        size = int(rng.integers(1, min(MAX_UNIT, length) + 1))
        unit = "".join(LETTERS[i] for i in rng.integers(0, len(LETTERS), size))
        count = length // size
        return Example(f"{count}*{unit}=", unit * count)

    @property
    def alphabet(self) -> str:
        return LETTERS + "0123456789*="

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        examples: list[Example] = []
        while len(examples) < n:
            example = self._draw(rng)
            if example.prompt not in self._held_prompts:
                examples.append(example)
        return examples

    def eval_examples(self) -> list[Example]:
        return list(self._held_out)

    def longest_examples(self) -> Sequence[Example]:
        # The longest count has the one-letter unit; the longest unit, three letters.
        return [Example(f"{self.max_len}*{'j' * MAX_UNIT}=", "j" * self.max_len)]


def make(arg: str | None, **knobs: int) -> Repeat:
    """`repeat` (answers of at most 255 characters) or `repeat:N` (at most N); knobs:
    `num_eval`, `split_seed`."""
    if arg is None:
        return Repeat(**knobs)
    try:
        max_len = int(arg)
    except ValueError:
        raise ConfigError(
            f"invalid task='repeat:{arg}': the part after ':' is the maximum answer length, "
            f"an integer in [1, {LIMIT}]"
        ) from None
    return Repeat(max_len, **knobs)
