"""Tasks made in-process for language-model training and evaluation.

A task (`base.Task`) is a seeded source of (prompt, answer) pairs with a disjoint
held-out split and an `is_correct(completion, answer)` check. `make_task("addition")`,
`make_task("countdown")`, `make_task("strings", depth=2)` or `make_task("jsonl:PATH")`
builds one by name; the part after the first colon is the task's argument (a file path
for `jsonl`).

Adding a task: write `jaxrl/tasks/<name>.py` with a `Task` subclass, a `KNOBS` dict of
its keyword options and their defaults, and `make(arg, **knobs)`; add one line to
`_TASKS` below.

Step tasks (`base.StepTask`, e.g. `addition_steps`) write their answers in steps and
label each step with a verifier: the data of process reward models.

Multi-turn tasks (`multiturn.MultiTurnTask`: the model and an environment take turns,
with turn-level rewards) are tasks too; their module sets `MULTI_TURN = True`, which
`is_multi_turn` reads, so an algorithm can tell before it builds one.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from jaxrl.errors import ConfigError

from .base import BASE_ALPHABET, Example, StepExample, StepTask, Task, exact_match

_TASKS = {
    "addition": "jaxrl.tasks.addition",
    "addition_retry": "jaxrl.tasks.multiturn",
    "addition_steps": "jaxrl.tasks.addition_steps",
    "countdown": "jaxrl.tasks.countdown",
    "guess": "jaxrl.tasks.guess",
    "jsonl": "jaxrl.tasks.jsonl",
    "tool_lookup": "jaxrl.tasks.lookup",
    "multiply": "jaxrl.tasks.multiply",
    "repeat": "jaxrl.tasks.repeat",
    "strings": "jaxrl.tasks.strings",
    "tool_multiply": "jaxrl.tasks.tool_use",
}


def names() -> list[str]:
    """Names of the available tasks."""
    return sorted(_TASKS)


def _module(spec: str) -> tuple[ModuleType, str | None]:
    name, sep, arg = spec.partition(":")
    if name not in _TASKS:
        raise ConfigError(
            f"invalid task={spec!r}: unknown task {name!r}; available: "
            f"{', '.join(n + (':PATH' if n == 'jsonl' else '') for n in names())}"
        )
    return importlib.import_module(_TASKS[name]), (arg if sep else None)


def knobs(spec: str) -> dict[str, Any]:
    """The keyword options (with defaults) that the task named in `spec` accepts."""
    return dict(_module(spec)[0].KNOBS)


def is_multi_turn(spec: str) -> bool:
    """Whether the task named in `spec` is played over several turns (`MultiTurnTask`):
    the module's `MULTI_TURN`, or its `is_multi_turn(arg)` when the argument decides
    (`tool_multiply:demos` is the single-turn demonstrations of a multi-turn task)."""
    module, arg = _module(spec)
    if hasattr(module, "is_multi_turn"):
        return bool(module.is_multi_turn(arg))
    return bool(getattr(module, "MULTI_TURN", False))


def make_task(spec: str, **options: Any) -> Task:
    """The task `spec` names (`"addition"`, `"jsonl:PATH"`), with its keyword options.

    Raises `ConfigError` for an unknown task (listing the available ones), an option the
    task does not take (listing those it does), or input the task rejects.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"invalid task={spec!r}: must be a string such as 'addition'")
    module, arg = _module(spec)
    unknown = sorted(set(options) - set(module.KNOBS))
    if unknown:
        raise ConfigError(
            f"invalid task option(s) {unknown} for task {spec!r}: allowed {sorted(module.KNOBS)}"
        )
    return module.make(arg, **options)


__all__ = [
    "BASE_ALPHABET",
    "Example",
    "StepExample",
    "StepTask",
    "Task",
    "exact_match",
    "is_multi_turn",
    "knobs",
    "make_task",
    "names",
]
