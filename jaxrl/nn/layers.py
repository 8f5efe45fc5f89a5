"""Layers shared by algorithms: an orthogonally initialised MLP and a resettable GRU."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def orthogonal(scale: float = float(np.sqrt(2.0))) -> nn.initializers.Initializer:
    """Orthogonal initialiser (Saxe et al. 2014), the PPO default (Engstrom et al. 2020)."""
    return nn.initializers.orthogonal(scale)


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


class MLP(nn.Module):
    """Dense layers with an activation after each; orthogonal weights, zero biases."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))
        return x


class ScannedGRU(nn.Module):
    """A GRU scanned over time whose state resets where `resets` is true.

    Inputs are time-major: `x` (T, B, F) and `resets` (T, B) where `resets[t]`
    marks the first step of a new episode, so the carry is zeroed *before*
    processing `x[t]`. This is how recurrent PPO keeps hidden state from
    leaking across episode boundaries inside one rollout.
    """

    hidden_size: int

    @nn.compact
    def __call__(
        self, carry: jax.Array, x: jax.Array, resets: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        cell = nn.GRUCell(features=self.hidden_size)

        def step(cell, carry, inputs):
            x_t, reset_t = inputs
            carry = jnp.where(reset_t[:, None], jnp.zeros_like(carry), carry)
            carry, y = cell(carry, x_t)
            return carry, y

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})
        return scan(cell, carry, (x, resets))

    @staticmethod
    def initial_carry(batch: int, hidden_size: int) -> jax.Array:
        return jnp.zeros((batch, hidden_size), jnp.float32)
