"""`code_reward`: the reward block that runs a completion's code against tests."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from jaxrl.errors import ConfigError, check
from jaxrl.tasks import Example

from ..base import Block
from .core import MAX_SLOTS, isolation, run
from .limits import Limits

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The last fenced code block (```python ... ```) of a completion, else all of it."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def answer_tests(example: Example) -> list[str]:
    """Tests from a reference answer: each non-blank line is one test."""
    return [line for line in example.answer.splitlines() if line.strip()]


def code_reward(
    tests: Sequence[str] | Callable[[Example], Sequence[str]] | None = None,
    *,
    all_or_nothing: bool = False,
    limits: Limits | None = None,
    max_workers: int = 8,
) -> Block:
    """A block that runs the completion's code (`extract_code`) against tests in the
    sandbox: the fraction of tests passed, or with `all_or_nothing` 1 only if all pass.

    `tests`: the same tests for every example, a function of the example, or None for
    `answer_tests` (one test per line of the reference answer, as a JSONL task of
    coding problems would store them). `max_workers` programs run at once in `score`.
    Write tests as `assert <expression> == <literal>`: those the program cannot forge
    (see `checks.py`). The sandbox's mode is probed here, so a run that would get only
    the weakest mode says so at its start.
    """
    limits = (limits or Limits()).validate()
    check(1 <= max_workers <= MAX_SLOTS, "max_workers", max_workers, f"in [1, {MAX_SLOTS}]")
    if tests is None:
        tests_of: Callable[[Example], Sequence[str]] = answer_tests
    elif callable(tests):
        tests_of = tests
    elif isinstance(tests, Sequence) and all(isinstance(t, str) for t in tests):
        fixed = list(tests)
        tests_of = lambda example: fixed  # noqa: E731
    else:
        raise ConfigError(f"invalid tests={tests!r}: must be strings, a function or None")
    isolation()  # probe now: the weakest mode's warning comes at the start of a run

    def reward(completion: str, example: Example) -> float:
        cases = tests_of(example)
        if not cases:
            raise ValueError("no tests for this example")
        result = run(extract_code(completion), cases, limits)
        return float(result.passed == result.total) if all_or_nothing else result.fraction

    return Block("code", reward, max_workers=max_workers)
