"""Sequence backbones for world models: one interface, three interchangeable cores.

A world model (DreamerV3's RSSM, Hafner et al. 2023; STORM, Zhang et al. 2023;
an SSM world model, e.g. Lu et al. 2023) feeds its backbone x_t = concat(z_t, a_t)
and reads h_t, the deterministic state. `make("gru" | "transformer" | "ssm", ...)`
builds one:

- `gru` (gru.py): DreamerV3's LayerNorm GRU; sequential only. No options.
  Carry: h [B, hidden_size].
- `transformer` (transformer.py): sliding-window causal attention with ALiBi and a
  KV-cache carry (STORM/TWM-style). Options num_layers=2, num_heads=4, window=16.
  Carry: {"keys", "values": [B, window, num_layers, num_heads, head_dim],
  "mask": [B, window]}.
- `ssm` (ssm.py): stacked Linear Recurrent Units (Orvieto et al. 2023), parallel
  over time by an associative scan that handles resets (S5, Smith et al. 2023).
  Options num_layers=2, state_size=64. Carry: {"real", "imag": [B, num_layers,
  state_size]} (the complex states' parts).

The interface
-------------
A backbone is a frozen (hashable) dataclass whose fields are static config:
`input_size` (D_in), `hidden_size` (D_out, the size of every h_t) and its own
options with defaults. It has no Python-side state; every method is pure jax,
jit- and vmap-safe:

    init(key) -> params
        a pytree of float32 arrays.
    initial_carry(batch_size) -> carry
        the empty history: a pytree of arrays whose leaves all have leading dim
        batch_size (all three built-ins: float32, zeros).
    step(params, carry, x, reset) -> (carry, h)
        x [B, D_in], reset [B] bool. Where reset is True, x starts a new episode:
        the carry is replaced by `initial_carry` BEFORE x is consumed. h [B, D_out].
    sequence(params, carry, xs, resets) -> (carries, hs)
        batch-major xs [B, T, D_in], resets [B, T] bool, starting from `carry`.
        hs [B, T, D_out]; `carries` is the carry AFTER each step, every leaf
        [B, T, ...]: flatten it to [B * T, ...] to start imagination from every
        step with `step`. It must equal `scan_steps` (scanning `step` over T),
        outputs and carries, to float tolerance.

`step` is for acting and imagination, `sequence` for training on replayed
sequences; a backbone without a parallel form returns `scan_steps(self, ...)`
(`lax.scan` of `step`, as the GRU does; import it from `.gru`).

Adding a fourth backbone
------------------------
Write one module here with a frozen dataclass implementing the four methods
(wrap flax linen modules and `.apply` them with the params `init` returned),
validate its options in `__post_init__` (`jaxrl.config.check*` raise
`ValueError`s naming the field), and add it to `BACKBONES`; or register it
from your own code with `BACKBONES["name"] = MyBackbone`. Then add its name to
the parametrisation of tests/nn/test_backbones.py, which checks sequence ==
scanned step (outputs and carries, from a non-initial carry, with resets),
reset isolation, jit and vmap.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax

from jaxrl import config as cfg

from .gru import GRU, scan_steps
from .ssm import SSM
from .transformer import Transformer

Params = Any
Carry = Any


class Backbone(Protocol):
    """The backbone interface (see the module docstring)."""

    input_size: int
    hidden_size: int

    def init(self, key: jax.Array) -> Params: ...

    def initial_carry(self, batch_size: int) -> Carry: ...

    def step(
        self, params: Params, carry: Carry, x: jax.Array, reset: jax.Array
    ) -> tuple[Carry, jax.Array]: ...

    def sequence(
        self, params: Params, carry: Carry, xs: jax.Array, resets: jax.Array
    ) -> tuple[Carry, jax.Array]: ...


BACKBONES: dict[str, type] = {"gru": GRU, "transformer": Transformer, "ssm": SSM}


def make(name: str, input_size: int, hidden_size: int, **options: Any) -> Backbone:
    """The backbone `name` with sizes D_in = input_size, D_out = hidden_size and its options.

    Raises `ValueError` (`jaxrl.config.ConfigError`) for an unknown name, an
    unknown option or an invalid value, naming the field and what is allowed.
    """
    cfg.check(name in BACKBONES, "backbone", name, f"one of {sorted(BACKBONES)}")
    cls = BACKBONES[name]
    allowed = {f.name for f in dataclasses.fields(cls)} - {"input_size", "hidden_size"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise cfg.ConfigError(
            f"unknown option(s) {unknown} for backbone={name!r}; allowed: {sorted(allowed)}"
        )
    return cls(input_size=input_size, hidden_size=hidden_size, **options)


__all__ = [
    "BACKBONES",
    "GRU",
    "SSM",
    "Backbone",
    "Carry",
    "Params",
    "Transformer",
    "make",
    "scan_steps",
]
