"""RLPD (Ball et al. 2023), offline-to-online: `config.py` hyperparameters and presets,
`train.py` online SAC with symmetric sampling of offline and online data and LayerNorm
critics, on the shared replay base; its losses are the SAC backbone's
(`jaxrl/algorithms/actor_critic.py`)."""

from .config import RLPDConfig
from .train import RLPD, RLPDLearner

__all__ = ["RLPD", "RLPDConfig", "RLPDLearner"]
