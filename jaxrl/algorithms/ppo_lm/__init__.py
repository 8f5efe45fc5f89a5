"""PPO with a learned critic for language models (`jaxrl train ppo-lm`): `config.py` the
hyperparameters (the token-rollout fields of `jaxrl/algorithms/lm_rollout.py`, with the
advantage fixed to GAE and the critic's fields), `train.py` the staged algorithm: GRPO's
sampling and rewards (`lm_rollout.py`), a value model trained beside the policy, and
the shared objectives (`jaxrl.objectives`: GAE, the policy losses, the aggregation),
`multiturn.py` the same on multi-turn episodes (`jaxrl/algorithms/lm_multiturn.py`),
which `make` returns for a multi-turn task. The value loss is shared with the control
PPO (`jaxrl/losses.py`)."""

import warnings
from typing import Any

from jaxrl import objectives, tasks

from .config import SWEEPABLE, PPOLMConfig, default_config
from .multiturn import MultiTurnPPOLM
from .train import PPOLM, PPOLMState

Config = PPOLMConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "PPOLM",
    "MultiTurnPPOLM",
    "SWEEPABLE",
    "Config",
    "PPOLMConfig",
    "PPOLMState",
    "default_config",
    "make",
]


def make(config: PPOLMConfig) -> PPOLM:
    """PPO with a critic for `config` (validated; bad input raises `ConfigError`); a
    multi-turn task (`jaxrl/tasks/multiturn.py`) gets `MultiTurnPPOLM`."""
    if tasks.is_multi_turn(config.task):
        return MultiTurnPPOLM(config)
    return PPOLM(config)


def __getattr__(name: str) -> Any:
    """`gae_advantages` and `explained_variance` moved to `jaxrl.objectives` in the core
    redesign; they are still found here, with a warning."""
    if name not in ("gae_advantages", "explained_variance"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"jaxrl.algorithms.ppo_lm.{name} moved to jaxrl.objectives.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(objectives, name)
