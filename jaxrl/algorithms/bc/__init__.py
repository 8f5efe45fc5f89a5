"""Behaviour cloning (Pomerleau 1991): `config.py` hyperparameters and presets,
`train.py` the learner on the offline base (`jaxrl/algorithms/offline.py`), for
continuous and discrete actions. Its losses are the shared ones of
`jaxrl/algorithms/behaviour_cloning.py` (TD3+BC's behaviour-cloning term is the
continuous one)."""

from jaxrl.algorithms.behaviour_cloning import action_accuracy, cross_entropy_bc_loss, mse_bc_loss

from .config import BCConfig
from .train import BC, BCLearner

__all__ = ["BC", "BCConfig", "BCLearner", "action_accuracy", "cross_entropy_bc_loss", "mse_bc_loss"]
