"""Behaviour-cloning losses: a policy regressed on a dataset's actions, shared by every
learner with such a term (the `bc` learner, and TD3+BC's actor).

Behaviour cloning is supervised learning of the behaviour policy from its state-action
pairs (Pomerleau 1991, "Efficient Training of Artificial Neural Networks for Autonomous
Navigation"); offline RL papers report it as the baseline an offline learner must beat
(Fu et al. 2020, D4RL, sec. 6). Two losses, by the kind of action:

* `mse_bc_loss`, continuous actions: the squared error of a deterministic policy's
  action, `mean_(b,j) (pi(s_b)_j - a_bj)^2`, averaged over the batch and the action's
  dimensions. TD3+BC's behaviour-cloning term is this loss (Fujimoto & Gu 2021, eq. 3;
  `jaxrl/algorithms/td3_bc/losses.py`). ReBRAC's penalty (`rebrac/losses.bc_penalty`)
  differs: it sums over the dimensions, per sample, and enters its target too.
* `cross_entropy_bc_loss`, a finite action set: the negative log-likelihood of the
  dataset's action under the categorical policy `softmax(logits)`, the maximum
  likelihood estimate of the behaviour policy.

What is not here: the learner (`jaxrl/algorithms/bc/`) and the networks
(`actor_critic.DeterministicActor`, `qlearning.QNetwork` read as logits).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["action_accuracy", "cross_entropy_bc_loss", "mse_bc_loss"]


def mse_bc_loss(policy_action: jax.Array, data_action: jax.Array) -> jax.Array:
    """`mean_(b,j) (pi(s)_j - a_j)^2` over `policy_action, data_action (B, d)` (Fujimoto
    & Gu 2021, eq. 3's behaviour-cloning term; averaged over the action's dimensions too,
    as in their code): the deterministic policy's squared distance to the dataset's
    action."""
    return jnp.mean((policy_action - data_action) ** 2)


def cross_entropy_bc_loss(logits: jax.Array, data_action: jax.Array) -> jax.Array:
    """`-mean_b log softmax(logits_b)[a_b]` over `logits (B, A)` and integer
    `data_action (B,)`: the negative log-likelihood of the dataset's actions under the
    categorical policy (maximum likelihood behaviour cloning). Computed as
    `logsumexp(logits) - logits[a]`, stable for large logits."""
    taken = jnp.take_along_axis(logits, data_action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - taken)


def action_accuracy(logits: jax.Array, data_action: jax.Array) -> jax.Array:
    """The fraction of `data_action (B,)` that is the argmax of `logits (B, A)`: how often
    the greedy cloned policy picks the dataset's action (a diagnostic, no gradient)."""
    return jnp.mean(jnp.argmax(logits, axis=-1) == data_action.astype(jnp.int32))
