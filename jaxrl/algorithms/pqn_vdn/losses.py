"""PQN-VDN's loss: value decomposition (Sunehag et al. 2018) on PQN's replay-free
Q(lambda) learner (Gallici et al. 2024).

VDN writes the team's action value as the sum of the agents' own:

    Q_tot(s, a_1..a_N) = sum_i alive_i * Q_i(o_i, a_i)

so the greedy joint action is every agent's own greedy action and
`max_a Q_tot = sum_i alive_i * max_a Q_i(o_i, a)` (agents that left the episode add
nothing). PQN's targets are Peng's Q(lambda) returns of the team reward over the
rollout (`jaxrl.returns.q_lambda_targets`, with `next_q` the max of Q_tot), and the loss
is the squared TD error of the sum:

    L = 0.5 E[(Q_tot(s, a) - G)^2],   G held fixed.

tests/algorithms/test_multiagent.py checks both against hand-computed values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["max_q_total", "q_total", "vdn_td_loss"]


def q_total(q_taken: jax.Array, alive: jax.Array) -> jax.Array:
    """`sum_i alive_i * Q_i(o_i, a_i)` over the last (agent) axis: `(..., N) -> (...)`."""
    return jnp.sum(jnp.where(alive, q_taken, 0.0), axis=-1)


def max_q_total(q_values: jax.Array, alive: jax.Array) -> jax.Array:
    """`max_a Q_tot = sum_i alive_i * max_a Q_i(o_i, a)`: `(..., N, A) -> (...)`; the max
    of a sum of per-agent terms is the sum of the per-agent maxima."""
    return q_total(q_values.max(axis=-1), alive)


def vdn_td_loss(q_tot: jax.Array, targets: jax.Array) -> jax.Array:
    """0.5 E[(Q_tot(s, a) - G)^2], the targets held fixed (no gradient through them)."""
    return 0.5 * jnp.mean((q_tot - jax.lax.stop_gradient(targets)) ** 2)
