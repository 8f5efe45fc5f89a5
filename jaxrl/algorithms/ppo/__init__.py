"""PPO (Schulman et al. 2017): `config.py` hyperparameters and presets, `losses.py`
the loss, `networks.py` the actor-critic, `train.py` init and update."""

from .config import PRESETS, SWEEPABLE, PPOConfig, default_config
from .train import PPO, PPOState, make

Config = PPOConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "Config",
    "PPO",
    "PPOConfig",
    "PPOState",
    "PRESETS",
    "SWEEPABLE",
    "default_config",
    "make",
]
