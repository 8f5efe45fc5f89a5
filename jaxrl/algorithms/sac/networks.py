"""Continuous-control networks of SAC and TD3: twin Q critics and the two actors.

All act in the normalised action box [-1, 1]^d (the agent maps it to the
environment's bounds, `to_env_action`), so a tanh output layer is the bound.

* `TwinQ`: two independent Q(s, a) MLPs, evaluated as one vmapped ensemble;
  `(obs (B, ...), action (B, d)) -> (2, B)`. Both SAC and TD3 use it.
* `SquashedGaussianActor`: SAC's stochastic policy, a `TanhGaussian`
  (`jaxrl/nn/distributions.py`) with a state-dependent standard deviation.
* `DeterministicActor`: TD3's policy, `tanh(MLP(obs))`.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.nn import MLP, Dense, TanhGaussian, flatten_obs, orthogonal

# Bounds of the actor's log standard deviation (CleanRL's SAC; SB3 clips to [-20, 2]):
# a tanh maps the raw output smoothly into them, so the gradient never vanishes at a clip.
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0

NUM_CRITICS = 2


def _dense(features: int, scale: float) -> Dense:
    return Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


class QValue(nn.Module):
    """One critic: `Q(s, a)` from the concatenated flat observation and action, `(B,)`."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([flatten_obs(obs, 1), action.astype(jnp.float32)], axis=-1)
        return _dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(x))[..., 0]


class TwinQ(nn.Module):
    """Two critics with their own parameters (Fujimoto et al. 2018's clipped double Q),
    run as a vmapped ensemble: one batched matrix product per layer instead of two.
    `(obs (B, ...), action (B, d)) -> Q-values (2, B)`.

    Each critic gets its own copy of the inputs (broadcast to `(2, B, ...)`), so every
    layer, the first included, is a product batched over the critics. With the inputs
    shared, XLA computes the first layer of both as one `[B, in] x [in, 2 * H]`
    product, whose activations and gradients are laid out `[B, 2, H]`, and on CPU
    transposes them to and from the other layers' `[2, B, H]` at every gradient step:
    those copies were 8% of SAC's update (benchmarks/README.md, "Off-policy
    throughput"). Same parameters and values either way.
    """

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            QValue,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            axis_size=NUM_CRITICS,
        )
        obs, action = (jnp.broadcast_to(x, (NUM_CRITICS, *x.shape)) for x in (obs, action))
        return ensemble(self.hidden_sizes, self.activation, name="critics")(obs, action)


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
        mean = _dense(self.action_dim, 0.01)(x)
        log_std = squash_log_std(_dense(self.action_dim, 0.01)(x))
        return TanhGaussian(mean, log_std)


class DeterministicActor(nn.Module):
    """TD3's policy (Fujimoto et al. 2018): `obs (B, ...) -> tanh(MLP(obs)) (B, d)`."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1))
        return jnp.tanh(_dense(self.action_dim, 0.01)(x))
