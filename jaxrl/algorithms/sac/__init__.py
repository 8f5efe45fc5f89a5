"""SAC (Haarnoja et al. 2018): `config.py` hyperparameters and presets, `losses.py`
the soft targets and losses, `networks.py` the squashed Gaussian actor, `train.py` the
agent; the twin critics and the update plumbing it shares with TD3 are in
`jaxrl/algorithms/actor_critic.py`."""

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
