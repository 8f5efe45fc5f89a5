"""PPO (Schulman et al. 2017): `config.py` hyperparameters and presets, `losses.py`
the loss, `train.py` init and update. The actor-critic networks are the shared ones of
`jaxrl.nn.actor_critic` (`networks.py` re-exports them under their old import path)."""

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
