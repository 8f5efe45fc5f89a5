"""ReBRAC's losses (Tarasov, Kurenkov, Nikulin & Kolesnikov 2023, "Revisiting the
Minimalist Approach to Offline Reinforcement Learning", NeurIPS 2023).

ReBRAC is TD3+BC with behaviour-cloning penalties in both the actor and the critic
(decoupled coefficients), LayerNorm in the networks, larger batches and the minimum of
both critics in the actor's loss. Actions live in the normalised box [-1, 1]^d.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import clipped_double_q
from jaxrl.replay.nstep import NStepBatch

__all__ = ["bc_penalty", "rebrac_actor_loss", "rebrac_target"]


def bc_penalty(action: jax.Array, data_action: jax.Array) -> jax.Array:
    """`sum_j (a_j - a^D_j)^2` per sample, `(B,)`: the squared distance to the dataset's
    action (Tarasov et al. 2023, eqs. 2-3)."""
    return jnp.sum((action - data_action) ** 2, axis=-1)


def rebrac_target(
    batch: NStepBatch,
    next_q: jax.Array,
    next_action: jax.Array,
    data_next_action: jax.Array,
    next_valid: jax.Array,
    critic_bc: jax.Array | float,
) -> jax.Array:
    """`y = r + discount * (min_i Q'_i(s', a') - beta_critic * |a' - a'^D|^2)`, no
    gradient (Tarasov et al. 2023, eq. 3): `a'` the target actor's smoothed action,
    `a'^D` the dataset's next action. Where the dataset has no next action (the step
    ended its episode: `next_valid` False) the penalty is 0; after a termination the
    discount is 0 anyway."""
    penalty = jnp.where(next_valid, bc_penalty(next_action, data_next_action), 0.0)
    return offpolicy.td_target(batch, clipped_double_q(next_q) - critic_bc * penalty)


def rebrac_actor_loss(
    q: jax.Array,
    policy_action: jax.Array,
    data_action: jax.Array,
    actor_bc: jax.Array | float,
    normalize_q: bool = True,
) -> jax.Array:
    """`mean_b [beta_actor |pi(s) - a|^2 - lambda min_i Q_i(s, pi(s))]`, `lambda =
    1 / mean_b |min_i Q_i|` without gradient when `normalize_q` (else 1) (Tarasov et al.
    2023, eq. 2, as in their code): `q (N, B)` the critics at the policy's action."""
    q_min = clipped_double_q(q)
    scale = jax.lax.stop_gradient(1.0 / jnp.mean(jnp.abs(q_min))) if normalize_q else 1.0
    return jnp.mean(actor_bc * bc_penalty(policy_action, data_action) - scale * q_min)
