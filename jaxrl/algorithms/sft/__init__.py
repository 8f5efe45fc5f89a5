"""SFT of a language model: `config.py` hyperparameters, `losses.py` the masked token
cross-entropy, `train.py` the staged algorithm (host data loader, jitted learning step,
held-out evaluation and the exported `model/` folder)."""

from .config import SWEEPABLE, SFTConfig, default_config
from .train import SFT, SFTState, make

Config = SFTConfig  # every algorithm module exposes its config class as `Config`

__all__ = ["SFT", "SWEEPABLE", "Config", "SFTConfig", "SFTState", "default_config", "make"]
