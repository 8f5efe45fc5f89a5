"""Algorithm registry. Each algorithm is a folder: `config.py` (hyperparameters,
validation, presets), `losses.py` (pure losses), `networks.py`, `train.py`
(`init` and the pure `update`). To add one, create the folder and a line below."""

from __future__ import annotations

import importlib
from types import ModuleType

_ALGORITHMS = {"ppo": "jaxrl.algorithms.ppo"}


def names() -> list[str]:
    return sorted(_ALGORITHMS)


def get(name: str) -> ModuleType:
    """The algorithm's module, exposing `default_config(env)`, `make(config)` and `SWEEPABLE`."""
    if name not in _ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {names()}")
    return importlib.import_module(_ALGORITHMS[name])
