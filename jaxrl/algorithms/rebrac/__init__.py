"""ReBRAC (Tarasov et al. 2023): `config.py` hyperparameters and presets, `losses.py`
the actor's and the critic's behaviour-cloning penalties, `train.py` the agent on the
offline base (`jaxrl/algorithms/offline.py`); LayerNorm networks from
`jaxrl/algorithms/actor_critic.py`."""

from .config import ReBRACConfig
from .losses import bc_penalty, rebrac_actor_loss, rebrac_target
from .train import ReBRAC, ReBRACBatch, ReBRACLearner

__all__ = [
    "ReBRAC",
    "ReBRACBatch",
    "ReBRACConfig",
    "ReBRACLearner",
    "bc_penalty",
    "rebrac_actor_loss",
    "rebrac_target",
]
