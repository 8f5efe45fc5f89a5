"""The error a bad setting raises, in a module that imports nothing heavy.

`ConfigError` and `check` live here, not in `jaxrl.config` (which re-exports them), so
that code that must stay light can raise them without importing JAX: the tool server
(`jaxrl/tools/_server.py`) imports the tools' modules, and every call forks that
process, so what it has imported is copied on every call (a fork of a process holding
JAX costs several times one without); the `python` tool's sandbox and the tasks are
imported in such forks too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "check"]


class ConfigError(ValueError):
    """A config field has an invalid value. The message names the field."""


def check(ok: bool, field: str, value: Any, allowed: str) -> None:
    """Raises `ConfigError` naming `field`, its `value` and the allowed values."""
    if not ok:
        raise ConfigError(f"invalid {field}={value!r}: must be {allowed}")
