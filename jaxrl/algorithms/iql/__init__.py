"""IQL (Kostrikov, Nair & Levine 2021): `config.py` hyperparameters and presets,
`losses.py` the expectile, critic and advantage-weighted actor losses, `networks.py` the
value network and Gaussian actor, `train.py` the agent on the offline base
(`jaxrl/algorithms/offline.py`)."""

from .config import IQLConfig
from .losses import advantage_weights, awr_actor_loss, expectile_loss, iql_target, value_loss
from .train import IQL, IQLLearner

__all__ = [
    "IQL",
    "IQLConfig",
    "IQLLearner",
    "advantage_weights",
    "awr_actor_loss",
    "expectile_loss",
    "iql_target",
    "value_loss",
]
