"""The error a bad setting raises, in a module that imports nothing heavy.

`ConfigError` lives here, not in `jaxrl.config` (which re-exports it), so that code that
must stay light can raise it without importing JAX: the tool server
(`jaxrl/tools/_server.py`) imports the tools' modules, and every call forks that
process, so what it has imported is copied on every call (a fork of a process holding
JAX costs several times one without).
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config field has an invalid value. The message names the field."""
