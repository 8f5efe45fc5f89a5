"""Observation and action spaces: static descriptions of what a leaf may hold.

Spaces are plain Python objects (not pytrees): their shapes, bounds and dtypes
are static structure, read at trace time. `sample` and `contains` are pure JAX
and safe under `jit` and `vmap`. `check_action` validates an action's static
shape and dtype while tracing, so a bad action fails before anything compiles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Space", "Discrete", "Box", "Dict", "Tuple", "check_action"]


class Space:
    """Base class: a set of values with a static shape and dtype."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: jax.Array) -> Any:
        """Draws a uniformly random element."""
        raise NotImplementedError

    def contains(self, x: Any) -> jax.Array:
        """Returns a boolean scalar: whether `x` lies in the space (traceable)."""
        raise NotImplementedError


class Discrete(Space):
    """Integers `0, 1, ..., n - 1` (a scalar of integer dtype)."""

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if int(n) <= 0:
            raise ValueError(f"Discrete: n must be positive, got {n}")
        self.n = int(n)
        self.shape: tuple[int, ...] = ()
        self.dtype = jnp.dtype(dtype)

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, self.shape, 0, self.n, dtype=self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        ok_dtype = jnp.issubdtype(x.dtype, jnp.integer)
        in_range = jnp.logical_and(x >= 0, x < self.n)
        return jnp.logical_and(ok_dtype and x.shape == self.shape, jnp.all(in_range))


class Box(Space):
    """A (possibly unbounded) box `low <= x <= high` of a fixed shape and dtype."""

    def __init__(
        self,
        low: float | np.ndarray,
        high: float | np.ndarray,
        shape: Sequence[int],
        dtype: Any = jnp.float32,
    ):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = jnp.dtype(dtype)
        # Bounds are kept as NumPy arrays: static data, cheap to embed as constants.
        self.low = np.broadcast_to(np.asarray(low, dtype=self.dtype), self.shape)
        self.high = np.broadcast_to(np.asarray(high, dtype=self.dtype), self.shape)
        if np.any(self.low > self.high):
            raise ValueError("Box: low must not exceed high")

    def __repr__(self) -> str:
        lo, hi = self.low.min() if self.low.size else 0, self.high.max() if self.high.size else 0
        return f"Box(low={lo}, high={hi}, shape={self.shape}, dtype={self.dtype.name})"

    def sample(self, key: jax.Array) -> jax.Array:
        if jnp.issubdtype(self.dtype, jnp.bool_):
            return jax.random.bernoulli(key, 0.5, self.shape)
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(
                key, self.shape, self.low, self.high.astype(np.int64) + 1, dtype=self.dtype
            )
        # Unbounded sides fall back to a standard normal / exponential around the bound,
        # matching gymnasium's Box.sample semantics.
        low = jnp.asarray(self.low, jnp.float32)
        high = jnp.asarray(self.high, jnp.float32)
        k_u, k_n, k_e = jax.random.split(key, 3)
        uniform = jax.random.uniform(k_u, self.shape, minval=low, maxval=high)
        normal = jax.random.normal(k_n, self.shape)
        expo = jax.random.exponential(k_e, self.shape)
        lo_fin, hi_fin = jnp.isfinite(low), jnp.isfinite(high)
        x = jnp.where(
            lo_fin & hi_fin,
            uniform,
            jnp.where(lo_fin, low + expo, jnp.where(hi_fin, high - expo, normal)),
        )
        return x.astype(self.dtype)

    def contains(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        if jnp.issubdtype(self.dtype, jnp.bool_):
            return jnp.asarray(x.dtype == jnp.bool_)
        ok = jnp.logical_and(jnp.all(x >= self.low), jnp.all(x <= self.high))
        return jnp.logical_and(
            ok, jnp.all(~jnp.isnan(x)) if jnp.issubdtype(x.dtype, jnp.floating) else True
        )


class Dict(Space):
    """A dictionary of named sub-spaces."""

    def __init__(self, spaces: Mapping[str, Space]):
        self.spaces = dict(spaces)
        self.shape = ()
        self.dtype = None

    def __repr__(self) -> str:
        return f"Dict({self.spaces!r})"

    def sample(self, key: jax.Array) -> dict[str, Any]:
        keys = jax.random.split(key, len(self.spaces))
        return {name: s.sample(k) for (name, s), k in zip(self.spaces.items(), keys, strict=True)}

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, Mapping) or set(x) != set(self.spaces):
            return jnp.asarray(False)
        return jnp.all(jnp.stack([s.contains(x[name]) for name, s in self.spaces.items()]))


class Tuple(Space):
    """A tuple of sub-spaces."""

    def __init__(self, spaces: Sequence[Space]):
        self.spaces = tuple(spaces)
        self.shape = ()
        self.dtype = None

    def __repr__(self) -> str:
        return f"Tuple({self.spaces!r})"

    def sample(self, key: jax.Array) -> tuple[Any, ...]:
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys, strict=True))

    def contains(self, x: Any) -> jax.Array:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.spaces):
            return jnp.asarray(False)
        return jnp.all(jnp.stack([s.contains(v) for s, v in zip(self.spaces, x, strict=True)]))


def check_action(space: Space, action: Any, env_name: str) -> None:
    """Raises a clear error at trace time if `action` cannot be an element of `space`.

    Only static properties (shape, dtype kind) are checked, so this costs nothing at
    run time and works on tracers. Values (e.g. out-of-range integers) cannot be
    checked without a host sync; environments clip or wrap them as their
    reference implementation does and document it.
    """
    if isinstance(space, Dict):
        if not isinstance(action, Mapping) or set(action) != set(space.spaces):
            raise TypeError(
                f"{env_name}: action must be a dict with keys {sorted(space.spaces)}, "
                f"got {type(action).__name__}"
            )
        for name, sub in space.spaces.items():
            check_action(sub, action[name], f"{env_name}[{name!r}]")
        return
    if isinstance(space, Tuple):
        if not isinstance(action, (tuple, list)) or len(action) != len(space.spaces):
            raise TypeError(f"{env_name}: action must be a tuple of {len(space.spaces)} elements")
        for i, (sub, a) in enumerate(zip(space.spaces, action, strict=True)):
            check_action(sub, a, f"{env_name}[{i}]")
        return
    shape = tuple(np.shape(action))
    dtype = jnp.result_type(action)
    if shape != tuple(space.shape):
        hint = " (under vmap, pass one action per environment copy)" if space.shape == () else ""
        raise ValueError(
            f"{env_name}: action has shape {shape}, expected {tuple(space.shape)} "
            f"for action space {space!r}{hint}"
        )
    if isinstance(space, Discrete) and not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(
            f"{env_name}: discrete action must have an integer dtype, got {dtype} "
            f"(action space {space!r})"
        )
    if (
        isinstance(space, Box)
        and jnp.issubdtype(space.dtype, jnp.floating)
        and not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer))
    ):
        raise TypeError(f"{env_name}: continuous action must be numeric, got dtype {dtype}")
