"""The `ssm` backbone: a stack of Linear Recurrent Units (LRU), a diagonal linear state space.

Orvieto et al. 2023, "Resurrecting Recurrent Neural Networks for Long Sequences"
(the LRU); the diagonal complex recurrence and its parallel scan follow Smith
et al. 2023, "Simplified State Space Layers for Sequence Modeling" (S5). Used
as a world-model backbone in e.g. Lu et al. 2023, "Structured State Space Models
for In-Context Reinforcement Learning" (which also resets inside the scan).

Each layer keeps a complex state x_t in C^N (N = `state_size`):

    x_t = Λ ⊙ x_{t-1} + γ ⊙ (B u_t),        y_t = Re(C x_t) + D ⊙ u_t

with Λ = exp(-exp(ν) + i·exp(θ)), so |Λ| = exp(-exp(ν)) < 1 for every finite ν
(stable by construction), and γ = exp(γ_log) initialised to sqrt(1 - |Λ|²)
(the LRU's normalisation). At init |Λ| is uniform on the ring [R_MIN, R_MAX]
and the phase in [0, MAX_PHASE]. A layer is pre-LayerNorm and residual:
h <- h + GLU(GELU(LRU(LayerNorm(h)))) (the LRU paper's block). An input
Dense maps D_in -> hidden_size first and a final LayerNorm normalises h_t.

Parallel form: one `jax.lax.associative_scan` per layer over the pairs
(a_t, b_t) = (Λ, γ ⊙ B u_t) with (a, b) ∘ (a', b') = (a' a, a' b + b'). A reset
at t sets a_t = 0, which discards the state carried into t (including the
incoming carry's contribution), exactly what `step` does by zeroing the state
before consuming x_t. The scan's prefix products give the state after every
step, so `carries` costs nothing extra.

Carry: {"real": [B, num_layers, state_size], "imag": [B, num_layers, state_size]},
the real and imaginary parts of the per-layer states as float32 (so every
carry leaf of every backbone is float32); zeros = empty history.
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import config as cfg
from jaxrl.nn.layers import Dense

Params = dict
Carry = dict

R_MIN = 0.9
"""Smallest |Λ| at init (the LRU paper's sCIFAR setting): memory of ~10 to ~1000 steps."""
R_MAX = 0.999
"""Largest |Λ| at init."""
MAX_PHASE = 2 * math.pi
"""Largest arg(Λ) at init."""


def _nu_init(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    u = jax.random.uniform(key, shape)
    return jnp.log(-0.5 * jnp.log(u * (R_MAX**2 - R_MIN**2) + R_MIN**2))


def _theta_init(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.log(MAX_PHASE * jax.random.uniform(key, shape, minval=1e-4))


def _scaled_normal(scale: float) -> nn.initializers.Initializer:
    return nn.initializers.normal(stddev=scale)


class _LRU(nn.Module):
    """One linear recurrent unit: hidden_size -> complex state_size -> hidden_size."""

    hidden_size: int
    state_size: int

    def setup(self) -> None:
        n, h = self.state_size, self.hidden_size
        self.nu_log = self.param("nu_log", _nu_init, (n,))
        self.theta_log = self.param("theta_log", _theta_init, (n,))
        self.gamma_log = self.param(
            "gamma_log", lambda _key: 0.5 * jnp.log1p(-jnp.exp(-2 * jnp.exp(self.nu_log)))
        )
        self.b_re = self.param("b_re", _scaled_normal(1 / math.sqrt(2 * h)), (n, h))
        self.b_im = self.param("b_im", _scaled_normal(1 / math.sqrt(2 * h)), (n, h))
        self.c_re = self.param("c_re", _scaled_normal(1 / math.sqrt(n)), (h, n))
        self.c_im = self.param("c_im", _scaled_normal(1 / math.sqrt(n)), (h, n))
        self.d = self.param("d", _scaled_normal(1.0), (h,))

    def decay(self) -> jax.Array:
        """Λ, complex [state_size]."""
        return jnp.exp(jax.lax.complex(-jnp.exp(self.nu_log), jnp.exp(self.theta_log)))

    def _drive(self, u: jax.Array) -> jax.Array:
        gamma = jnp.exp(self.gamma_log)
        return jax.lax.complex((u @ self.b_re.T) * gamma, (u @ self.b_im.T) * gamma)

    def _read(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return jnp.real(x) @ self.c_re.T - jnp.imag(x) @ self.c_im.T + self.d * u

    def step(self, x: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x [B, N] complex (already reset), u [B, H] -> (x', y [B, H])."""
        x = self.decay() * x + self._drive(u)
        return x, self._read(x, u)

    def sequence(
        self, x0: jax.Array, us: jax.Array, resets: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """x0 [B, N], us [B, T, H], resets [B, T] -> (states [B, T, N], ys [B, T, H])."""
        b = self._drive(us)
        a = jnp.where(resets[..., None], jnp.zeros((), b.dtype), self.decay())
        a = jnp.broadcast_to(a, b.shape)

        def combine(left, right):
            a_l, b_l = left
            a_r, b_r = right
            return a_r * a_l, a_r * b_l + b_r

        a_cum, b_cum = jax.lax.associative_scan(combine, (a, b), axis=1)
        xs = a_cum * x0[:, None] + b_cum
        return xs, self._read(xs, us)


class _SSMNet(nn.Module):
    hidden_size: int
    state_size: int
    num_layers: int

    def setup(self) -> None:
        self.inp = Dense(self.hidden_size)
        self.norms = [nn.LayerNorm() for _ in range(self.num_layers)]
        self.lrus = [_LRU(self.hidden_size, self.state_size) for _ in range(self.num_layers)]
        self.glus = [Dense(2 * self.hidden_size) for _ in range(self.num_layers)]
        self.out_norm = nn.LayerNorm()

    def _mix(self, layer: int, y: jax.Array) -> jax.Array:
        value, gate = jnp.split(self.glus[layer](nn.gelu(y)), 2, axis=-1)
        return value * jax.nn.sigmoid(gate)

    def step(self, state: jax.Array, x: jax.Array, reset: jax.Array) -> tuple[jax.Array, jax.Array]:
        state = jnp.where(reset[:, None, None], jnp.zeros((), state.dtype), state)
        h = self.inp(x)
        new = []
        for layer in range(self.num_layers):
            s, y = self.lrus[layer].step(state[:, layer], self.norms[layer](h))
            new.append(s)
            h = h + self._mix(layer, y)
        return jnp.stack(new, axis=1), self.out_norm(h)

    def sequence(
        self, state: jax.Array, xs: jax.Array, resets: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        h = self.inp(xs)
        states = []
        for layer in range(self.num_layers):
            s, y = self.lrus[layer].sequence(state[:, layer], self.norms[layer](h), resets)
            states.append(s)
            h = h + self._mix(layer, y)
        return jnp.stack(states, axis=2), self.out_norm(h)

    def eigenvalues(self) -> jax.Array:
        return jnp.stack([lru.decay() for lru in self.lrus])


def _to_complex(carry: Carry) -> jax.Array:
    return jax.lax.complex(carry["real"], carry["imag"])


def _from_complex(state: jax.Array) -> Carry:
    return {"real": jnp.real(state), "imag": jnp.imag(state)}


@dataclasses.dataclass(frozen=True)
class SSM:
    """A stack of LRU layers (Orvieto et al. 2023), parallel over time by associative scan.

    Options: `num_layers` (2) and `state_size` (64, complex units per layer).
    Carry: {"real", "imag"}, each [B, num_layers, state_size] float32.
    """

    input_size: int
    hidden_size: int
    num_layers: int = 2
    state_size: int = 64

    def __post_init__(self) -> None:
        cfg.check_positive(self, "input_size", "hidden_size", "num_layers", "state_size")

    @property
    def _net(self) -> _SSMNet:
        return _SSMNet(self.hidden_size, self.state_size, self.num_layers)

    def init(self, key: jax.Array) -> Params:
        x = jnp.zeros((1, self.input_size), jnp.float32)
        state = _to_complex(self.initial_carry(1))
        return self._net.init(key, state, x, jnp.zeros((1,), bool), method="step")["params"]

    def initial_carry(self, batch_size: int) -> Carry:
        zeros = jnp.zeros((batch_size, self.num_layers, self.state_size), jnp.float32)
        return {"real": zeros, "imag": zeros}

    def step(
        self, params: Params, carry: Carry, x: jax.Array, reset: jax.Array
    ) -> tuple[Carry, jax.Array]:
        state, h = self._net.apply({"params": params}, _to_complex(carry), x, reset, method="step")
        return _from_complex(state), h

    def sequence(
        self, params: Params, carry: Carry, xs: jax.Array, resets: jax.Array
    ) -> tuple[Carry, jax.Array]:
        states, hs = self._net.apply(
            {"params": params}, _to_complex(carry), xs, resets, method="sequence"
        )
        return _from_complex(states), hs

    def eigenvalues(self, params: Params) -> jax.Array:
        """Λ of every layer, complex [num_layers, state_size]; |Λ| < 1 by construction."""
        return self._net.apply({"params": params}, method="eigenvalues")
