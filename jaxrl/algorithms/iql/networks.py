"""IQL's networks: the state-value network. The actor (`GaussianActor`) and the twin
critics (`TwinQ`) are the shared ones of `jaxrl/algorithms/actor_critic.py` (RLPD starts
from an IQL actor: `rlpd --init-from`)."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

from jaxrl.algorithms.actor_critic import GaussianActor, dense
from jaxrl.nn import MLP, flatten_obs

__all__ = ["GaussianActor", "ValueNetwork"]


class ValueNetwork(nn.Module):
    """`V(s)`: `obs (B, ...) -> (B,)`."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1)))[..., 0]
