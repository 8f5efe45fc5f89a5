"""RLPD's critic target: the minimum over a random subset of the critic ensemble (Ball,
Smith, Kostrikov & Levine 2023, "Efficient Online Reinforcement Learning with Offline
Data"; the subset is REDQ's, Chen, Wang, Zhou & Ross 2021, "Randomized Ensembled Double
Q-Learning", alg. 1, line 8).

With N critics, every gradient step draws a set M of m distinct critics uniformly at
random (RLPD: m = 2 of N = 10) and bootstraps from the soft target of their minimum,

    y = r + gamma (1 - d) ( min_{i in M} Q'_i(s', a') - alpha log pi(a' | s') ),   a' ~ pi(s')

which keeps clipped double Q's pessimism however large the ensemble. The rest of the
step is SAC's (`jaxrl/algorithms/actor_critic.py`: `soft_td_target` on the subset's
values, the critics' regression, the actor's and the temperature's steps). Drawing the
target critics' *parameters* (`take_critics`) costs the target's forward pass m critics,
not N.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["critic_subset", "take_critics"]


def critic_subset(key: jax.Array, num_critics: int, size: int) -> jax.Array:
    """`size` distinct indices of `range(num_critics)`, every subset equally likely (the
    first `size` entries of a uniform random permutation), int32 `(size,)`."""
    return jax.random.permutation(key, num_critics)[:size].astype(jnp.int32)


def take_critics(params: Any, indices: jax.Array) -> Any:
    """The parameters of the critics `indices` of an ensemble (`EnsembleQ`'s parameters:
    every leaf has the critics on its leading axis), as an ensemble of `len(indices)`."""
    return jax.tree.map(lambda leaf: jnp.take(leaf, indices, axis=0), params)
