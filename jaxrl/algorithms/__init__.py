"""Algorithm registry: names for the API and CLI layer (the driver takes objects).

Each algorithm is a folder with an `Algorithm` subclass (`jaxrl/training/contract.py`):
usually `config.py` (hyperparameters, validation, presets), `losses.py` (pure losses),
`networks.py` and `train.py`. To add one, create the folder and a line in `_ALGORITHMS`
naming its class. `get(name)` returns an `Entry`, which reads everything the API and
CLI need off the class: its declarations (`trains_on`, `headline_metric`, ...) and,
for an algorithm that declares `Config` and `presets` on the class (the lighter way,
e.g. `a2c`), `default_config` and `make`; for the others, their module's functions.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from jaxrl.training.contract import Algorithm, declared

# name -> "package:Class"
_ALGORITHMS = {
    "a2c": "jaxrl.algorithms.a2c:A2C",
    "bc": "jaxrl.algorithms.bc:BC",
    "c51": "jaxrl.algorithms.c51:C51",
    "cql": "jaxrl.algorithms.cql:CQL",
    "cql-discrete": "jaxrl.algorithms.cql:DiscreteCQL",
    "dpo": "jaxrl.algorithms.dpo:DPO",
    "dqn": "jaxrl.algorithms.dqn:DQN",
    "dreamer": "jaxrl.algorithms.dreamer:Dreamer",
    "grpo": "jaxrl.algorithms.grpo:GRPO",
    "ippo": "jaxrl.algorithms.ippo:IPPO",
    "iql": "jaxrl.algorithms.iql:IQL",
    "mappo": "jaxrl.algorithms.mappo:MAPPO",
    "ppo": "jaxrl.algorithms.ppo:PPO",
    "ppo-lm": "jaxrl.algorithms.ppo_lm:PPOLM",
    "pqn": "jaxrl.algorithms.pqn:PQN",
    "pqn-vdn": "jaxrl.algorithms.pqn_vdn:PQNVDN",
    "prm": "jaxrl.algorithms.prm:PRM",
    "rebrac": "jaxrl.algorithms.rebrac:ReBRAC",
    "rlpd": "jaxrl.algorithms.rlpd:RLPD",
    "sac": "jaxrl.algorithms.sac:SAC",
    "sac-n": "jaxrl.algorithms.sac_n:SACN",
    "sft": "jaxrl.algorithms.sft:SFT",
    "td3": "jaxrl.algorithms.td3:TD3",
    "td3-bc": "jaxrl.algorithms.td3_bc:TD3BC",
}


@dataclasses.dataclass(frozen=True)
class Entry:
    """A registered algorithm: its class's declarations and how to configure and build it.

    Other attributes (`PRESETS`, a config class by its own name, ...) are looked up on
    the algorithm's module, as `get` returned the module itself before.
    """

    name: str
    module: ModuleType
    algorithm: type[Algorithm]

    @property
    def declares_config(self) -> bool:
        """Whether the class declares `Config` and `presets` (the lighter contract)."""
        return self.algorithm.Config is not None

    @property
    def Config(self) -> type:  # noqa: N802 - the config class, as modules name it
        return self.algorithm.Config if self.declares_config else self.module.Config

    @property
    def default_config(self) -> Callable[..., Any]:
        """`default_config(env)` for an algorithm in an environment, else
        `default_config()`: the config with its preset."""
        return self.algorithm.default_config if self.declares_config else self.module.default_config

    @property
    def make(self) -> Callable[[Any], Algorithm]:
        return self.algorithm.make if self.declares_config else self.module.make

    @property
    def sweepable(self) -> tuple[str, ...]:
        return tuple(self.algorithm.sweepable)

    @property
    def SWEEPABLE(self) -> tuple[str, ...]:  # noqa: N802 - the modules' name for it
        return self.sweepable

    @property
    def trains_on(self) -> str:
        return declared(self.algorithm, "trains_on")

    @property
    def headline_metric(self) -> str:
        return declared(self.algorithm, "headline_metric")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "module":  # copy/pickle probes; not yet set
            raise AttributeError(attr)
        return getattr(self.module, attr)


def names() -> list[str]:
    return sorted(_ALGORITHMS)


@functools.cache
def get(name: str) -> Entry:
    """The registered algorithm `name`; an unknown name raises `ValueError` listing the
    registered ones, a class without its declarations a `TypeError` naming them."""
    if name not in _ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; available: {names()}")
    module_name, _, class_name = _ALGORITHMS[name].partition(":")
    module = importlib.import_module(module_name)
    entry = Entry(name=name, module=module, algorithm=getattr(module, class_name))
    entry.trains_on, entry.headline_metric  # noqa: B018 - fail here when undeclared
    return entry
