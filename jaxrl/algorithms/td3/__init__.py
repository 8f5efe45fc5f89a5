"""TD3 (Fujimoto et al. 2018): `config.py` hyperparameters and presets, `losses.py`
the smoothed target and the actor loss, `networks.py` the deterministic
actor, `train.py` the agent; the twin critics and the update plumbing it shares with
SAC are in `jaxrl/algorithms/actor_critic.py`."""

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
