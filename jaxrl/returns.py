"""Return and advantage estimators shared by on-policy algorithms (pure functions).

All inputs are time-major arrays of shape (T, ...). `done[t]` means the
episode ended at step t (terminated or truncated): the estimate must not
look past it. Truncation is handled by the caller adding `gamma * V(final
observation)` to `reward[t]` (see `bootstrap_truncated_rewards`), so these
functions only need one `done` flag.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(
    reward: jax.Array,
    value: jax.Array,
    done: jax.Array,
    last_value: jax.Array,
    gamma: jax.Array | float,
    gae_lambda: jax.Array | float,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16).

    delta_t = r_t + gamma * (1 - d_t) * V(s_{t+1}) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}

    Returns `(advantages, returns)` with `returns = advantages + value` (the
    lambda-return, the value target).
    """
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    not_done = 1.0 - done.astype(reward.dtype)
    delta = reward + gamma * not_done * next_value - value

    def backward(carry, inputs):
        delta_t, not_done_t = inputs
        carry = delta_t + gamma * gae_lambda * not_done_t * carry
        return carry, carry

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(last_value), (delta, not_done), reverse=True
    )
    return advantages, advantages + value


def bootstrap_truncated_rewards(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    final_value: jax.Array,
    gamma: jax.Array | float,
) -> jax.Array:
    """Adds `gamma * V(final_obs)` to rewards of steps cut by a time limit.

    A truncated episode did not reach a terminal state, so its return would
    have continued; bootstrapping from the value of the true last observation
    (`info["final_observation"]`) removes the bias of treating time limits as
    terminal (Pardo et al. 2018). Terminated steps take precedence.
    """
    bootstrap = jnp.logical_and(truncated, jnp.logical_not(terminated))
    return reward + gamma * final_value * bootstrap.astype(reward.dtype)
