"""`jaxrl.prng`'s straight-line Threefry draws equal `jax.random`'s, bit for bit.

`split`, `fold_in` and `randint` equal their `jax.random` namesakes; `uniform`, `bernoulli`,
`normal` and `gumbel` equal theirs in JAX's original (non-partitionable) Threefry
layout, whatever the global flag says, and with `layout="jax"` `random_bits`,
`uniform` and `gumbel` equal theirs under either value of the flag. `gumbel` (used for
categorical sampling) is also checked against the Gumbel distribution's moments and
quantiles.
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


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("partitionable", [True, False])
@pytest.mark.parametrize("shape", [(), (7,), (64, 99)])
def test_jax_layout_matches_jax_under_either_flag(
    kind: str, partitionable: bool, shape: tuple
) -> None:
    key = KEYS[kind](13)
    with jax.threefry_partitionable(partitionable):
        _same(
            jax.jit(lambda k: prng.random_bits(k, shape, "jax"))(key), jax.random.bits(key, shape)
        )
        _same(
            jax.jit(lambda k: prng.uniform(k, shape, minval=-2.0, maxval=3.0, layout="jax"))(key),
            jax.random.uniform(key, shape, minval=-2.0, maxval=3.0),
        )
        _same(jax.jit(lambda k: prng.gumbel(k, shape, "jax"))(key), jax.random.gumbel(key, shape))


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("partitionable", [True, False])
@pytest.mark.parametrize(
    ("minval", "maxval"),
    # A power-of-two span, replay-sized spans, an empty and a reversed range (minval is
    # returned), and the widest int32 range (the multiplier's modular arithmetic).
    [(0, 8), (0, 12_000), (3, 3), (5, 2), (-100, 2**31 - 1), (-(2**31), 2**31 - 1)],
)
def test_randint_matches_jax_under_either_flag(
    kind: str, partitionable: bool, minval: int, maxval: int
) -> None:
    keys = jax.vmap(KEYS[kind])(jnp.arange(64))
    with jax.threefry_partitionable(partitionable):
        ours = jax.jit(jax.vmap(lambda k: prng.randint(k, (33,), minval, maxval)))(keys)
        ref = jax.vmap(lambda k: jax.random.randint(k, (33,), minval, maxval, jnp.int32))
        _same(ours, jax.jit(ref)(keys))


def test_randint_with_traced_and_array_bounds_matches_jax() -> None:
    """Replay draws with a traced bound (the number of stored steps)."""
    key = jax.random.key(23)
    size = jnp.int32(777)
    ours = jax.jit(lambda k, n: prng.randint(k, (4, 5), 0, n))(key, size)
    _same(ours, jax.random.randint(key, (4, 5), 0, size, jnp.int32))
    low, high = jnp.array([0, 10, -3], jnp.int32), jnp.array([5, 1000, 3], jnp.int32)
    ours = jax.jit(lambda k: prng.randint(k, (2, 3), low, high))(key)
    _same(ours, jax.random.randint(key, (2, 3), low, high, jnp.int32))


def test_randint_with_other_bounds_falls_back() -> None:
    key = jax.random.key(29)
    bounds = (jnp.int16(0), jnp.int16(9))
    _same(prng.randint(key, (6,), *bounds), jax.random.randint(key, (6,), *bounds, jnp.int32))


def test_gumbel_matches_jax_in_the_original_layout() -> None:
    key = jax.random.key(17)
    with jax.threefry_partitionable(False):
        ref = jax.random.gumbel(key, (3, 5))
    _same(jax.jit(lambda k: prng.gumbel(k, (3, 5)))(key), ref)


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_fold_in_matches_jax(kind: str) -> None:
    key = KEYS[kind](19)
    fold = jax.jit(prng.fold_in)
    for data in (0, 1, 63, 2**31 - 1):
        _same(fold(key, jnp.int32(data)), jax.random.fold_in(key, data))
    _same(fold(key, jnp.uint32(2**32 - 1)), jax.random.fold_in(key, jnp.uint32(2**32 - 1)))
    # A traced loop counter, as the LM sampler folds in its decode step.
    steps = jax.jit(lambda k: jax.vmap(lambda t: prng.fold_in(k, t))(jnp.arange(5)))(key)
    _same(steps, jax.vmap(lambda t: jax.random.fold_in(key, t))(jnp.arange(5)))


def test_unknown_layout_is_an_error() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        prng.uniform(jax.random.key(0), (2,), layout="partitioned")


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
    indices = jax.jit(lambda k: prng.randint(k, (256,), 0, 12_000)).lower(jax.random.key(0))
    assert "while" not in indices.as_text()
    jax_layout = jax.jit(lambda k: prng.gumbel(prng.fold_in(k, 3), (4,), "jax"))
    assert "while" not in jax_layout.lower(jax.random.key(0)).as_text()


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("partitionable", [True, False])
@pytest.mark.parametrize(("num_rows", "width"), [(6, 5), (7, 3), (1, 9)])
def test_gumbel_rows_are_rows_of_one_draw_under_either_flag(
    kind: str, partitionable: bool, num_rows: int, width: int
) -> None:
    """Row r of a (num_rows, width) draw, per key: what continuous batching gives each
    completion (odd sizes check the original layout's padded pairing)."""
    keys = jax.vmap(KEYS[kind])(jnp.arange(5) + 3)
    rows = jnp.asarray([0, num_rows - 1, num_rows // 2, 0, num_rows - 1], jnp.int32)
    with jax.threefry_partitionable(partitionable):
        ours = jax.jit(lambda k, r: prng.gumbel_rows(k, r, num_rows, width))(keys, rows)
        for s in range(5):
            full = jax.random.gumbel(keys[s], (num_rows, width))
            _same(ours[s], full[int(rows[s])])
