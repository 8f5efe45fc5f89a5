"""Preference optimisation on pairwise data: `losses.py` holds DPO, IPO, SimPO and the
Bradley-Terry reward-model loss, each a pure function on summed sequence log-probs (the
trainer, config and `train.py` come next)."""

from .losses import (
    PREFERENCE_LOSSES,
    bradley_terry_loss,
    dpo_loss,
    ipo_loss,
    preference_loss,
    sequence_logprobs,
    simpo_loss,
)

__all__ = [
    "PREFERENCE_LOSSES",
    "bradley_terry_loss",
    "dpo_loss",
    "ipo_loss",
    "preference_loss",
    "sequence_logprobs",
    "simpo_loss",
]
