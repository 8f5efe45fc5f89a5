"""TD3's losses and target as small pure functions (Fujimoto et al. 2018,
"Addressing Function Approximation Error in Actor-Critic Methods").

The critics' regression is the shared `twin_critic_loss`
(`jaxrl/algorithms/actor_critic.py`), with the target below. Actions live in the
normalised box [-1, 1]^d.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import clipped_double_q
from jaxrl.replay.nstep import NStepBatch


def smoothed_target_action(
    next_action: jax.Array, noise: jax.Array, policy_noise: jax.Array, noise_clip: jax.Array
) -> jax.Array:
    """`clip(mu'(s') + clip(policy_noise * eps, -c, c), -1, 1)`, eps ~ N(0, 1).

    Target policy smoothing (Fujimoto et al. 2018, eq. 14): valuing a small clipped
    neighbourhood of the target action keeps the critic from exploiting narrow peaks
    of its own error. `next_action` is the target actor's, `noise` standard normal.
    """
    smoothing = jnp.clip(policy_noise * noise, -noise_clip, noise_clip)
    return jnp.clip(next_action + smoothing, -1.0, 1.0)


def td3_target(batch: NStepBatch, next_q: jax.Array) -> jax.Array:
    """`y = r + discount * min_i Q'_i(s', a~')`: the clipped double-Q target (Fujimoto et
    al. 2018, eq. 10) of the target critics `next_q (2, B)` at the smoothed action."""
    return offpolicy.td_target(batch, clipped_double_q(next_q))


def deterministic_actor_loss(q1: jax.Array) -> jax.Array:
    """`-mean Q_1(s, mu(s))`: the deterministic policy gradient (Silver et al. 2014)
    through the first critic only, as in Fujimoto et al. 2018 (sec. 5.1, alg. 1)."""
    return -jnp.mean(q1)
