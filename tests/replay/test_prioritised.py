"""Prioritised replay: sampling proportional to p^alpha against the exact distribution,
importance weights by hand, maximal priority for new items, and range checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# pytest puts this folder on sys.path (no __init__.py), so the sibling module imports.
from test_sum_tree import chi_square_bound

from jaxrl.config import ConfigError
from jaxrl.replay import prioritised, sum_tree

ALPHA = 0.6


def filled(priorities):
    """A buffer of 8 single-item rows (capacity 8, one environment) with given priorities."""
    state = prioritised.init({"x": jnp.float32(0)}, 8, 1)
    for i in range(8):
        state = prioritised.add(state, {"x": jnp.array([float(i)])})
    return prioritised.set_priorities(state, jnp.arange(8), jnp.asarray(priorities), ALPHA)


def test_sampled_frequencies_are_proportional_to_priority_to_the_alpha():
    priorities = np.array([1.0, 4.0, 0.5, 2.0, 0.01, 8.0, 1.0, 3.0], np.float32)
    state = filled(priorities)
    draw = jax.jit(lambda k: prioritised.sample(state, k, 8, 0.5).items["x"])
    drawn = np.asarray(jax.lax.map(draw, jax.random.split(jax.random.key(0), 10000)))
    counts = np.bincount(drawn.astype(int).ravel(), minlength=8)
    exact = priorities.astype(np.float64) ** ALPHA
    chi_square_bound(counts, exact / exact.sum())


def test_probabilities_and_importance_weights_by_hand():
    # alpha = 1: leaves are the priorities. Slots 0 and 1 only: P = 1/4 and 3/4.
    state = prioritised.init({"x": jnp.float32(0)}, 4, 2)
    state = prioritised.add(state, {"x": jnp.array([0.0, 1.0])})
    state = prioritised.set_priorities(state, jnp.array([0, 1]), jnp.array([1.0, 3.0]), 1.0)
    drawn = prioritised.sample(state, jax.random.key(1), 4, 0.5)
    p = np.where(np.asarray(drawn.indices) == 0, 0.25, 0.75)
    np.testing.assert_allclose(drawn.probabilities, p, rtol=1e-6)
    # w_i = (N P_i)^-beta / max_j (N P_j)^-beta with N = 2, beta = 0.5.
    w = (2 * p) ** -0.5
    np.testing.assert_allclose(drawn.weights, w / w.max(), rtol=1e-6)
    np.testing.assert_allclose(
        prioritised.importance_weights(jnp.array([0.25, 0.75]), 0.5), [1.0, (1 / 3) ** 0.5]
    )


def test_new_items_get_the_largest_priority_seen_and_zero_is_never_drawn():
    state = prioritised.init({"x": jnp.float32(0)}, 4, 2)
    state = prioritised.add(state, {"x": jnp.zeros(2)})
    state = prioritised.set_priorities(state, jnp.array([0, 1, 1]), jnp.array([4.0, 9.0, 0.0]), 0.5)
    # Index 1 appears twice: the last priority (0) wins. The largest p^alpha seen is 3.
    np.testing.assert_allclose(sum_tree.leaves(state.tree)[:2], [2.0, 0.0])
    assert float(state.max_priority) == 3.0
    state = prioritised.add(state, {"x": jnp.ones(2)})  # slots 2 and 3
    np.testing.assert_allclose(sum_tree.leaves(state.tree)[:4], [2.0, 0.0, 3.0, 3.0])
    drawn = prioritised.sample(state, jax.random.key(2), 4, 1.0, stratified=False)
    assert 1 not in np.asarray(drawn.indices)


def test_exponents_out_of_range_name_the_argument():
    state = filled(np.ones(8, np.float32))
    with pytest.raises(ConfigError, match="alpha"):
        prioritised.set_priorities(state, jnp.array([0]), jnp.array([1.0]), 1.5)
    with pytest.raises(ConfigError, match="beta"):
        prioritised.sample(state, jax.random.key(0), 4, -0.1)
    with pytest.raises(ConfigError, match="batch_size"):
        prioritised.sample(state, jax.random.key(0), 9, 0.4)
