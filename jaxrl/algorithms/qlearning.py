"""What the Q-learning agents (DQN, C51, PQN) share: epsilon-greedy exploration, its
linear schedule, and the choice of the Q-network's observation encoder.

Each is a pure function; `jaxrl/algorithms/dqn/train.py` and
`jaxrl/algorithms/pqn/train.py` call them, tests/algorithms/test_pqn.py checks them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl import config as cfg
from jaxrl import prng

# Observation encoders of the Q-networks (the `network` config field): "auto" picks
# "conv" for (H, W, C) images and "mlp" otherwise.
NETWORKS = ("auto", "mlp", "conv")


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: jax.Array | float) -> jax.Array:
    """Per row of `q_values (B, A)`: a uniformly random action with probability
    `epsilon`, else `argmax_a Q` (Sutton & Barto 2018, sec. 2.2). Returns int32 (B,)."""
    k_explore, k_action = prng.split(key)
    shape, num_actions = q_values.shape[:-1], q_values.shape[-1]
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    # floor(U[0, A)) is uniform over the A actions; the min guards float rounding.
    uniform = prng.uniform(k_action, shape, maxval=float(num_actions))
    random = jnp.minimum(uniform.astype(jnp.int32), num_actions - 1)
    return jnp.where(prng.uniform(k_explore, shape) < epsilon, random, greedy)


def linear_epsilon(
    update_step: jax.Array,
    num_updates: int,
    eps_start: jax.Array | float,
    eps_end: jax.Array | float,
    eps_fraction: jax.Array | float,
) -> jax.Array:
    """Epsilon at `update_step`: linear from `eps_start` to `eps_end` over the first
    `eps_fraction * num_updates` updates, then constant (Mnih et al. 2015's schedule, by
    updates as purejaxql). `eps_fraction = 0` means `eps_end` from the start."""
    decay_updates = eps_fraction * num_updates
    progress = jnp.where(
        decay_updates > 0, jnp.minimum(update_step / jnp.maximum(decay_updates, 1e-9), 1.0), 1.0
    )
    return eps_start + (eps_end - eps_start) * progress


def resolve_torso(network: str, obs_shape: tuple[int, ...]) -> str:
    """The torso for `network` ("auto", "mlp" or "conv") and observations of `obs_shape`:
    "auto" is "conv" for images `(H, W, C)`, else "mlp"; "conv" needs an image."""
    is_image = len(obs_shape) == 3
    if network == "auto":
        return "conv" if is_image else "mlp"
    cfg.check(
        network != "conv" or is_image,
        "network",
        network,
        f'"mlp" or "auto" for observations of shape {obs_shape} ("conv" needs (H, W, C) images)',
    )
    return network
