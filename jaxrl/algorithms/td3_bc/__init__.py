"""TD3+BC (Fujimoto & Gu 2021): `config.py` hyperparameters and presets, `losses.py` the
actor loss with its behaviour-cloning term, `train.py` the agent on the offline base
(`jaxrl/algorithms/offline.py`); TD3's actor, critics and target smoothing are the
shared ones in `jaxrl/algorithms/actor_critic.py`."""

from .config import TD3BCConfig
from .losses import bc_lambda, td3_bc_actor_loss
from .train import TD3BC, TD3BCLearner

__all__ = ["TD3BC", "TD3BCConfig", "TD3BCLearner", "bc_lambda", "td3_bc_actor_loss"]
