"""DQN's targets and loss, as small pure functions.

A sampled batch carries the n-step return's inputs (`jaxrl.replay.nstep.NStepBatch`:
`reward = sum_k gamma^k r_{t+k}`, `discount = gamma^m` or 0 after a termination, and
the `next_observation` s' to bootstrap from), so the target is

    y = reward + discount * (value of s' under the target network)

and DQN regresses `Q(s, a)` on `y`. With prioritised replay, each sample's loss is
weighted by its importance weight and its |TD error| becomes its new priority. The
value of s' (`bootstrap_value`: max, or Double-Q) is in `jaxrl/algorithms/qlearning.py`,
shared with C51. Checked against hand computations in tests/algorithms/test_dqn.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def td_loss(
    q_taken: jax.Array, target: jax.Array, weights: jax.Array, kind: str
) -> tuple[jax.Array, jax.Array]:
    """`(mean_i w_i * l(Q(s_i, a_i) - y_i), |TD error| (B,))`, the targets held fixed.

    `l` is "huber": `0.5 d^2` for `|d| <= 1`, `|d| - 0.5` beyond (the error clipping of
    Mnih et al. 2015), or "mse": `0.5 d^2`. (The 0.5 does not matter with Adam, which is
    invariant to the loss's scale.) `weights` are prioritised replay's importance
    weights (Schaul et al. 2016, Algorithm 1, line 12), all ones for uniform replay.
    """
    error = q_taken - jax.lax.stop_gradient(target)
    if kind == "huber":
        elementwise = optax.huber_loss(error, delta=1.0)
    elif kind == "mse":
        elementwise = 0.5 * error**2
    else:
        raise ValueError(f"loss must be 'huber' or 'mse', got {kind!r}")
    return jnp.mean(weights * elementwise), jnp.abs(error)
