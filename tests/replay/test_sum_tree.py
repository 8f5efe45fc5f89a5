"""The sum tree against numpy: node sums after random updates, prefix-sum search,
and sampled frequencies against the exact `leaf / total` (chi-square bound)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrl.config import ConfigError
from jaxrl.replay import sum_tree

# Jitted once per process: eager dispatch of the tree's per-level ops is slow on CPU.
update = jax.jit(sum_tree.update)
find = jax.jit(sum_tree.find)
sample = jax.jit(sum_tree.sample, static_argnums=2, static_argnames="stratified")


def numpy_tree(leaves: np.ndarray) -> list[np.ndarray]:
    """The levels a sum tree over `leaves` (a power of two long) must hold, in float32."""
    levels = [leaves.astype(np.float32)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(below[0::2] + below[1::2])
    return levels[::-1]


def chi_square_bound(counts: np.ndarray, probs: np.ndarray, quantile: float = 0.999) -> None:
    """Asserts that `counts` are a plausible multinomial draw from `probs`."""
    expected = counts.sum() * probs
    support = probs > 0
    assert counts[~support].sum() == 0, "drew a zero-probability index"
    statistic = np.sum((counts[support] - expected[support]) ** 2 / expected[support])
    assert statistic < stats.chi2.ppf(quantile, df=support.sum() - 1), statistic


def test_init_pads_to_a_power_of_two_and_rejects_bad_capacity():
    tree = sum_tree.init(5)
    assert sum_tree.num_leaves(tree) == 8 and [x.shape for x in tree.levels] == [
        (1,),
        (2,),
        (4,),
        (8,),
    ]
    assert sum_tree.num_leaves(sum_tree.init(1)) == 1
    with pytest.raises(ConfigError, match="capacity"):
        sum_tree.init(0)


def test_random_updates_match_numpy_exactly():
    rng = np.random.default_rng(0)
    capacity = 37  # not a power of two: 64 leaves, 27 of them padding
    tree = sum_tree.init(capacity)
    reference = np.zeros(64, np.float32)
    for _ in range(50):
        # Batches with repeated indices: a sequential loop keeps the last value.
        indices = rng.integers(0, capacity, size=12)
        values = (rng.random(12) * 10.0 ** rng.integers(-3, 4, size=12)).astype(np.float32)
        tree = update(tree, jnp.asarray(indices, jnp.int32), jnp.asarray(values))
        for i, v in zip(indices, values, strict=True):
            reference[i] = v
    for level, expected in zip(tree.levels, numpy_tree(reference), strict=True):
        np.testing.assert_array_equal(level, expected)


def test_setting_a_large_leaf_back_to_zero_leaves_the_small_ones():
    # Delta propagation in float32 would give a total of exactly 0 here.
    tree = update(sum_tree.init(8), jnp.arange(3), jnp.array([1e6, 1e-3, 2e-3]))
    tree = update(tree, jnp.array([0]), jnp.array([0.0]))
    np.testing.assert_allclose(float(sum_tree.total(tree)), 3e-3, rtol=1e-6)
    drawn = sample(tree, jax.random.key(0), 1000)
    assert set(np.unique(np.asarray(drawn))) == {1, 2}


def test_find_is_the_prefix_sum_search():
    rng = np.random.default_rng(1)
    leaves = rng.random(16).astype(np.float32) * (rng.random(16) > 0.3)
    tree = update(sum_tree.init(16), jnp.arange(16), jnp.asarray(leaves))
    cumulative = np.cumsum(leaves.astype(np.float64))
    targets = rng.random(2000) * cumulative[-1]
    # Stay clear of interval edges, where float32 and float64 sums may disagree.
    edges = np.abs(targets[:, None] - cumulative[None, :]).min(axis=1) > 1e-4
    expected = np.searchsorted(cumulative, targets, side="right")
    found = np.asarray(find(tree, jnp.asarray(targets, jnp.float32)))
    np.testing.assert_array_equal(found[edges], expected[edges])
    assert np.all(leaves[found] > 0)


def test_targets_at_or_past_the_total_never_reach_an_empty_leaf():
    tree = update(sum_tree.init(8), jnp.array([2, 5]), jnp.array([0.3, 0.7]))
    found = find(tree, jnp.array([1.0, 1.0 + 1e-6, 2.0, 0.0]))
    np.testing.assert_array_equal(found, [5, 5, 5, 2])


@pytest.mark.parametrize("stratified", [False, True], ids=["independent", "stratified"])
def test_sampled_frequencies_match_leaf_over_total(stratified):
    leaves = np.array([0.5, 0, 3.0, 1.0, 0.1, 0, 2.0, 0.4, 1.5, 0.05, 0, 0.8], np.float32)
    tree = update(sum_tree.init(12), jnp.arange(12), jnp.asarray(leaves))
    draw = jax.jit(lambda k: sum_tree.sample(tree, k, 512, stratified=stratified))
    keys = jax.random.split(jax.random.key(42), 200)
    drawn = np.asarray(jax.lax.map(draw, keys)).ravel()  # 102,400 draws
    counts = np.bincount(drawn, minlength=16)[:12]
    chi_square_bound(counts, leaves / leaves.sum())
