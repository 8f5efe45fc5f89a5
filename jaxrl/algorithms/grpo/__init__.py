"""GRPO-family RL for language models: `config.py` hyperparameters (every estimator and
loss is a named choice from `jaxrl.objectives`), `learning.py` GRPO's state and update
(group advantages, then epochs of minibatches of the policy loss), `train.py` the staged
algorithm (host prompts -> jitted sampling -> host rewards -> jitted learning, from
`jaxrl/algorithms/lm_rollout.py`) and held-out pass@k, `multiturn.py` GRPO on
multi-turn episodes."""

import warnings
from typing import Any

from jaxrl.algorithms import lm_rollout

from . import losses as losses  # deprecated aliases of jaxrl.objectives (warn when used)
from .config import ADVANTAGES, SWEEPABLE, GRPOConfig, default_config
from .learning import GRPOState
from .multiturn import MultiTurnGRPO
from .train import GRPO, make

Config = GRPOConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "ADVANTAGES",
    "GRPO",
    "SWEEPABLE",
    "Config",
    "GRPOConfig",
    "GRPOState",
    "MultiTurnGRPO",
    "default_config",
    "make",
]


def __getattr__(name: str) -> Any:
    """`select_groups` moved to `jaxrl/algorithms/lm_rollout.py` in the core redesign;
    it is still found here, with a warning."""
    if name != "select_groups":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "jaxrl.algorithms.grpo.select_groups moved to jaxrl.algorithms.lm_rollout",
        DeprecationWarning,
        stacklevel=2,
    )
    return lm_rollout.select_groups
