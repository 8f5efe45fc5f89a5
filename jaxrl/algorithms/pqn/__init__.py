"""PQN, parallel Q-learning (Gallici et al. 2024): `config.py` hyperparameters and
presets, `losses.py` the Q(lambda) targets and TD loss, `networks.py` the LayerNorm
Q-network, `train.py` init and update."""

from .config import PRESETS, SWEEPABLE, PQNConfig, default_config
from .train import PQN, PQNState, make

Config = PQNConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "Config",
    "PQN",
    "PQNConfig",
    "PQNState",
    "PRESETS",
    "SWEEPABLE",
    "default_config",
    "make",
]
