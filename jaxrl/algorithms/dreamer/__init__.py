"""Dreamer, a DreamerV3-style world-model agent (Hafner et al. 2023) with a swappable
sequence backbone (`--backbone gru|transformer|ssm`): `config.py` hyperparameters and
model-size presets, `tricks.py` the named robustness tricks (symlog, two-hot, KL
balancing, unimix, return normalisation), `networks.py` the world model, actor and
critic, `losses.py` the three losses, `train.py` acting, replay and the update."""

from .config import MODEL_SIZES, PRESETS, SWEEPABLE, DreamerConfig, default_config
from .train import Dreamer, DreamerState, make

Config = DreamerConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "Config",
    "Dreamer",
    "DreamerConfig",
    "DreamerState",
    "MODEL_SIZES",
    "PRESETS",
    "SWEEPABLE",
    "default_config",
    "make",
]
