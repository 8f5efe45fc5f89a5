"""TD3's losses and target as small pure functions (Fujimoto et al. 2018,
"Addressing Function Approximation Error in Actor-Critic Methods").

The critics' regression is the shared `twin_critic_loss`
(`jaxrl/algorithms/actor_critic.py`), with the target below; target policy smoothing
(`smoothed_target_action`) is shared there too (TD3+BC uses it) and named here. Actions
live in the normalised box [-1, 1]^d.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import clipped_double_q, smoothed_target_action
from jaxrl.replay.nstep import NStepBatch

__all__ = ["deterministic_actor_loss", "smoothed_target_action", "td3_target"]


def td3_target(batch: NStepBatch, next_q: jax.Array) -> jax.Array:
    """`y = r + discount * min_i Q'_i(s', a~')`: the clipped double-Q target (Fujimoto et
    al. 2018, eq. 10) of the target critics `next_q (2, B)` at the smoothed action."""
    return offpolicy.td_target(batch, clipped_double_q(next_q))


def deterministic_actor_loss(q1: jax.Array) -> jax.Array:
    """`-mean Q_1(s, mu(s))`: the deterministic policy gradient (Silver et al. 2014)
    through the first critic only, as in Fujimoto et al. 2018 (sec. 5.1, alg. 1)."""
    return -jnp.mean(q1)
