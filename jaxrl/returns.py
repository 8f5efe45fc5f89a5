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


def lambda_returns(
    reward: jax.Array,
    discount: jax.Array,
    next_value: jax.Array,
    lam: jax.Array | float,
) -> jax.Array:
    """Bootstrapped TD(lambda) returns over a time-major (T, ...) trajectory.

    R_t = reward[t] + discount[t] * ((1 - lam) * next_value[t] + lam * R_{t+1})
    R_T = next_value[T - 1]  (bootstrap from the last value)

    DreamerV3 (Hafner et al. 2023, "Mastering Diverse Domains through World
    Models", arXiv:2301.04104, "Critic Learning", eq. 7 of arXiv v1); the
    lambda-return of Sutton & Barto (2018), sec. 12.1, in its recursive form.
    Unlike `gae` this takes no `done` flag: `discount[t]` already carries the
    discount and the continuation, e.g. `gamma * c_{t+1}` with a predicted
    continue probability, so `discount[t] = 0` cuts the return after
    `reward[t]`. `next_value[t]` is the value of the state after step t.
    `lam = 1` gives the discounted sum of rewards bootstrapped with
    `next_value[T - 1]`; `lam = 0` gives the one-step targets
    `reward[t] + discount[t] * next_value[t]`. Returns (T, ...); gradients
    flow through every input (wrap the result in `stop_gradient` for a target).
    """
    dtype = jnp.result_type(reward, discount, next_value)
    reward, discount, next_value = (jnp.asarray(x, dtype) for x in (reward, discount, next_value))

    def backward(carry, inputs):
        reward_t, discount_t, next_value_t = inputs
        carry = reward_t + discount_t * ((1.0 - lam) * next_value_t + lam * carry)
        return carry.astype(dtype), carry.astype(dtype)

    _, returns = jax.lax.scan(
        backward, next_value[-1], (reward, discount, next_value), reverse=True
    )
    return returns
