"""RLPD (Ball et al. 2023), offline-to-online: `config.py` hyperparameters and presets,
`train.py` online SAC with symmetric sampling of offline and online data and LayerNorm
critics, on the shared replay base; `losses.py` the target's random subset of the critic
ensemble (the rest of its losses are the SAC backbone's,
`jaxrl/algorithms/actor_critic.py`); `warm_start.py` an offline run's actor and critics
mapped onto its networks (`init_from`)."""

from .config import RLPDConfig
from .losses import critic_subset, take_critics
from .train import RLPD, RLPDLearner

__all__ = ["RLPD", "RLPDConfig", "RLPDLearner", "critic_subset", "take_critics"]
