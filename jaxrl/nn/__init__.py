"""Network building blocks shared by algorithms: MLPs, recurrent cores, distributions,
and the on-policy actor-critics."""

from .actor_critic import ActorCritic, RecurrentActorCritic
from .distributions import Categorical, DiagGaussian, TanhGaussian
from .layers import MLP, Dense, ScannedGRU, flatten_obs, orthogonal

__all__ = [
    "MLP",
    "Dense",
    "ScannedGRU",
    "flatten_obs",
    "orthogonal",
    "Categorical",
    "DiagGaussian",
    "TanhGaussian",
    "ActorCritic",
    "RecurrentActorCritic",
]
