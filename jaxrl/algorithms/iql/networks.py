"""IQL's networks: the state-value network and the Gaussian actor (Kostrikov et al. 2021).
The twin critics are the shared `jaxrl.algorithms.actor_critic.TwinQ`."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.algorithms.actor_critic import LOG_STD_MAX, LOG_STD_MIN, dense
from jaxrl.nn import MLP, DiagGaussian, flatten_obs

__all__ = ["GaussianActor", "ValueNetwork"]


class ValueNetwork(nn.Module):
    """`V(s)`: `obs (B, ...) -> (B,)`."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1)))[..., 0]


class GaussianActor(nn.Module):
    """`obs (B, ...) -> DiagGaussian(tanh(MLP(obs)), log_std)` with a state-independent,
    learned log standard deviation in [LOG_STD_MIN, LOG_STD_MAX], as in the IQL authors'
    code. Unsquashed, so the log-probability of a dataset action on the box's edge
    (|a| = 1) stays finite, which advantage-weighted regression needs; the mean is
    inside the box, and `act` clips a sample into it."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> DiagGaussian:
        x = MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1))
        mean = jnp.tanh(dense(self.action_dim, 0.01)(x))
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return DiagGaussian(mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
