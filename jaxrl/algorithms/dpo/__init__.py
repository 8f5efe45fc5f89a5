"""Preference optimisation on pairwise data: `config.py` hyperparameters, `losses.py`
DPO, IPO, SimPO and the Bradley-Terry reward-model loss (pure functions on summed
sequence log-probs or rewards), `train.py` the staged algorithm (host pair loader,
jitted learning step with exact gradient accumulation, held-out preference accuracy and
the exported `model/` folder). Pairs come from `jaxrl/tasks/preferences.py`."""

from . import losses
from .config import LOSSES, SWEEPABLE, DPOConfig, default_config
from .losses import (
    PREFERENCE_LOSSES,
    bradley_terry_loss,
    dpo_loss,
    ipo_loss,
    preference_loss,
    sequence_logprobs,
    simpo_loss,
)
from .train import DPO, DPOState, make

Config = DPOConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "DPO",
    "LOSSES",
    "PREFERENCE_LOSSES",
    "SWEEPABLE",
    "Config",
    "DPOConfig",
    "DPOState",
    "bradley_terry_loss",
    "default_config",
    "dpo_loss",
    "ipo_loss",
    "losses",
    "make",
    "preference_loss",
    "sequence_logprobs",
    "simpo_loss",
]
