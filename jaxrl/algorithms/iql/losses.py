"""IQL's losses as small pure functions (Kostrikov, Nair & Levine 2021, "Offline
Reinforcement Learning with Implicit Q-Learning", ICLR 2022).

IQL never evaluates the critic at an action outside the dataset: the value V(s) is an
upper expectile of Q(s, a) over the dataset's actions (eq. 5), the critics regress on
`r + gamma V(s')` (eq. 6), and the policy is extracted by advantage-weighted regression
(eq. 7). Shapes: `q` holds the critics' values `(2, B)` or their minimum `(B,)`; values,
log-probabilities and targets are `(B,)`. The critics' regression is the shared
`twin_critic_loss` (`jaxrl/algorithms/actor_critic.py`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import twin_critic_loss
from jaxrl.replay.nstep import NStepBatch

__all__ = [
    "advantage_weights",
    "awr_actor_loss",
    "expectile_loss",
    "iql_target",
    "twin_critic_loss",
    "value_loss",
]


def expectile_loss(diff: jax.Array, expectile: jax.Array | float) -> jax.Array:
    """`mean(|tau - 1(u < 0)| u^2)`, u = `diff`: the asymmetric squared loss L_2^tau
    (Kostrikov et al. 2021, eq. 4; Newey & Powell 1987). tau = 0.5 is half the mean
    squared error; tau -> 1 weighs positive residuals more, so the minimiser of
    `E[L_2^tau(Q - V)]` over V tends to the maximum of Q over the data's support."""
    weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
    return jnp.mean(weight * diff**2)


def value_loss(q: jax.Array, v: jax.Array, expectile: jax.Array | float) -> jax.Array:
    """`L_V = E_(s,a)~D[L_2^tau(min_i Q'_i(s, a) - V(s))]` (Kostrikov et al. 2021, eq. 5):
    the value regresses on the target critics' clipped double-Q `q (B,)` (held fixed)."""
    return expectile_loss(jax.lax.stop_gradient(q) - v, expectile)


def iql_target(batch: NStepBatch, next_v: jax.Array) -> jax.Array:
    """`y = r + gamma (1 - terminated) V(s')` (Kostrikov et al. 2021, eq. 6), no gradient:
    the critics bootstrap from the value network, never from a policy's action."""
    return offpolicy.td_target(batch, next_v)


def advantage_weights(
    q: jax.Array, v: jax.Array, temperature: jax.Array | float, max_weight: float
) -> jax.Array:
    """`min(exp(beta (Q(s, a) - V(s))), max_weight)`, no gradient: the exponentiated
    advantages of advantage-weighted regression (Peng et al. 2019; Kostrikov et al. 2021,
    eq. 7, clipped at 100 in their code so one large advantage cannot dominate a batch)."""
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(temperature * (q - v)), max_weight))


def awr_actor_loss(log_prob: jax.Array, weights: jax.Array) -> jax.Array:
    """`L_pi = -E_(s,a)~D[w(s, a) log pi(a|s)]` (Kostrikov et al. 2021, eq. 7): behaviour
    cloning of the dataset's actions, each weighted by `advantage_weights`."""
    return -jnp.mean(weights * log_prob)
