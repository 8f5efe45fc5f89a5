"""TD3's actor: `DeterministicActor`, `tanh(MLP(obs))` in the normalised action box
[-1, 1]^d. The twin critics are `jaxrl.algorithms.actor_critic.TwinQ`, shared with SAC."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.algorithms.actor_critic import dense
from jaxrl.nn import MLP, flatten_obs


class DeterministicActor(nn.Module):
    """TD3's policy (Fujimoto et al. 2018): `obs (B, ...) -> tanh(MLP(obs)) (B, d)`."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1))
        return jnp.tanh(dense(self.action_dim, 0.01)(x))
