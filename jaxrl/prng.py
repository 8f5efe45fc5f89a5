"""Fast random draws: `jax.random`'s bits from straight-line Threefry code.

Every layer draws its per-step randomness here: environments (`jaxrl.envs`: reset
states, sticky actions, noise), action distributions (`jaxrl.nn.distributions`:
Gumbel and Gaussian noise), replay (`jaxrl.replay`: batch indices and priority
targets) and algorithms (PPO's rollout key splits, off-policy warm-up actions). It
depends on jax only, so all of them can import it.

`split`, `fold_in` and `randint` return exactly what their `jax.random` namesakes
return, and `uniform` / `bernoulli` / `normal` / `gumbel` exactly what theirs return under
`jax.threefry_partitionable(False)` (bit for bit, tested in `tests/test_prng.py`),
whatever that flag's global value; with `layout="jax"`, `random_bits`, `uniform` and
`gumbel` return what `jax.random` returns under the flag's current value instead (the
LM sampler uses it: its tokens are `jax.random.categorical`'s). Two things make them
cheaper than `jax.random` on CPU:

* The Threefry-2x32 hash is straight-line code. On CPU, JAX lowers its hash to a
  rolled 5-iteration `while` loop (to keep compile times down), and each draw
  inside a jitted `lax.scan` body then runs as its own small loop: for
  classic-control tasks, whose dynamics are a few dozen flops, and for the
  sampling step of a small policy, those loops cost more than the arithmetic
  around them. Straight-line code fuses into the surrounding kernel. (On GPU and
  TPU JAX already unrolls the hash.)
* `uniform` uses both 32-bit words of every hash, as JAX's original
  (non-partitionable) layout does: `n` numbers cost `ceil(n / 2)` hashes
  instead of the `n` of the partitionable layout, JAX's default since 0.5. The
  partitionable layout exists so that one large draw can be sharded across
  devices; per-step draws are a handful of numbers per environment or action,
  batched by `vmap` over keys, so it buys nothing here.

Use these in hot loops (inside `lax.scan` bodies); anywhere else `jax.random` is
just as good. The fast path applies to Threefry keys (`jax.random.key(...)` and
legacy `jax.random.PRNGKey(...)` with the default implementation); any other key
falls back to `jax.random`. `split` also falls back when
`jax_threefry_partitionable` is off, so that it always equals `jax.random.split`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "split",
    "fold_in",
    "uniform",
    "bernoulli",
    "random_bits",
    "randint",
    "normal",
    "gumbel",
    "gumbel_rows",
]

# `layout` of the draws: "paired", jax's original layout (two numbers per hash);
# "jax", whatever `jax.random` does under the current `jax_threefry_partitionable`.
LAYOUTS = ("paired", "jax")

_THREEFRY = "threefry2x32"
# Threefry-2x32 with 20 rounds (Salmon et al. 2011): rotation constants of the
# even and odd groups of four rounds, and the key-schedule parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(
    k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash of the counter pair `(x1, x2)` under key `(k1, k2)`."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotl(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _key_data(key: jax.Array) -> tuple[jax.Array | None, Any]:
    """`(uint32[..., 2] data, impl)` of a Threefry key usable by the fast path, else `(None, _)`."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(key)
        if str(impl) != _THREEFRY:
            return None, None
        return jax.random.key_data(key), impl
    legacy = key.dtype == jnp.uint32 and key.shape[-1:] == (2,)
    if legacy and str(jax.config.jax_default_prng_impl) == _THREEFRY:
        return key, None
    return None, None


def _hash_counters(data: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Partitionable layout: element `i` hashes the counter pair `(0, i)` (flat index `i`)."""
    size = math.prod(shape)
    counters = jnp.asarray(np.arange(size, dtype=np.uint32).reshape(shape))
    k1, k2 = data[..., 0], data[..., 1]
    return threefry2x32(k1, k2, jnp.zeros_like(counters), counters)


def _bits_paired(data: jax.Array, size: int) -> jax.Array:
    """`size` words in JAX's original layout: the counters 0..size-1 (padded with a 0
    to even length) are cut in halves, hash `j` takes `(first[j], second[j])`, and
    the output is all first words, then all second words, cut to `size`."""
    counters = np.concatenate([np.arange(size), np.zeros(size % 2)]).astype(np.uint32)
    first, second = np.split(counters, 2)
    b1, b2 = threefry2x32(data[..., 0], data[..., 1], jnp.asarray(first), jnp.asarray(second))
    return jnp.concatenate([b1, b2])[:size]


def _fast_shape(shape: Any) -> tuple[int, ...] | None:
    """`shape` as a tuple of ints if the fast path can draw it (fewer than 2**32 elements)."""
    shape = tuple(int(d) for d in shape)
    return shape if math.prod(shape) < 2**32 else None


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def fold_in(key: jax.Array, data: Any) -> jax.Array:
    """`jax.random.fold_in(key, data)` for a single key and an int32/uint32 scalar `data`
    (e.g. a loop counter): the hash of the counter pair `(0, data)`."""
    key_data, impl = _key_data(key)
    data = jnp.asarray(data)
    if key_data is None or key_data.ndim != 1 or data.ndim or data.dtype.itemsize > 4:
        return jax.random.fold_in(key, data)
    counter = lax.convert_element_type(data, jnp.uint32)
    b1, b2 = threefry2x32(key_data[0], key_data[1], jnp.zeros_like(counter), counter)
    return _as_keys(jnp.stack([b1, b2]), impl)


def split(key: jax.Array, num: int = 2) -> jax.Array:
    """`jax.random.split(key, num)` for a single key."""
    data, impl = _key_data(key)
    if data is None or data.ndim != 1 or not jax.config.jax_threefry_partitionable:
        return jax.random.split(key, num)
    b1, b2 = _hash_counters(data, (num,))
    return _as_keys(jnp.stack([b1, b2], axis=-1), impl)


def _as_keys(data: jax.Array, impl: Any) -> jax.Array:
    """New key data as keys of the kind that came in: typed keys of `impl`, or raw
    uint32 data for a legacy key (`impl` None)."""
    return data if impl is None else jax.random.wrap_key_data(data, impl=impl)


def random_bits(
    key: jax.Array, shape: tuple[int, ...] = (), layout: str = "paired"
) -> jax.Array | None:
    """uint32 bits of `jax.random.bits(key, shape)` for a single key: under
    `jax.threefry_partitionable(False)` (`layout="paired"`) or under the flag's current
    value (`"jax"`; partitionable: the hash of `(0, i)` for element `i`, its two words
    xor-ed, as jax does for 32-bit draws). None if the key is not on the fast path."""
    _check_layout(layout)
    data, _ = _key_data(key)
    fast = _fast_shape(shape)
    if data is None or data.ndim != 1 or fast is None or math.prod(fast) == 0:
        return None
    if layout == "jax" and jax.config.jax_threefry_partitionable:
        b1, b2 = _hash_counters(data, fast)
        return b1 ^ b2
    return _bits_paired(data, math.prod(fast)).reshape(fast)


def uniform(
    key: jax.Array,
    shape: tuple[int, ...] = (),
    dtype: Any = jnp.float32,
    minval: Any = 0.0,
    maxval: Any = 1.0,
    layout: str = "paired",
) -> jax.Array:
    """`jax.random.uniform(key, shape, dtype, minval, maxval)` in the original layout
    (`layout="jax"`: in jax's current one; see `random_bits`)."""
    bits = random_bits(key, shape, layout) if jnp.dtype(dtype) == jnp.float32 else None
    if bits is None:
        if layout == "jax":
            return jax.random.uniform(key, shape, dtype, minval, maxval)
        with jax.threefry_partitionable(False):
            return jax.random.uniform(key, shape, dtype, minval, maxval)
    return _floats(bits, minval, maxval)


def _floats(bits: jax.Array, minval: Any, maxval: Any) -> jax.Array:
    """float32 numbers in [minval, maxval) from uint32 `bits`, as `jax.random.uniform` makes
    them: 23 random mantissa bits with exponent 0 give a float in [1, 2); subtract 1, then
    scale."""
    minval = lax.broadcast_to_rank(lax.convert_element_type(minval, jnp.float32), bits.ndim)
    maxval = lax.broadcast_to_rank(lax.convert_element_type(maxval, jnp.float32), bits.ndim)
    mantissa = lax.shift_right_logical(bits, np.uint32(32 - 23)) | np.uint32(0x3F800000)
    floats = lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)
    return lax.max(minval, floats * (maxval - minval) + minval)


def randint(key: jax.Array, shape: tuple[int, ...], minval: Any, maxval: Any) -> jax.Array:
    """`jax.random.randint(key, shape, minval, maxval, jnp.int32)`, bit for bit, under the
    current `jax_threefry_partitionable` flag (jax's layout: replay buffers draw their
    batch indices here, and what they draw does not depend on this module).

    jax's construction: two 32-bit draws per number from the two halves of
    `split(key)`, combined as `(high mod span) * (2**32 mod span) + low mod span`, all
    mod `span = maxval - minval` (1 where `maxval <= minval`, which returns `minval`).
    Bounds must be int32 (or Python ints in its range); anything else falls back to
    `jax.random.randint`.
    """
    minval, maxval = jnp.asarray(minval), jnp.asarray(maxval)
    k_high, k_low = split(key)  # traced only: XLA drops it on the fallback path
    int32_bounds = minval.dtype == maxval.dtype == jnp.int32
    high = random_bits(k_high, shape, "jax") if int32_bounds else None
    if high is None:  # bounds not int32, or a key off the fast path (`random_bits`)
        return jax.random.randint(key, shape, minval, maxval, jnp.int32)
    low = random_bits(k_low, shape, "jax")
    minval = lax.broadcast_to_rank(minval, len(shape))
    maxval = lax.broadcast_to_rank(maxval, len(shape))
    span = lax.convert_element_type(maxval - minval, jnp.uint32)
    span = lax.select(maxval <= minval, lax.full_like(span, 1), span)
    multiplier = lax.rem(np.uint32(2**16), span)
    multiplier = lax.rem(multiplier * multiplier, span)  # 2**32 mod span
    offset = lax.rem(lax.rem(high, span) * multiplier + lax.rem(low, span), span)
    return minval + lax.convert_element_type(offset, jnp.int32)


def bernoulli(key: jax.Array, p: Any = 0.5, shape: tuple[int, ...] | None = None) -> jax.Array:
    """`jax.random.bernoulli(key, p, shape)` (mode "low") in the original layout."""
    p = jnp.asarray(p, jnp.float32) if isinstance(p, float) else jnp.asarray(p)
    if p.dtype != jnp.float32:
        with jax.threefry_partitionable(False):
            return jax.random.bernoulli(key, p, shape)
    shape = np.shape(p) if shape is None else tuple(shape)
    return uniform(key, shape, jnp.float32) < p


def normal(key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    """Standard normal float32 draws: `jax.random.normal`'s construction, sqrt(2) *
    erf_inv(u) with u uniform in (-1, 1), on `uniform`'s numbers (original layout)."""
    low = np.nextafter(np.float32(-1.0), np.float32(0.0))
    return np.float32(np.sqrt(2.0)) * lax.erf_inv(uniform(key, shape, jnp.float32, low, 1.0))


def gumbel(key: jax.Array, shape: tuple[int, ...] = (), layout: str = "paired") -> jax.Array:
    """Standard Gumbel float32 draws, -log(-log(u)) with u uniform in [tiny, 1) on
    `uniform`'s numbers: `jax.random.gumbel(key, shape)` (mode "low") in the original
    layout (`layout="jax"`: in jax's current one, bit for bit)."""
    tiny = np.float32(np.finfo(np.float32).tiny)
    return -jnp.log(-jnp.log(uniform(key, shape, jnp.float32, tiny, 1.0, layout)))


def gumbel_rows(keys: jax.Array, rows: jax.Array, num_rows: int, width: int) -> jax.Array:
    """Row `rows[s]` of `gumbel(keys[s], (num_rows, width), layout="jax")`, for every `s`:
    (S, width) float32 from `S` keys and `S` row numbers, computing only those rows.

    A sampler that decodes rows in another order than one batch would (continuous
    batching: jaxrl/lm/continuous.py) draws each row's noise here, so that its tokens are
    those of one batched draw of all `num_rows` rows. Under `jax_threefry_partitionable`
    (jax's default) element `i` of a draw hashes the counter pair `(0, i)`, so row `r`
    is the counters `r * width + c`; under the original layout hash `j` pairs the
    counters `j` and `j + h` (`h` = half the draw, rounded up; `_bits_paired`), so
    element `i` is the first word of hash `i` (`i < h`) or the second of hash `i - h`.
    Keys off the fast path fall back to drawing the whole `(num_rows, width)` per key.
    """
    data, _ = _key_data(keys)
    rows = jnp.asarray(rows)
    size = int(num_rows) * int(width)
    if data is None or data.ndim != 2 or size >= 2**32:
        full = jax.vmap(lambda k: jax.random.gumbel(k, (num_rows, width)))(keys)
        return jnp.take_along_axis(full, rows[:, None, None], axis=1)[:, 0]
    tiny = np.float32(np.finfo(np.float32).tiny)
    index = lax.convert_element_type(rows, jnp.uint32)[:, None] * np.uint32(width)
    index = index + np.arange(width, dtype=np.uint32)  # (S, width) flat element numbers
    k1, k2 = data[:, :1], data[:, 1:]
    if jax.config.jax_threefry_partitionable:
        b1, b2 = threefry2x32(k1, k2, jnp.zeros_like(index), index)
        bits = b1 ^ b2
    else:
        half = np.uint32((size + 1) // 2)
        first = index < half
        j = jnp.where(first, index, index - half)
        partner = jnp.where(j + half < np.uint32(size), j + half, np.uint32(0))
        b1, b2 = threefry2x32(k1, k2, j, partner)
        bits = jnp.where(first, b1, b2)
    return -jnp.log(-jnp.log(_floats(bits, tiny, 1.0)))
