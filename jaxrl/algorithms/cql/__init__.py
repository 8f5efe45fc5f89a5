"""CQL (Kumar et al. 2020): `config.py` hyperparameters and presets, `losses.py` the
conservative penalties, `train.py` continuous CQL(H) on the offline SAC backbone and
`discrete.py` discrete CQL on a DQN-style Q-network (both on
`jaxrl/algorithms/offline.py`)."""

from .config import CQLConfig, DiscreteCQLConfig
from .discrete import DiscreteCQL
from .losses import cql_penalty, discrete_cql_penalty, importance_weighted
from .train import CQL

__all__ = [
    "CQL",
    "CQLConfig",
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "cql_penalty",
    "discrete_cql_penalty",
    "importance_weighted",
]
