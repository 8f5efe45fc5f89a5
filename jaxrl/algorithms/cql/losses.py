"""CQL's conservative penalty (Kumar, Zhou, Tucker & Levine 2020, "Conservative
Q-Learning for Offline Reinforcement Learning", NeurIPS 2020).

CQL(H) adds to each critic's regression (the SAC backbone's, `jaxrl/algorithms/
actor_critic.py`) the penalty of eq. 4 with the entropy regulariser of app. F:

    alpha_cql * E_s~D [ log sum_a exp Q(s, a) - E_a~D Q(s, a) ]

which pushes Q down on actions the critics would otherwise overvalue and up on the
dataset's. The log-sum-exp over a continuous action space is estimated by importance
sampling (app. F, as the authors' code does): K actions from the uniform distribution
on [-1, 1]^d, K from the current policy at s and K from the policy at s', each term
`Q(s, a_k) - log mu(a_k)` with its proposal's log-density. With `temperature` T the
penalty is `T logsumexp(Q / T)` (the authors' code; T = 1 is eq. 4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["cql_penalty", "discrete_cql_penalty", "importance_weighted"]


def importance_weighted(q: jax.Array, log_density: jax.Array) -> jax.Array:
    """`Q(s, a_k) - log mu(a_k)`, no gradient through the density: one importance-sampling
    term of the log-sum-exp estimate (`q (N, B, K)`, `log_density` broadcastable)."""
    return q - jax.lax.stop_gradient(log_density)


def cql_penalty(
    q_data: jax.Array, q_sampled: jax.Array, temperature: jax.Array | float
) -> jax.Array:
    """`sum_i mean_b [T logsumexp_k(q_sampled[i, b, k] / T) - q_data[i, b]]` (Kumar et al.
    2020, eq. 4 and app. F): `q_data (N, B)` the critics at the dataset's actions,
    `q_sampled (N, B, K)` at the sampled actions, importance-weighted."""
    lse = temperature * jax.nn.logsumexp(q_sampled / temperature, axis=-1)
    return jnp.sum(jnp.mean(lse - q_data, axis=-1))


def discrete_cql_penalty(q: jax.Array, data_action: jax.Array) -> jax.Array:
    """`mean_b [logsumexp_a Q(s, a) - Q(s, a^D)]` over `q (B, A)` (Kumar et al. 2020,
    eq. 4 with a finite action set: the log-sum-exp is exact, as in their QR-DQN-based
    Atari experiments): Q of the dataset's action `data_action (B,)` is pushed up, every
    action's down in proportion to its softmax weight."""
    q_data = jnp.take_along_axis(q, data_action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(q, axis=-1) - q_data)
