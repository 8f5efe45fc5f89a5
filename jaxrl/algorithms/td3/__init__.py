"""TD3 (Fujimoto et al. 2018): `config.py` hyperparameters and presets, `losses.py`
the smoothed target and the actor loss, `train.py` the agent on the shared replay
base. Its networks (deterministic actor, twin critics) are in
`jaxrl/algorithms/sac/networks.py`, shared with SAC."""

from .config import PRESETS, SWEEPABLE, TD3Config, default_config
from .train import TD3, TD3Learner, make

Config = TD3Config  # every algorithm module exposes its config class as `Config`

__all__ = [
    "Config",
    "PRESETS",
    "SWEEPABLE",
    "TD3",
    "TD3Config",
    "TD3Learner",
    "default_config",
    "make",
]
