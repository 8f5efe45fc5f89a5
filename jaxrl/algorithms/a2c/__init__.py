"""A2C (Mnih et al. 2016): `config.py` hyperparameters and presets, `losses.py` the loss,
`train.py` the `A2C` class, written on the shared `jaxrl.rollout` and
`jaxrl.nn.ActorCritic`, which declares everything the registry needs (see
docs/ARCHITECTURE.md, "Adding an algorithm")."""

from .config import A2CConfig
from .losses import a2c_loss
from .train import A2C, A2CState

__all__ = ["A2C", "A2CConfig", "A2CState", "a2c_loss"]
