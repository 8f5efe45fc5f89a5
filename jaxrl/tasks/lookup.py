"""Lookup: answer a question whose answer only a document holds, with a search tool.

`Lookup` makes `ENTITIES` made-up names (syllables from `split_seed`), each with a
random four-digit code, and one document per name, `"zor:4821"`. The prompt asks for a
code, `"code zor="`, and the answer is `"4821"`: unpredictable from the name, so a
model answers by searching the documents, `<<search("zor")>>`, reading `=zor:4821`,
and copying the digits. Held-out questions ask about names never asked in training
(their documents are searchable all the same), so what transfers is the use of the
tool, not memorised codes.

Registered as `tool_lookup` (`jaxrl/tasks/tool_use.py`'s `ToolUse` with a BM25
`search` over the documents, `jaxrl.tools.DocumentSearch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError
from jaxrl.tools import DocumentSearch

from .base import Example, Task
from .tool_use import Demonstrations, ToolUse

KNOBS = {"num_eval": 256, "split_seed": 0}
MULTI_TURN = True
ENTITIES = 2000
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def _names(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct names of two or three consonant-vowel syllables plus a consonant."""
    names: set[str] = set()
    ordered = []
    while len(ordered) < n:
        syllables = rng.integers(2, 4)
        name = (
            "".join(
                _CONSONANTS[rng.integers(len(_CONSONANTS))] + _VOWELS[rng.integers(len(_VOWELS))]
                for _ in range(syllables)
            )
            + _CONSONANTS[rng.integers(len(_CONSONANTS))]
        )
        if name not in names:
            names.add(name)
            ordered.append(name)
    return ordered


class Lookup(Task):
    """Codes of made-up names, held in documents (see the module docstring)."""

    name = "lookup"

    def __init__(self, num_eval: int = 256, split_seed: int = 0) -> None:
        if not (isinstance(num_eval, int) and 1 <= num_eval <= ENTITIES // 2):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {ENTITIES // 2}]"
            )
        rng = np.random.default_rng(split_seed)
        self.names = _names(rng, ENTITIES)
        self.codes = [f"{c:04d}" for c in rng.integers(0, 10_000, size=ENTITIES)]
        self._held_out = rng.choice(ENTITIES, num_eval, replace=False)
        self._train = np.setdiff1d(np.arange(ENTITIES), self._held_out)

    @property
    def documents(self) -> tuple[str, ...]:
        return tuple(f"{n}:{c}" for n, c in zip(self.names, self.codes, strict=True))

    @property
    def alphabet(self) -> str:
        return "0123456789:= " + _CONSONANTS + _VOWELS + "code"

    def _example(self, i: int) -> Example:
        return Example(f"code {self.names[i]}=", self.codes[i])

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return [self._example(int(i)) for i in rng.choice(self._train, size=n)]

    def eval_examples(self) -> list[Example]:
        return [self._example(int(i)) for i in self._held_out]

    def longest_examples(self) -> Sequence[Example]:
        longest = max(range(ENTITIES), key=lambda i: len(self.names[i]))
        return [self._example(longest)]


def is_multi_turn(arg: str | None) -> bool:
    """`tool_lookup` is played over turns; `tool_lookup:demos` is single-turn SFT data."""
    return arg != "demos"


def make(arg: str | None, **knobs: int) -> ToolUse | Demonstrations:
    """`tool_lookup`: lookup with a search tool; knobs `num_eval`, `split_seed`.
    `tool_lookup:demos`: its demonstrations, for an SFT warm start."""
    if arg not in (None, "demos"):
        raise ConfigError(f"invalid task='tool_lookup:{arg}': the only argument is 'demos'")
    task = Lookup(**knobs)
    search = dataclasses.replace(DocumentSearch(task.documents, k=1).tool(), output_chars=24)
    longest = max(task.names, key=len)
    tool_use = ToolUse(task, [search], format="plain", longest_call=f'<<search("{longest}")>>')
    if arg is None:
        return tool_use

    def name(example: Example) -> str:
        return example.prompt.removeprefix("code ").removesuffix("=")

    return Demonstrations(
        tool_use,
        call_of=lambda e: f'search("{name(e)}")',
        result_of=lambda e: f"{name(e)}:{e.answer}",
    )
