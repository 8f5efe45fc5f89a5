"""GRPO-family RL for language models: `config.py` hyperparameters (every estimator and
loss is a named choice from `jaxrl.objectives`), `learning.py` GRPO's state and update
(group advantages, then epochs of minibatches of the policy loss), `train.py` the staged
algorithm (host prompts -> jitted sampling -> host rewards -> jitted learning, from
`jaxrl/algorithms/lm_rollout.py`) and held-out pass@k, `multiturn.py` GRPO on
multi-turn episodes."""

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
