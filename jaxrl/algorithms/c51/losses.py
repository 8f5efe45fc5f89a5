"""C51's target and loss, as small pure functions (Bellemare et al. 2017).

C51 models the return of `(s, a)` as a categorical distribution over `num_atoms`
evenly spaced atoms `z_i` of `[v_min, v_max]` (the *support*). Its target is the
distribution of `reward + discount * Z(s', a*)` (the n-step inputs of
`jaxrl.replay.nstep.NStepBatch`, as DQN's), projected back onto the support
(`categorical_projection`); the loss is the cross-entropy of the predicted
distribution to it (`categorical_loss`). `a*` is chosen as DQN chooses it, on the
distributions' means (`expected_q`), with `jaxrl.algorithms.qlearning.next_action`.
Each function is checked against hand computations in tests/algorithms/test_c51.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def support(num_atoms: int, v_min: float, v_max: float) -> jax.Array:
    """The atoms `z_i = v_min + i * (v_max - v_min) / (num_atoms - 1)`: float32 `(N,)`."""
    return jnp.linspace(v_min, v_max, num_atoms, dtype=jnp.float32)


def expected_q(logits: jax.Array, atoms: jax.Array) -> jax.Array:
    """`Q(s, a) = sum_i z_i p_i(s, a)` of logits `(..., N)` over the atoms `(N,)`: `(...)`."""
    return jnp.sum(jax.nn.softmax(logits, axis=-1) * atoms, axis=-1)


def categorical_projection(
    next_probs: jax.Array, reward: jax.Array, discount: jax.Array, atoms: jax.Array
) -> jax.Array:
    """The target distribution (Bellemare et al. 2017, Algorithm 1): `(B, N)`.

    Each atom `z_j` of the next state's distribution `next_probs (B, N)` moves to
    `Tz_j = reward + discount * z_j`, clipped to `[v_min, v_max]`, and its probability
    is split between the two atoms of the support `atoms (N,)` (evenly spaced, step dz)
    around it, in proportion to closeness:

        m_i = sum_j clip(1 - |clip(Tz_j, v_min, v_max) - z_i| / dz, 0, 1) * p_j

    which is Algorithm 1's `(u - b)` and `(b - l)` split written so that a `Tz_j`
    landing exactly on an atom (`l = u`, where Algorithm 1 as printed drops the mass)
    gives that atom all of it. After a termination (`discount = 0`) every atom moves
    to `reward`: the target is the reward itself, projected. No gradient flows
    through the target.
    """
    v_min, v_max = atoms[0], atoms[-1]
    delta = (v_max - v_min) / (atoms.shape[0] - 1)
    moved = jnp.clip(reward[:, None] + discount[:, None] * atoms[None, :], v_min, v_max)
    # share[b, i, j]: the part of source atom j's mass that lands on atom i.
    share = jnp.clip(1.0 - jnp.abs(moved[:, None, :] - atoms[None, :, None]) / delta, 0.0, 1.0)
    return jax.lax.stop_gradient(jnp.einsum("bij,bj->bi", share, next_probs))


def categorical_loss(
    logits_taken: jax.Array, target_probs: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`(mean_b w_b * CE_b, CE (B,))` with `CE_b = -sum_i m_bi log p_i(s_b, a_b)`.

    The cross-entropy of the taken action's predicted distribution (`logits_taken
    (B, N)`) to the projected target `target_probs` (Bellemare et al. 2017, Algorithm
    1's loss), weighted by prioritised replay's importance weights (all ones for
    uniform replay). The per-sample cross-entropy is also the new priority; Rainbow
    (Hessel et al. 2018, sec. 3) uses the KL divergence, which differs from it by the
    target's entropy (a constant for the gradient, not for the priority).
    """
    log_probs = jax.nn.log_softmax(logits_taken, axis=-1)
    cross_entropy = -jnp.sum(jax.lax.stop_gradient(target_probs) * log_probs, axis=-1)
    return jnp.mean(weights * cross_entropy), cross_entropy
