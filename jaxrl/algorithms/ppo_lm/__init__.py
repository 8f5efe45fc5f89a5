"""PPO with a learned critic for language models (`jaxrl train ppo-lm`): `config.py` the
hyperparameters (the token-rollout fields of `jaxrl/algorithms/lm_rollout.py`, with the
advantage fixed to GAE and the critic's fields), `train.py` the staged algorithm: GRPO's
sampling and rewards (`lm_rollout.py`), a value model trained beside the policy, and
the shared objectives (`jaxrl.objectives`: GAE, the policy losses, the aggregation).
The value loss is the control PPO's (`jaxrl/algorithms/ppo/losses.py`)."""

from .config import SWEEPABLE, PPOLMConfig, default_config
from .train import PPOLM, PPOLMState, make

Config = PPOLMConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "PPOLM",
    "SWEEPABLE",
    "Config",
    "PPOLMConfig",
    "PPOLMState",
    "default_config",
    "make",
]
