"""Small helpers shared by the objective modules (not public)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
Scalar = jax.Array | float


def float_mask(mask: Array) -> Array:
    """A 0/1 float32 copy of a float or bool mask."""
    return jnp.asarray(mask).astype(jnp.float32)


def is_number(x: object) -> bool:
    """A Python int or float (not a bool, not a traced array): a value checkable now."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_positive_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0
