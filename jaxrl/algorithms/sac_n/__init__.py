"""SAC-N and EDAC (An et al. 2021): `config.py` hyperparameters and presets,
`losses.py` EDAC's ensemble-diversity term, `train.py` the agent on the offline SAC
backbone (`jaxrl/algorithms/offline.py`); the ensemble is the shared
`jaxrl.algorithms.actor_critic.EnsembleQ`."""

from .config import SACNConfig
from .losses import action_gradients, ensemble_diversity
from .train import SACN

__all__ = ["SACN", "SACNConfig", "action_gradients", "ensemble_diversity"]
