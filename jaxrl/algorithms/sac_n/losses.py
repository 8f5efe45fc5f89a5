"""EDAC's ensemble-diversity term (An et al. 2021, "Uncertainty-Based Offline
Reinforcement Learning with Diversified Q-Ensemble", NeurIPS 2021).

SAC-N is SAC with N critics and the minimum over all of them in the target and the
actor's loss (An et al. 2021, sec. 3; the shared `soft_td_target`, `soft_actor_loss`
and `twin_critic_loss` of `jaxrl/algorithms/actor_critic.py`, which take any N). EDAC
adds one term to the critics' loss, below, so that fewer critics suffice.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["action_gradients", "ensemble_diversity"]


def ensemble_diversity(grads: jax.Array, eps: float = 1e-10) -> jax.Array:
    """`ES = mean_b 1/(N-1) sum_{i != j} <g_i, g_j> / (|g_i| |g_j|)`, g_i = grad_a Q_i(s, a)
    (An et al. 2021, eq. 5, normalised as in their code): the mean pairwise cosine
    similarity of the critics' action gradients at the dataset's actions, `grads (N, B, d)`.
    Minimising it spreads the critics' gradients, so their minimum penalises actions off
    the data's support with fewer critics."""
    n = grads.shape[0]
    unit = grads / (jnp.linalg.norm(grads, axis=-1, keepdims=True) + eps)
    gram = jnp.einsum("ibd,jbd->bij", unit, unit)  # (B, N, N)
    off_diagonal = gram.sum(axis=(1, 2)) - jnp.trace(gram, axis1=1, axis2=2)
    return jnp.mean(off_diagonal) / (n - 1)


def action_gradients(
    q_value: nn.Module, critics_params: Any, obs: jax.Array, action: jax.Array
) -> jax.Array:
    """`grad_a Q_i(s, a)` of every critic, `(N, B, d)`: `q_value` is one critic's module
    (`actor_critic.QValue`) and `critics_params` the ensemble's stacked parameters
    (`params["params"]["critics"]`, leading axis N). Kept differentiable (create-graph):
    the diversity term's gradient flows into the critics' parameters."""

    def q_sum(p, a):
        return q_value.apply({"params": p}, obs, a).sum()  # samples are independent

    return jax.vmap(jax.grad(q_sum, argnums=1), in_axes=(0, None))(critics_params, action)
