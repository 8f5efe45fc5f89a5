"""GRPO-family RL for language models: `config.py` hyperparameters (every estimator and
loss is a named choice), `losses.py` the advantage estimators, policy losses, loss
aggregation, KL estimators, entropy terms and DAPO's overlong shaping (pure functions),
`train.py` the staged algorithm (host prompts -> jitted sampling -> host rewards ->
jitted learning) and held-out pass@k."""

from . import losses
from .config import ADVANTAGES, SWEEPABLE, GRPOConfig, default_config
from .train import GRPO, GRPOState, make, select_groups

Config = GRPOConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "ADVANTAGES",
    "GRPO",
    "SWEEPABLE",
    "Config",
    "GRPOConfig",
    "GRPOState",
    "default_config",
    "losses",
    "make",
    "select_groups",
]
