"""PPO with a learned critic for language models (`jaxrl train ppo-lm`): `config.py` the
hyperparameters (GRPO's, with the advantage fixed to GAE and the critic's fields),
`train.py` the staged algorithm, GRPO's with a value model trained beside the policy.
The value loss is the control PPO's (`jaxrl/algorithms/ppo/losses.py`); GAE, the policy
losses and the aggregation are GRPO's (`jaxrl/algorithms/grpo/losses.py`)."""

from .config import SWEEPABLE, PPOLMConfig, default_config
from .train import PPOLM, PPOLMState, explained_variance, gae_advantages, make

Config = PPOLMConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "PPOLM",
    "SWEEPABLE",
    "Config",
    "PPOLMConfig",
    "PPOLMState",
    "default_config",
    "explained_variance",
    "gae_advantages",
    "make",
]
