"""SAC's actor: `SquashedGaussianActor`, a `TanhGaussian` (`jaxrl/nn/distributions.py`)
with a state-dependent standard deviation, acting in the normalised action box
[-1, 1]^d (the agent maps it to the environment's bounds, `to_env_action`).

The twin critics are `jaxrl.algorithms.actor_critic.TwinQ`, shared with TD3.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.algorithms.actor_critic import TwinQ, dense
from jaxrl.nn import MLP, TanhGaussian, flatten_obs

__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "SquashedGaussianActor", "TwinQ", "squash_log_std"]

# Bounds of the actor's log standard deviation (CleanRL's SAC; SB3 clips to [-20, 2]):
# a tanh maps the raw output smoothly into them, so the gradient never vanishes at a clip.
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


def squash_log_std(raw: jax.Array) -> jax.Array:
    """Maps an unbounded output into [LOG_STD_MIN, LOG_STD_MAX] with a tanh."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)


class SquashedGaussianActor(nn.Module):
    """SAC's policy (Haarnoja et al. 2018): `obs (B, ...) -> TanhGaussian` whose mean
    and log standard deviation are two heads on one MLP. Actions are `tanh(u)` of a
    sample `u`; `TanhGaussian.log_prob(u)` includes the change of variables."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        x = MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1))
        mean = dense(self.action_dim, 0.01)(x)
        log_std = squash_log_std(dense(self.action_dim, 0.01)(x))
        return TanhGaussian(mean, log_std)
