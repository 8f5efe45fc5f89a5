"""`jaxrl.prng`'s straight-line Threefry draws equal `jax.random`'s, bit for bit.

`split` equals `jax.random.split`; `uniform`, `bernoulli` and `normal` equal their
`jax.random` namesakes in JAX's original (non-partitionable) Threefry layout,
whatever the global flag says. `gumbel` (used for categorical sampling) is checked
against the Gumbel distribution's moments and quantiles.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import prng

KEYS = {
    "typed": lambda seed: jax.random.key(seed),
    "legacy": lambda seed: jax.random.PRNGKey(seed),
}


def _same(a: jax.Array, b: jax.Array) -> None:
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        assert jnp.issubdtype(b.dtype, jax.dtypes.prng_key)
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(
        np.asarray(a).reshape(-1).view(np.uint8), np.asarray(b).reshape(-1).view(np.uint8)
    )


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("num", [2, 3])
def test_split_matches_jax(kind: str, num: int) -> None:
    keys = jax.vmap(KEYS[kind])(jnp.arange(64))
    ours = jax.jit(jax.vmap(lambda k: prng.split(k, num)))(keys)
    ref = jax.jit(jax.vmap(lambda k: jax.random.split(k, num)))(keys)
    _same(ours, ref)
    # Unbatched too (a different trace: no vmap).
    _same(jax.jit(lambda k: prng.split(k, num))(keys[5]), jax.random.split(keys[5], num))


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize(
    ("shape", "minval", "maxval"),
    [((), 0.0, 1.0), ((4,), -0.05, 0.05), ((2, 8), 0.0, 1.0), ((3,), -1.0, 1.0)],
)
def test_uniform_matches_jax(kind: str, shape: tuple, minval: float, maxval: float) -> None:
    keys = jax.vmap(KEYS[kind])(jnp.arange(256))
    ours = jax.jit(jax.vmap(lambda k: prng.uniform(k, shape, minval=minval, maxval=maxval)))
    ref = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, shape, minval=minval, maxval=maxval)))
    with jax.threefry_partitionable(False):
        expected = ref(keys)
    _same(ours(keys), expected)
    with jax.threefry_partitionable(False):  # the global flag does not matter
        _same(ours(keys), expected)


def test_uniform_array_bounds_match_jax() -> None:
    keys = jax.vmap(jax.random.key)(jnp.arange(256))
    high = jnp.array([np.pi, 1.0], jnp.float32)
    ours = jax.jit(jax.vmap(lambda k: prng.uniform(k, (2,), minval=-high, maxval=high)))
    ref = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (2,), minval=-high, maxval=high)))
    with jax.threefry_partitionable(False):
        _same(ours(keys), ref(keys))


@pytest.mark.parametrize("p", [0.5, 0.1, np.float32(0.3)])
def test_bernoulli_matches_jax(p: float) -> None:
    keys = jax.vmap(jax.random.key)(jnp.arange(512))
    ours = jax.jit(jax.vmap(lambda k: prng.bernoulli(k, p)))(keys)
    # A traced probability (e.g. a params leaf under jit).
    ours_traced = jax.jit(jax.vmap(prng.bernoulli, in_axes=(0, None)))(keys, jnp.float32(p))
    with jax.threefry_partitionable(False):
        _same(ours, jax.jit(jax.vmap(lambda k: jax.random.bernoulli(k, p)))(keys))
        ref = jax.jit(jax.vmap(jax.random.bernoulli, in_axes=(0, None)))
        _same(ours_traced, ref(keys, jnp.float32(p)))


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_normal_matches_jax(kind: str, shape: tuple) -> None:
    key = KEYS[kind](11)
    with jax.threefry_partitionable(False):
        ref = jax.random.normal(key, shape)
    _same(jax.jit(lambda k: prng.normal(k, shape))(key), ref)


def test_gumbel_is_standard_gumbel() -> None:
    draws = np.asarray(jax.jit(lambda k: prng.gumbel(k, (200_000,)))(jax.random.key(5)))
    assert np.all(np.isfinite(draws))
    euler_gamma = 0.5772156649
    assert abs(draws.mean() - euler_gamma) < 0.01
    assert abs(draws.var() - np.pi**2 / 6) < 0.02
    for q in (0.01, 0.25, 0.5, 0.75, 0.99):  # CDF exp(-exp(-x))
        x = -np.log(-np.log(q))
        density = np.exp(-x - np.exp(-x))
        sd = np.sqrt(q * (1 - q) / draws.size) / density  # sample quantile's std error
        assert abs(np.quantile(draws, q) - x) < 4 * sd, q


def test_split_follows_the_partitionable_flag() -> None:
    key = jax.random.key(7)
    with jax.threefry_partitionable(False):
        _same(jax.jit(prng.split)(key), jax.random.split(key))


def test_other_key_implementations_fall_back() -> None:
    key = jax.random.key(3, impl="rbg")
    _same(prng.split(key), jax.random.split(key))
    _same(prng.uniform(key, (4,)), jax.random.uniform(key, (4,)))
    assert prng.random_bits(key, (4,)) is None


def test_straight_line_code_has_no_loop() -> None:
    """The point of the module: no `while` in the compiled draw (jax.random has one on CPU)."""
    for draw in (prng.uniform, prng.normal, prng.gumbel):
        hlo = jax.jit(lambda k, draw=draw: draw(prng.split(k)[1], (4,))).lower(jax.random.key(0))
        assert "while" not in hlo.as_text()
