"""Return and advantage estimators (pure functions over time-major arrays).

One backward recursion, `lambda_recursion`, computes every return here:

    G_T = bootstrap
    G_t = reward_t + discount_t * blend(next_value_t, G_{t+1}, lam_t)     where mask_t = 1
    G_t = G_{t+1}                                                         where mask_t = 0

with `blend(v, G, lam) = (1 - lam) v + lam G` (the lambda-return of Sutton & Barto 2018,
sec. 12.1, in its recursive form), or `G` itself when there are no per-step values
(`next_value=None`, i.e. lam = 1). The estimators are thin wrappers that choose its
inputs:

* `gae`: the GAE advantages (Schulman et al. 2016), a recursion over TD errors;
  with a `mask`, masked steps are skipped (LM completions with environment tokens in
  between: GRPO's and PPO-LM's masked GAE);
* `lambda_returns`: DreamerV3's bootstrapped lambda-returns;
* `q_lambda_targets`: Peng's Q(lambda) targets of PQN.

All inputs are time-major arrays of shape (T, ...). In `gae`, `done[t]` means the
episode ended at step t (terminated or truncated): the estimate must not look past it.
Truncation is handled by the caller adding `gamma * V(final observation)` to
`reward[t]` (see `bootstrap_truncated_rewards`), so `gae` only needs one `done` flag.

Each wrapper performs the same floating-point operations in the same order as the
hand-written loop it replaced, so training runs keep their `params_fingerprint`;
tests/test_returns.py checks this bit for bit against copies of those loops.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Scalar = jax.Array | float
# blend(next_value_t, G_{t+1}, lam_t): what step t bootstraps from.
Blend = Callable[[jax.Array, jax.Array, Scalar], jax.Array]


def interpolate(next_value: jax.Array, next_return: jax.Array, lam: Scalar) -> jax.Array:
    """`(1 - lam) * v + lam * G`: the lambda-return's mix of the one-step bootstrap
    `v` and the next step's return `G` (Sutton & Barto 2018, eq. 12.18 applied
    recursively; DreamerV3, Hafner et al. 2023, eq. 7 of arXiv:2301.04104v1)."""
    return (1.0 - lam) * next_value + lam * next_return


def interpolate_from_value(next_value: jax.Array, next_return: jax.Array, lam: Scalar) -> jax.Array:
    """`v + lam * (G - v)`: `interpolate` written as a correction of `v`, as PQN and
    purejaxql compute it. Equal in exact arithmetic; in floating point the two round
    differently, so PQN keeps this form to keep its results bit for bit."""
    return next_value + lam * (next_return - next_value)


def lambda_recursion(
    reward: jax.Array,
    discount: jax.Array | float,
    bootstrap: jax.Array,
    *,
    next_value: jax.Array | None = None,
    lam: Scalar = 1.0,
    mask: jax.Array | None = None,
    blend: Blend = interpolate,
) -> jax.Array:
    """The masked, time-major lambda-return recursion; returns G, shape (T, ...).

        G_T = bootstrap
        G_t = reward_t + discount_t * blend(next_value_t, G_{t+1}, lam_t)   (mask_t = 1)
        G_t = G_{t+1}                                                       (mask_t = 0)

    Args:
      reward: (T, ...) what step t adds (a reward, or a TD error for GAE).
      discount: (T, ...) or a scalar: the weight of the continuation after step t
        (gamma, times 0 after a termination, times lambda for GAE).
      bootstrap: (...) the return after the last step, G_T.
      next_value: (T, ...) the one-step bootstrap of step t (the value of the state
        after it), mixed with G_{t+1} by `blend`; None: no mixing, the continuation
        is G_{t+1} (lam = 1, the discounted sum, and GAE's recursion over TD errors).
      lam: a scalar or (T, ...): the lambda of each step (only with `next_value`).
      mask: (T, ...) 0/1 or bool, or None: a step with mask 0 is skipped, passing
        G_{t+1} through unchanged (so its output is the next unmasked step's return).
        Computed as `m * G_t + (1 - m) * G_{t+1}`, so a skipped step's inputs must be
        finite. None emits no masking at all.
      blend: how `next_value`, G_{t+1} and lam combine (`interpolate`, or PQN's
        `interpolate_from_value`, which rounds differently).

    Scalars (`discount`, `lam`) are used as given inside the loop, not broadcast first,
    so `1 - lam` of a Python float is computed in double precision as before. The
    inputs are cast to their common dtype, and so is every step's result. Gradients
    flow through every input (wrap the result in `stop_gradient` for a target).
    """
    dtype = jnp.result_type(*(x for x in (reward, discount, next_value) if x is not None))
    reward, discount = jnp.asarray(reward, dtype), jnp.asarray(discount, dtype)
    if next_value is not None:
        next_value = jnp.asarray(next_value, dtype)
    if mask is not None:
        mask = jnp.asarray(mask).astype(dtype)
    # Per-step arrays are scanned over; scalars are closed over.
    per_step_discount = discount if jnp.ndim(discount) else None
    per_step_lam = lam if jnp.ndim(lam) else None

    def backward(next_return, inputs):
        reward_t, discount_t, next_value_t, lam_t, mask_t = inputs
        discount_t = discount if discount_t is None else discount_t
        if next_value_t is None:
            continuation = next_return
        else:
            continuation = blend(next_value_t, next_return, lam if lam_t is None else lam_t)
        g = reward_t + discount_t * continuation
        if mask_t is not None:
            g = mask_t * g + (1.0 - mask_t) * next_return
        g = g.astype(dtype)
        return g, g

    xs = (reward, per_step_discount, next_value, per_step_lam, mask)
    _, returns = jax.lax.scan(backward, jnp.asarray(bootstrap, dtype), xs, reverse=True)
    return returns


def next_on_mask(x: jax.Array, mask: jax.Array, last: jax.Array) -> jax.Array:
    """For each step t, `x` at the first step after t whose mask is 1 (`last` if
    there is none): what a masked recursion bootstraps from. (T, ...).

    A `lambda_recursion` with zero discount: on the mask it returns `x_t` itself,
    off the mask it passes the later one through.
    """
    at_or_after = lambda_recursion(x, 0.0, last, mask=mask)
    return jnp.concatenate([at_or_after[1:], jnp.asarray(last, at_or_after.dtype)[None]], axis=0)


def gae(
    reward: jax.Array,
    value: jax.Array,
    done: jax.Array,
    last_value: jax.Array,
    gamma: Scalar,
    gae_lambda: Scalar,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16).

    delta_t = r_t + gamma * (1 - d_t) * V(s_{t+1}) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}

    Returns `(advantages, returns)` with `returns = advantages + value` (the
    lambda-return, the value target).

    With a `mask` (T, ...) of 0/1, masked steps are skipped, as if they were not in
    the sequence: `V(s_{t+1})` and `A_{t+1}` are those of the next step on the mask
    (`last_value` and 0 after the last one), and a masked step's advantage is that of
    the next step on the mask. This is the masked GAE of verl and Tunix over LM
    completions whose environment tokens (tool output, the user's turn) must neither
    be bootstrapped from nor break the recursion; multiply by the mask to zero them.
    """
    if mask is None:
        next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    else:
        next_value = next_on_mask(value, mask, last_value)
    not_done = 1.0 - done.astype(reward.dtype)
    delta = reward + gamma * not_done * next_value - value
    advantages = lambda_recursion(
        delta, gamma * gae_lambda * not_done, jnp.zeros_like(last_value), mask=mask
    )
    return advantages, advantages + value


def bootstrap_truncated_rewards(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    final_value: jax.Array,
    gamma: Scalar,
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
    lam: Scalar,
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
    next_value = jnp.asarray(next_value, dtype)
    return lambda_recursion(reward, discount, next_value[-1], next_value=next_value, lam=lam)


def q_lambda_targets(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    next_q: jax.Array,
    gamma: Scalar,
    q_lambda: Scalar,
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

    The bracket is computed as `next_q + lambda_t * (G - next_q)`
    (`interpolate_from_value`), as PQN always has: it rounds differently from the
    `(1 - lambda_t) * next_q + lambda_t * G` of `lambda_returns`, and PQN's
    training runs are kept bit for bit.

    To treat time limits as terminal (as purejaxql does), pass `terminated = done`
    and an all-False `truncated`.
    """
    not_terminated = 1.0 - terminated.astype(reward.dtype)
    trace = q_lambda * (1.0 - jnp.logical_or(terminated, truncated).astype(reward.dtype))
    return lambda_recursion(
        reward,
        gamma * not_terminated,
        next_q[-1],
        next_value=next_q,
        lam=trace,
        blend=interpolate_from_value,
    )
