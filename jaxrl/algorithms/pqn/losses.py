"""PQN's loss, as a small pure function (Gallici et al. 2024).

`td_loss` is the squared error of the taken actions' Q-values to the Q(lambda)
targets, which `jaxrl.returns.q_lambda_targets` computes backward over the rollout
from the max-Q of the next observations (re-exported here, its former home). Both are
checked against hand computations in tests/algorithms/test_pqn.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.returns import q_lambda_targets

__all__ = ["q_lambda_targets", "td_loss"]


def td_loss(q_taken: jax.Array, targets: jax.Array) -> jax.Array:
    """0.5 E[(Q(s, a) - G)^2], the targets held fixed (no gradient through them)."""
    return 0.5 * jnp.mean((q_taken - jax.lax.stop_gradient(targets)) ** 2)
