"""PQN's targets and loss, as small pure functions (Gallici et al. 2024).

`q_lambda_targets` computes the Q(lambda) return of every step of a rollout,
backward in time, from the max-Q of the next observations; `td_loss` is the squared
error of the taken actions' Q-values to those targets. Both are checked against hand
computations in tests/algorithms/test_pqn.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def q_lambda_targets(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    next_q: jax.Array,
    gamma: jax.Array | float,
    q_lambda: jax.Array | float,
) -> jax.Array:
    """Peng's Q(lambda) returns of a time-major rollout, shape (T, ...).

    Peng & Williams 1996 ("Incremental Multi-Step Q-Learning"), in the recursive form
    PQN uses (Gallici et al. 2024, sec. 4; purejaxql's `_get_target`):

        G_t = r_t + gamma * (1 - term_t) * [(1 - lambda_t) * next_q_t + lambda_t * G_{t+1}]
        lambda_t = lambda * (1 - done_t),   done_t = term_t or trunc_t

    `next_q[t] = max_a Q(s', a)` for the observation s' that followed step t: the next
    observation of the rollout, or, where the episode ended at t, its true last
    observation (`info["final_observation"]`). A termination stops the return
    (`G_t = r_t`); a truncation bootstraps fully from `next_q[t]` and does not reach
    into the next episode. The rollout's last step bootstraps fully too (`G_T` is
    taken to be `next_q[T-1]`). lambda = 0 gives the one-step Q-learning target,
    lambda = 1 the discounted return to the end of the rollout (or episode),
    bootstrapped there. Unlike Watkins's Q(lambda), the trace is not cut after
    exploratory actions.

    To treat time limits as terminal (as purejaxql does), pass `terminated = done`
    and an all-False `truncated`.
    """
    not_terminated = 1.0 - terminated.astype(reward.dtype)
    trace = q_lambda * (1.0 - jnp.logical_or(terminated, truncated).astype(reward.dtype))

    def backward(next_return, inputs):
        reward_t, not_terminated_t, trace_t, next_q_t = inputs
        # (1 - l) * q + l * G = q + l * (G - q)
        bootstrap = next_q_t + trace_t * (next_return - next_q_t)
        target = reward_t + gamma * not_terminated_t * bootstrap
        return target, target

    _, targets = jax.lax.scan(
        backward, next_q[-1], (reward, not_terminated, trace, next_q), reverse=True
    )
    return targets


def td_loss(q_taken: jax.Array, targets: jax.Array) -> jax.Array:
    """0.5 E[(Q(s, a) - G)^2], the targets held fixed (no gradient through them)."""
    return 0.5 * jnp.mean((q_taken - jax.lax.stop_gradient(targets)) ** 2)
