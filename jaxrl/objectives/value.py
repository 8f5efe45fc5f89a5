"""Diagnostics of a learned critic (PPO with a value model)."""

from __future__ import annotations

import jax.numpy as jnp

from ._masks import Array


def explained_variance(values: Array, returns: Array, mask: Array) -> Array:
    """1 - Var[R - V] / Var[R] over the mask tokens (population variances): 1 when the
    critic predicts the returns exactly, 0 when it does no better than their mean,
    negative when worse. 0 when the returns do not vary (nothing to explain)."""
    m = jnp.asarray(mask, jnp.float32)
    count = jnp.maximum(jnp.sum(m), 1.0)

    def variance(x):
        mean = jnp.sum(x * m) / count
        return jnp.sum(((x - mean) * m) ** 2) / count

    var_returns = variance(returns)
    ratio = variance(returns - values) / jnp.maximum(var_returns, 1e-12)
    return jnp.where(var_returns > 1e-12, 1.0 - ratio, 0.0)
