"""What the adapters to JAX environment suites share (Craftax, Jumanji, XLand-MiniGrid, pgx).

Each suite has its own step/reset signatures, state and time limit. An adapter wraps
the suite's *single-transition* function (never the suite's own auto-reset) in a
jaxrl `Environment`, so `Environment.step` adds what every jaxrl environment has:
time-limit truncation kept apart from termination, one auto-reset and
`info["final_observation"]`. The suite's own time limit is switched off (set out of
reach) and replaced by ours, `params.max_steps_in_episode`, whose default is the
suite's own limit.

Here: the state and params every suite adapter uses (`SuiteState`, `SuiteParams`:
the suite's own pytree plus our step counter and time limit), the one-line errors
(`import_suite`: a suite that is not installed names its extra; `unknown_id`: an id
the suite does not have lists those it has), the split of `make`'s overrides between
our params and the suite's, and the listing of installed suites for `jaxrl envs`.
Not here: the suites themselves (each its own module) and space conversion
(`gymnax.convert_space` serves the suites whose spaces follow gymnax's classes).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from typing import Any

import jax
from flax import struct

from ..core import EnvParams, EnvState

__all__ = [
    "SuiteParams",
    "SuiteState",
    "import_suite",
    "installed",
    "split_overrides",
    "unknown_id",
]

# A time limit no episode reaches: the suite's own limit is set to it, ours applies.
OUT_OF_REACH = 2**30


@struct.dataclass
class SuiteState(EnvState):
    """The suite's own state (`inner`) and the step count of the episode (`time`)."""

    inner: Any
    time: jax.Array


@struct.dataclass
class SuiteParams(EnvParams):
    """The suite's own params pytree (`inner`, None when it has none) and our time limit.

    `max_steps_in_episode` truncates (never terminates) an episode; its default in
    each adapter's `make` is the suite's own limit, so episodes end where the suite's
    do, but as a truncation.
    """

    max_steps_in_episode: int = 1000
    inner: Any = None


def installed(package: str) -> bool:
    """Whether `package` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def import_suite(module: str, suite: str, extra: str) -> Any:
    """Imports `module`, or raises a one-line `ImportError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"the {suite} adapter needs {module.partition('.')[0]}, which is not installed: "
            f"pip install 'jaxrl[{extra}]'"
        ) from err


def unknown_id(suite: str, env_id: str, known: Iterable[str]) -> ValueError:
    """The error for an id the suite does not have: lists the ids it has."""
    return ValueError(f"Unknown {suite} environment {env_id!r}; {suite} has: {', '.join(known)}")


def split_overrides(
    suite: str, env_id: str, overrides: dict[str, Any], ours: Iterable[str], theirs: Iterable[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits `make`'s overrides into ours (e.g. `max_steps_in_episode`) and the suite's.

    Any other name raises a `ValueError` listing the allowed ones.
    """
    ours, theirs = set(ours), set(theirs)
    unknown = sorted(set(overrides) - ours - theirs)
    if unknown:
        raise ValueError(
            f"make('{suite}:{env_id}'): unknown override(s) {unknown}; "
            f"allowed: {sorted(ours | theirs)}"
        )
    return (
        {k: v for k, v in overrides.items() if k in ours},
        {k: v for k, v in overrides.items() if k in theirs},
    )
