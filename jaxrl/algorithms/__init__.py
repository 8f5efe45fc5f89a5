"""Algorithm registry: names for the API and CLI layer (the driver takes objects).

Each algorithm is a folder: `config.py` (hyperparameters, validation, presets),
`losses.py` (pure losses), `networks.py`, `train.py` (the `Algorithm` subclass
of `jaxrl/training/contract.py`). To add one, create the folder and a line below."""

from __future__ import annotations

import importlib
from types import ModuleType

_ALGORITHMS = {
    "c51": "jaxrl.algorithms.c51",
    "dpo": "jaxrl.algorithms.dpo",
    "dqn": "jaxrl.algorithms.dqn",
    "dreamer": "jaxrl.algorithms.dreamer",
    "grpo": "jaxrl.algorithms.grpo",
    "ppo": "jaxrl.algorithms.ppo",
    "ppo-lm": "jaxrl.algorithms.ppo_lm",
    "pqn": "jaxrl.algorithms.pqn",
    "sac": "jaxrl.algorithms.sac",
    "sft": "jaxrl.algorithms.sft",
    "td3": "jaxrl.algorithms.td3",
}


def names() -> list[str]:
    return sorted(_ALGORITHMS)


def get(name: str) -> ModuleType:
    """The algorithm's module, exposing `Config`, `default_config(env)` (or
    `default_config()` when it trains on a task), `make(config)` and `SWEEPABLE`."""
    if name not in _ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {names()}")
    return importlib.import_module(_ALGORITHMS[name])
