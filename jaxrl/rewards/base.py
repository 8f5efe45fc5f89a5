"""The `Block` type: a named reward function of one completion and its example.

It lives in its own module because both the blocks (`blocks.py`) and the code sandbox
(`sandbox/`, whose `code_reward` is a block) build blocks, and `blocks.py` offers the
sandbox's block by name: `sandbox/` imports only this module, so `blocks.py` can
import `sandbox/` without an import circle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxrl.tasks import Example

RewardFn = Callable[[str, Example], float]


@dataclasses.dataclass(frozen=True)
class Block:
    """A named reward function of one completion and its example.

    `max_workers > 1` lets `score` call it on that many completions at once (threads);
    worth it only for blocks that wait on something else, such as sandbox subprocesses.
    """

    name: str
    fn: RewardFn
    max_workers: int = 1

    def __call__(self, completion: str, example: Example) -> float:
        return float(self.fn(completion, example))
