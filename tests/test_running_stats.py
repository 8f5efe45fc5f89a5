"""Running statistics (jaxrl/running_stats.py) against hand-computed values and NumPy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.running_stats import RunningStats, init_stats, merge_stats, normalize, update_stats


def test_batch_update_hand_computed():
    # Prior (mean 0, var 1, count 1) merged with the batch {2, 4} (mean 3, var 1, count 2):
    # mean = 0 + 3 * 2/3 = 2; M2 = 1*1 + 1*2 + 3^2 * 1*2/3 = 9; var = 9/3 = 3.
    stats = update_stats(init_stats((1,), prior_count=1.0), jnp.array([[2.0], [4.0]]))
    np.testing.assert_allclose(stats.mean, [2.0], rtol=1e-6)
    np.testing.assert_allclose(stats.var, [3.0], rtol=1e-6)
    assert float(stats.count) == pytest.approx(3.0)


def test_one_sample_at_a_time_equals_one_batch_and_numpy():
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(64, 2)).astype(np.float32)
    one_by_one = init_stats((2,))
    for row in x:
        one_by_one = update_stats(one_by_one, row)
    batched = update_stats(init_stats((2,)), x.reshape(8, 8, 2))  # extra leading axes: samples
    for stats in (one_by_one, batched):
        np.testing.assert_allclose(stats.mean, x.mean(0), rtol=1e-4)
        np.testing.assert_allclose(stats.var, x.var(0), rtol=1e-3)
        assert float(stats.count) == pytest.approx(64 + 1e-4)


def test_merge_stats_of_independent_streams_matches_numpy():
    rng = np.random.default_rng(1)
    chunks = [
        rng.normal(i, 1 + i, size=(n, 2)).astype(np.float32) for i, n in enumerate([50, 80, 31])
    ]
    per_stream = [update_stats(init_stats((2,), prior_count=0.0), c) for c in chunks]
    merged = merge_stats(jax.tree.map(lambda *xs: jnp.stack(xs), *per_stream))
    everything = np.concatenate(chunks)
    np.testing.assert_allclose(merged.mean, everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(merged.var, everything.var(0), rtol=1e-4)
    assert float(merged.count) == pytest.approx(len(everything))


def test_axis_name_pools_the_batches_of_every_copy():
    """Under vmap with an axis name, each copy's batch is merged into shared statistics
    equal to one update with all copies' samples."""
    x = np.random.default_rng(2).normal(size=(4, 5, 3)).astype(np.float32)  # copies, batch, dim
    update = jax.vmap(lambda s, b: update_stats(s, b, "envs"), in_axes=(None, 0), axis_name="envs")
    shared = update(init_stats((3,)), x)
    pooled = update_stats(init_stats((3,)), x.reshape(-1, 3))
    for leaf, ref in zip(jax.tree.leaves(shared), jax.tree.leaves(pooled), strict=True):
        np.testing.assert_allclose(leaf, np.broadcast_to(ref, leaf.shape), rtol=1e-5, atol=1e-6)


def test_normalize_hand_computed_and_clipped():
    stats = RunningStats(mean=jnp.array([1.0, -1.0]), var=jnp.array([4.0, 0.25]), count=10.0)
    x = jnp.array([3.0, 0.0])  # (3 - 1) / 2 = 1, (0 + 1) / 0.5 = 2
    np.testing.assert_allclose(normalize(stats, x), [1.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(normalize(stats, x, clip=1.5), [1.0, 1.5], rtol=1e-6)
    assert normalize(stats, jnp.array([3, 0], jnp.int32)).dtype == jnp.float32
