"""`jaxrl.nn.Dense` is flax's `nn.Dense` with its matmul over flattened leading axes."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.nn import Dense
from jaxrl.nn.layers import flat_dot_general


@pytest.mark.parametrize("shape", [(5,), (4, 5), (3, 4, 5), (2, 3, 4, 5)])
def test_dense_is_flax_dense_in_parameters_values_and_gradients(shape):
    x = jax.random.normal(jax.random.key(0), shape)
    plain, layer = nn.Dense(7), Dense(7)
    params = plain.init(jax.random.key(1), x)
    ours = layer.init(jax.random.key(1), x)
    assert jax.tree.structure(params) == jax.tree.structure(ours)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(a, b)

    def loss(module):
        return lambda p, x: jnp.sum(jnp.tanh(module.apply(p, x)) * jnp.arange(7.0))

    np.testing.assert_allclose(layer.apply(params, x), plain.apply(params, x), rtol=1e-6)
    g_plain = jax.grad(loss(plain), argnums=(0, 1))(params, x)
    g_ours = jax.grad(loss(layer), argnums=(0, 1))(params, x)
    for a, b in zip(jax.tree.leaves(g_plain), jax.tree.leaves(g_ours), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_dense_under_vmap_and_in_a_module_tree_keeps_flax_names():
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Dense(3)(nn.relu(Dense(4)(x)))

    x = jnp.ones((2, 6, 5))
    params = Net().init(jax.random.key(0), x)
    assert set(params["params"]) == {"Dense_0", "Dense_1"}
    per_row = jax.vmap(lambda row: Net().apply(params, row))(x)
    np.testing.assert_allclose(per_row, Net().apply(params, x), rtol=1e-6)


def test_flat_dot_general_passes_other_contractions_through():
    a = jax.random.normal(jax.random.key(0), (3, 4, 5))
    b = jax.random.normal(jax.random.key(1), (3, 5, 6))
    batched = (((2,), (1,)), ((0,), (0,)))
    np.testing.assert_allclose(
        flat_dot_general(a, b, batched), jax.lax.dot_general(a, b, batched), rtol=1e-6
    )
    first_axis = (((0,), (0,)), ((), ()))
    c = jax.random.normal(jax.random.key(2), (3, 2))
    np.testing.assert_allclose(
        flat_dot_general(a, c, first_axis), jax.lax.dot_general(a, c, first_axis), rtol=1e-6
    )
