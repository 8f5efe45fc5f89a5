"""The `gru` backbone: DreamerV3's recurrent core (a LayerNorm GRU after an input layer).

Hafner et al. 2023, "Mastering Diverse Domains through World Models" (DreamerV3):
the RSSM's deterministic state h_t is a GRU whose gates come from one linear
map of concat(input, h_{t-1}) followed by LayerNorm, with the update gate biased
towards keeping the state (sigmoid(u - 1)); Cho et al. 2014 for the GRU itself.
The input concat(z_t, a_t) first passes a Dense + LayerNorm + SiLU layer, as in
DreamerV3's `img_in` layer.

A GRU has no parallel form (its gates depend nonlinearly on h_{t-1}): `sequence`
is `scan_steps`, a `lax.scan` of `step`, so it costs T sequential steps and
returns every carry (for a GRU the carry *is* the output h_t).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import config as cfg
from jaxrl.nn.layers import Dense

Params = dict
Carry = jax.Array


class _GRUCore(nn.Module):
    """Input layer + DreamerV3's LayerNorm GRU cell, one step."""

    hidden_size: int

    @nn.compact
    def __call__(self, h: jax.Array, x: jax.Array) -> jax.Array:
        x = nn.silu(nn.LayerNorm(name="in_norm")(Dense(self.hidden_size, name="in")(x)))
        gates = Dense(3 * self.hidden_size, use_bias=False, name="gates")(
            jnp.concatenate([x, h], axis=-1)
        )
        gates = nn.LayerNorm(name="gates_norm")(gates)
        reset, cand, update = jnp.split(gates, 3, axis=-1)
        cand = jnp.tanh(jax.nn.sigmoid(reset) * cand)
        update = jax.nn.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * h


@dataclasses.dataclass(frozen=True)
class GRU:
    """DreamerV3's GRU core. Carry: h [B, hidden_size] float32 (zeros = empty history).

    No options besides the sizes. Outputs equal the carry: h_t. The initial
    state is zeros (DreamerV3 learns one; here `initial_carry` takes no params).
    """

    input_size: int
    hidden_size: int

    def __post_init__(self) -> None:
        cfg.check_positive(self, "input_size", "hidden_size")

    @property
    def _core(self) -> _GRUCore:
        return _GRUCore(self.hidden_size)

    def init(self, key: jax.Array) -> Params:
        h = self.initial_carry(1)
        x = jnp.zeros((1, self.input_size), jnp.float32)
        return self._core.init(key, h, x)["params"]

    def initial_carry(self, batch_size: int) -> Carry:
        return jnp.zeros((batch_size, self.hidden_size), jnp.float32)

    def step(
        self, params: Params, carry: Carry, x: jax.Array, reset: jax.Array
    ) -> tuple[Carry, jax.Array]:
        h = jnp.where(reset[:, None], jnp.zeros_like(carry), carry)
        h = self._core.apply({"params": params}, h, x)
        return h, h

    def sequence(
        self, params: Params, carry: Carry, xs: jax.Array, resets: jax.Array
    ) -> tuple[Carry, jax.Array]:
        return scan_steps(self, params, carry, xs, resets)


def scan_steps(
    backbone: Any, params: Any, carry: Any, xs: jax.Array, resets: jax.Array
) -> tuple[Any, jax.Array]:
    """`backbone.step` scanned over T, batch-major in and out: (carries, hs).

    The definition every backbone's `sequence` must match, and the `sequence` of a
    backbone without a parallel form (the GRU). Re-exported by `jaxrl.nn.backbones`.
    """

    def body(carry, inputs):
        carry, h = backbone.step(params, carry, *inputs)
        return carry, (carry, h)

    time_major = (jnp.swapaxes(xs, 0, 1), jnp.swapaxes(resets, 0, 1))
    _, (carries, hs) = jax.lax.scan(body, carry, time_major)
    return jax.tree.map(lambda leaf: jnp.swapaxes(leaf, 0, 1), (carries, hs))
