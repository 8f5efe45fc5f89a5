"""SAC (Haarnoja et al. 2018): `config.py` hyperparameters and presets, `losses.py`
the soft targets and losses, `networks.py` the squashed Gaussian actor and the twin
critics (shared with TD3), `train.py` the agent on the shared replay base."""

from .config import PRESETS, SWEEPABLE, ActorCriticConfig, SACConfig, default_config
from .train import SAC, SACLearner, make

Config = SACConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "ActorCriticConfig",
    "Config",
    "PRESETS",
    "SAC",
    "SACConfig",
    "SACLearner",
    "SWEEPABLE",
    "default_config",
    "make",
]
