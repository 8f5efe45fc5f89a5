"""Layers shared by algorithms: the dense layer every network uses, an orthogonally
initialised MLP and a resettable GRU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def orthogonal(scale: float = float(np.sqrt(2.0))) -> nn.initializers.Initializer:
    """Orthogonal initialiser (Saxe et al. 2014), the PPO default (Engstrom et al. 2020)."""
    return nn.initializers.orthogonal(scale)


def flatten_obs(obs: jax.Array, batch_dims: int) -> jax.Array:
    """Flattens everything after the batch dimensions and casts to float32."""
    return obs.reshape(obs.shape[:batch_dims] + (-1,)).astype(jnp.float32)


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def flat_dot_general(
    lhs: jax.Array,
    rhs: jax.Array,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> jax.Array:
    """`lax.dot_general` for a dense layer, with the input's leading axes flattened first:
    `[..., K] x [K, N]` is computed as one 2-D `[M, K] x [K, N]` matmul (M = the product
    of the leading axes) and reshaped back. Any other contraction goes to
    `lax.dot_general` unchanged.

    Same arithmetic, different program: the kernel gradient of a matmul over `[B, T, K]`
    contracts two axes of the input and of the output gradient, and XLA's CPU backend
    then transposes the whole output gradient (with the activation's derivative fused
    into that copy) before the dot. For small models those copies are a large share of
    the learning step (benchmarks/grpo_step.py measures it; benchmarks/notes, "GRPO step
    speed").
    `jaxrl.nn.conv.patch_conv` multiplies its patches with it too.
    """
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    dense = (
        lhs.ndim > 2
        and not lhs_batch
        and not rhs_batch
        and tuple(lhs_contract) == (lhs.ndim - 1,)
        and tuple(rhs_contract) == (0,)
    )
    if not dense:
        return jax.lax.dot_general(
            lhs, rhs, dimension_numbers, precision, preferred_element_type=preferred_element_type
        )
    out = jax.lax.dot_general(
        lhs.reshape(-1, lhs.shape[-1]),
        rhs,
        (((1,), (0,)), ((), ())),
        precision,
        preferred_element_type=preferred_element_type,
    )
    return out.reshape(*lhs.shape[:-1], *rhs.shape[1:])


class Dense(nn.Dense):
    """flax's `nn.Dense` computed by `flat_dot_general`: the same parameters (names,
    shapes, initialisers) and values, and no transposing copy in its gradient on XLA
    CPU. Every network's dense layer is this one."""

    dot_general: Any = flat_dot_general


class MLP(nn.Module):
    """Dense layers with an activation after each; orthogonal weights, zero biases."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = activation_fn(self.activation)
        for size in self.hidden_sizes:
            x = act(Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))
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
