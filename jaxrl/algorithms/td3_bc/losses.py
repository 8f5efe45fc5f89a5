"""TD3+BC's actor loss (Fujimoto & Gu 2021, "A Minimalist Approach to Offline
Reinforcement Learning", NeurIPS 2021).

The critics are TD3's unchanged: the shared `twin_critic_loss` towards the clipped
double-Q target at the target actor's smoothed action (`smoothed_target_action`,
`clipped_double_q`, `offpolicy.td_target`; `jaxrl/algorithms/actor_critic.py`). What
TD3+BC adds is one term in the actor's loss, below; its behaviour-cloning part is the
shared `mse_bc_loss` (`jaxrl/algorithms/behaviour_cloning.py`), which the `bc` learner
minimises alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms.behaviour_cloning import mse_bc_loss

__all__ = ["bc_lambda", "td3_bc_actor_loss"]


def bc_lambda(q1: jax.Array, alpha: jax.Array | float) -> jax.Array:
    """`lambda = alpha / mean_b |Q_1(s, pi(s))|`, no gradient (Fujimoto & Gu 2021,
    eq. 5): scales the Q term to the behaviour-cloning term's size whatever the
    rewards' scale, so one alpha (2.5) suits every task."""
    return jax.lax.stop_gradient(alpha / jnp.mean(jnp.abs(q1)))


def td3_bc_actor_loss(
    q1: jax.Array, policy_action: jax.Array, data_action: jax.Array, alpha: jax.Array | float
) -> jax.Array:
    """`-lambda mean_b Q_1(s, pi(s)) + mean_(b,j) (pi(s)_j - a_j)^2` (Fujimoto & Gu 2021,
    eq. 3; as in their code, the squared error is averaged over the batch and the
    action's dimensions): TD3's deterministic policy gradient plus behaviour cloning of the
    dataset's action `a` (the shared `behaviour_cloning.mse_bc_loss`), with `lambda` from
    `bc_lambda`."""
    bc = mse_bc_loss(policy_action, data_action)
    return -bc_lambda(q1, alpha) * jnp.mean(q1) + bc
