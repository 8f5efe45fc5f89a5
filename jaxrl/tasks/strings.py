"""String-function composition: prompt `"reverse(sort(hello))="`, answer `"ollhe"`.

A library of ten named, deterministic string functions (`FUNCTIONS`); each at most
doubles the length of its input. Inputs are lowercase ASCII words of
`word_len // 2` to `word_len` letters (at least 1), drawn uniformly.

Prompt format, exactly: depth 1 is `f"{f}({x})="`, depth 2 is `f"{f}({g}({x}))="`
(f applied to g's output), with function names from `FUNCTIONS` (`f == g` allowed); the
answer is the result string, compared by exact match after stripping whitespace (a
function may return the empty string, e.g. `devowel("aei")`).

Split, for the compositional-generalisation question (does RL after SFT on single
functions improve held-out compositions): `held_out_pairs` ordered pairs `(f, g)` are
chosen by `split_seed` among the 100; at depth 2 they never appear in training, and the
held-out split is `num_eval` prompts made from them only. With `held_out_pairs=0`, or at
depth 1 (where pairs do not exist and the knob does nothing), the held-out split is
`num_eval` distinct prompts and a training draw with one of those prompts is redrawn.
The pairs depend only on `split_seed`, so a depth-1 and a depth-2 task with the same
knobs agree on which compositions are held out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"depth": 1, "word_len": 8, "held_out_pairs": 20, "num_eval": 256, "split_seed": 0}
MAX_WORD_LEN = 32
LETTERS = "abcdefghijklmnopqrstuvwxyz"
VOWELS = frozenset("aeiouAEIOU")


def _shift(x: str) -> str:
    """Caesar shift by one letter, keeping case: a->b, z->a, Z->A."""
    out = []
    for c in x:
        base = ord("a") if c.islower() else ord("A")
        out.append(chr(base + (ord(c) - base + 1) % 26) if c.isalpha() else c)
    return "".join(out)


FUNCTIONS: dict[str, Callable[[str], str]] = {
    "reverse": lambda x: x[::-1],
    "swapcase": str.swapcase,
    "sort": lambda x: "".join(sorted(x)),  # by code point: uppercase before lowercase
    "rotate": lambda x: x[1:] + x[:1],  # first character moves to the end
    "double": lambda x: x + x,
    "mirror": lambda x: x + x[::-1],
    "devowel": lambda x: "".join(c for c in x if c not in VOWELS),
    "unique": lambda x: "".join(dict.fromkeys(x)),  # first occurrence of each character
    "shift": _shift,
    "evens": lambda x: x[::2],  # characters at even positions (0, 2, ...)
}
"""The library; every function maps letters to letters and at most doubles the length."""

PAIRS: tuple[tuple[str, str], ...] = tuple(itertools.product(FUNCTIONS, repeat=2))


def apply(names: Sequence[str], word: str) -> str:
    """`names[0](names[1](...(word)))`: the outermost function first, as in the prompt."""
    for name in reversed(names):
        word = FUNCTIONS[name](word)
    return word


def render(names: Sequence[str], word: str) -> Example:
    """The prompt `f(g(word))=` for `names = (f, g)` and its answer."""
    prompt = "".join(f"{name}(" for name in names) + word + ")" * len(names) + "="
    return Example(prompt, apply(names, word))


class StringComposition(Task):
    """Compositions of `depth` string functions on words (see the module docstring)."""

    name = "strings"

    def __init__(
        self,
        depth: int = 1,
        word_len: int = 8,
        held_out_pairs: int = 20,
        num_eval: int = 256,
        split_seed: int = 0,
    ) -> None:
        if depth not in (1, 2) or not isinstance(depth, int):
            raise ConfigError(f"invalid depth={depth!r}: must be 1 (f(x)) or 2 (f(g(x)))")
        if not (isinstance(word_len, int) and 1 <= word_len <= MAX_WORD_LEN):
            raise ConfigError(
                f"invalid word_len={word_len!r}: must be an integer in [1, {MAX_WORD_LEN}]"
            )
        if not (isinstance(held_out_pairs, int) and 0 <= held_out_pairs <= len(PAIRS) // 2):
            raise ConfigError(
                f"invalid held_out_pairs={held_out_pairs!r}: must be an integer in "
                f"[0, {len(PAIRS) // 2}] (half of the {len(PAIRS)} ordered pairs)"
            )
        self.depth, self.word_len = depth, word_len
        self.min_len = max(1, word_len // 2)
        rng = np.random.default_rng(split_seed)
        order = rng.permutation(len(PAIRS))
        self.held_out_pairs = frozenset(PAIRS[i] for i in order[:held_out_pairs])
        by_pair = depth == 2 and held_out_pairs > 0
        if by_pair:
            self._train_calls = [p for p in PAIRS if p not in self.held_out_pairs]
            eval_calls = sorted(self.held_out_pairs)
        else:
            self._train_calls = list(PAIRS) if depth == 2 else [(f,) for f in FUNCTIONS]
            eval_calls = self._train_calls
        words = sum(26**n for n in range(self.min_len, word_len + 1))
        space = len(eval_calls) * words
        limit = space if by_pair else space // 2  # prompts by pair are disjoint anyway
        if not (isinstance(num_eval, int) and 1 <= num_eval <= limit):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {limit}] "
                f"({'all' if by_pair else 'half of'} the {space} prompts it is drawn from)"
            )
        self._eval: dict[str, Example] = {}
        while len(self._eval) < num_eval:
            example = self._draw(rng, eval_calls)
            self._eval.setdefault(example.prompt, example)
        self._exclude = set() if by_pair else set(self._eval)

    def _draw(self, rng: np.random.Generator, calls: Sequence[tuple[str, ...]]) -> Example:
        names = calls[rng.integers(len(calls))]
        length = rng.integers(self.min_len, self.word_len + 1)
        word = "".join(LETTERS[i] for i in rng.integers(0, 26, size=length))
        return render(names, word)

    @property
    def alphabet(self) -> str:
        return LETTERS + LETTERS.upper() + "()="

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        examples = []
        while len(examples) < n:  # rejection: at most half the prompts are held out
            example = self._draw(rng, self._train_calls)
            if example.prompt not in self._exclude:
                examples.append(example)
        return examples

    def eval_examples(self) -> list[Example]:
        return list(self._eval.values())

    def longest_examples(self) -> Sequence[Example]:
        # Longest names around the longest word; each function at most doubles the length.
        name = max(FUNCTIONS, key=len)
        word = "a" * self.word_len
        prompt = render([name] * self.depth, word).prompt
        return [Example(prompt, word * 2**self.depth)]


def make(arg: str | None, **knobs: int) -> StringComposition:
    """`strings` takes no ':' argument; knobs: `depth`, `word_len`, `held_out_pairs`,
    `num_eval`, `split_seed`."""
    if arg is not None:
        raise ConfigError(f"invalid task='strings:{arg}': strings takes no ':' argument")
    return StringComposition(**knobs)
