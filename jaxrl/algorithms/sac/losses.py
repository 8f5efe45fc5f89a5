"""SAC's losses as small pure functions (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", sec. 4-5), and the twin-critic regression TD3 shares.

Shapes: `q` holds both critics' values, `(2, B)`; log-probabilities and targets are
`(B,)`. Targets come from the n-step batch of `jaxrl/replay/nstep.py` through
`offpolicy.td_target` (reward + discount * value, no gradient), so a termination
stops the bootstrap and a time limit does not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.replay.nstep import NStepBatch


def clipped_double_q(q: jax.Array) -> jax.Array:
    """`min(Q_1, Q_2)` over the critic axis (Fujimoto et al. 2018, eq. 10): the smaller
    estimate counters the overestimation bias of maximising a learned Q."""
    return jnp.min(q, axis=0)


def soft_td_target(
    batch: NStepBatch, next_q: jax.Array, next_log_prob: jax.Array, alpha: jax.Array
) -> jax.Array:
    """`y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))`, a' ~ pi(s').

    The soft Bellman backup (Haarnoja et al. 2018, eqs. 2-3) with the clipped double-Q
    of the target critics `next_q (2, B)`; `next_log_prob (B,)` is the current policy's
    log-probability of its sampled next action.
    """
    return offpolicy.td_target(batch, clipped_double_q(next_q) - alpha * next_log_prob)


def twin_critic_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """`sum_i mean_b (Q_i(s, a) - y)^2`: both critics regress on the same target
    (Haarnoja et al. 2018, eq. 5; Fujimoto et al. 2018's TD3, as in their code)."""
    return jnp.sum(jnp.mean((q - target[None]) ** 2, axis=-1))


def actor_loss(q: jax.Array, log_prob: jax.Array, alpha: jax.Array) -> jax.Array:
    """`mean(alpha * log pi(a|s) - min_i Q_i(s, a))`, a = tanh(mean + std * eps)
    reparameterised (Haarnoja et al. 2018, eqs. 7 and 11): maximise the soft value."""
    return jnp.mean(alpha * log_prob - clipped_double_q(q))


def temperature_loss(
    log_alpha: jax.Array, log_prob: jax.Array, target_entropy: jax.Array
) -> jax.Array:
    """`-mean(log_alpha * (log pi(a|s) + target_entropy))`, the policy term held fixed.

    Haarnoja et al. 2018, eq. 18, in the logarithm of alpha as their softlearning
    code (and SB3) optimise it: its gradient lowers alpha when the policy's entropy
    `-log pi` exceeds the target and raises it when it falls below.
    """
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))
