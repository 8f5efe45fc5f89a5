"""SAC's losses as small pure functions (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", sec. 4-5). The clipped double-Q and the twin critics'
regression, shared with TD3, are in `jaxrl/algorithms/actor_critic.py`.

Shapes: `q` holds both critics' values, `(2, B)`; log-probabilities and targets are
`(B,)`. Targets come from the n-step batch of `jaxrl/replay/nstep.py` through
`offpolicy.td_target` (reward + discount * value, no gradient), so a termination
stops the bootstrap and a time limit does not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import clipped_double_q, twin_critic_loss
from jaxrl.replay.nstep import NStepBatch

__all__ = [
    "actor_loss",
    "clipped_double_q",
    "soft_td_target",
    "temperature_loss",
    "twin_critic_loss",
]


def soft_td_target(
    batch: NStepBatch, next_q: jax.Array, next_log_prob: jax.Array, alpha: jax.Array
) -> jax.Array:
    """`y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))`, a' ~ pi(s').

    The soft Bellman backup (Haarnoja et al. 2018, eqs. 2-3) with the clipped double-Q
    of the target critics `next_q (2, B)`; `next_log_prob (B,)` is the current policy's
    log-probability of its sampled next action.
    """
    return offpolicy.td_target(batch, clipped_double_q(next_q) - alpha * next_log_prob)


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
