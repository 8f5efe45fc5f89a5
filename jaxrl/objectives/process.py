"""Process rewards: rewards per step of a completion rather than one for its outcome.

A step reward sits on the token that ends the step (its separator, or the completion's
last token for the last step), 0 elsewhere: `process_rewards` (batch, length) with
`step_ends` (batch, length) marking where steps end. Where they come from (a trained
PRM, a task's verifier, PRIME's implicit PRM) is the algorithms' business
(`jaxrl/algorithms/process_rewards.py`); here are the formulas that use them:

- `binary_cross_entropy_with_logits`: the loss of a PRM at step ends (and of PRIME's
  implicit PRM on whole sequences).
- `process_advantages`: GRPO's process-supervision advantages (DeepSeekMath sec. 4.1.3).
- `with_process_rewards`: outcome plus weighted step rewards as per-token rewards
  (PPO-LM's GAE input).
- `implicit_process_rewards`, `implicit_prm_loss`: PRIME's implicit PRM (Cui et al. 2025).

Conventions as in the rest of `jaxrl.objectives`: token arrays (batch, length), a
completion mask, rows laid out prompt-major in groups of `group_size`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, Scalar, float_mask
from .advantages import reward_to_go


def binary_cross_entropy_with_logits(logits: Array, labels: Array) -> Array:
    """-[y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))] = softplus(z) - y z, elementwise.

    A two-class softmax over logits (z1, z0), the head of TRL's `PRMTrainer` (a token
    classifier), is this with z = z1 - z0; one logit per step is the same model with
    half the head. Computed from the logit (never log of a rounded probability), so
    it is finite for any z."""
    z = jnp.asarray(logits, jnp.float32)
    return jax.nn.softplus(z) - jnp.asarray(labels, jnp.float32) * z


def process_advantages(
    process_rewards: Array,
    step_ends: Array,
    mask: Array,
    group_size: int,
    eps: float = 1e-6,
    scale_by_std: bool = True,
) -> Array:
    """GRPO with process supervision (Shao et al. 2024, DeepSeekMath, sec. 4.1.3):

        r~_{i,j} = (r_{i,j} - mean R) / (std R + eps),   R = every step reward of the group
        A_{i,t}  = sum over the steps j of completion i that end at or after t of r~_{i,j}

    The normalisation is DeepSeekMath's: one mean and std over all step rewards of all G
    completions of a prompt, so a step is scored against the steps of its siblings, and
    a group whose step rewards are all equal gets 0 (as GRPO's outcome advantage). A
    token's advantage is the sum of the normalised rewards of its own step and of the
    later ones: a step is credited with what follows it, not with what came before.
    The std is the unbiased one (ddof=1) with GRPO's eps (`grpo_advantages`); a group
    with a single step reward gets 0.

    `scale_by_std=False` keeps the deviations from the group mean unscaled, r~ = r - mean
    R, Dr. GRPO's correction of the outcome advantage (Liu et al. 2025) applied to steps:
    a PRM's probabilities differ a little between equally good steps (0.97 against 0.99),
    and dividing by the small std of such a group blows those differences up to unit-size
    advantages of random sign.

    Args:
      process_rewards: (batch, length) step rewards at step-end tokens (ignored elsewhere).
      step_ends: (batch, length) 1 where a step ends.
      mask: (batch, length) completion mask.
      group_size: completions per prompt (static, >= 2).
    Returns:
      (batch, length) float32, 0 off-mask.
    """
    check(
        isinstance(group_size, int) and not isinstance(group_size, bool) and group_size >= 2,
        "group_size",
        group_size,
        "an int >= 2 for process advantages (the normalisation is over a prompt's group)",
    )
    m = float_mask(mask)
    ends = float_mask(step_ends) * m
    batch, length = m.shape
    check(
        batch % group_size == 0,
        "group_size",
        group_size,
        f"a divisor of the batch size {batch} (rows are num_prompts x group_size)",
    )
    grouped = lambda x: x.reshape(batch // group_size, group_size * length)  # noqa: E731
    rewards, on = grouped(jnp.asarray(process_rewards, jnp.float32)), grouped(ends)
    # Shift by a step reward of the group first, so equal rewards give exactly 0 (as
    # `grpo_advantages` does): float32 means of equal values are not always exact.
    shift = jnp.max(jnp.where(on > 0, rewards, -jnp.inf), axis=1, keepdims=True)
    shifted = (rewards - jnp.where(jnp.isfinite(shift), shift, 0.0)) * on
    count = jnp.sum(on, axis=1, keepdims=True)
    deviation = (shifted - jnp.sum(shifted, axis=1, keepdims=True) / jnp.maximum(count, 1.0)) * on
    std = jnp.sqrt(jnp.sum(deviation**2, axis=1, keepdims=True) / jnp.maximum(count - 1.0, 1.0))
    scaled = deviation / (std + eps) if scale_by_std else deviation
    normalised = jnp.where(count > 1, scaled, 0.0).reshape(batch, length)
    return reward_to_go(normalised, m, 1.0) * m


def with_process_rewards(token_rewards: Array, process_rewards: Array, weight: Scalar) -> Array:
    """r_t = r^outcome_t + w r^process_t: the per-token rewards of PPO-LM's GAE with step
    rewards at the step-end tokens (or, for PRIME, at every token), weighted by `weight`
    (`process_reward_weight`)."""
    return jnp.asarray(token_rewards, jnp.float32) + weight * jnp.asarray(
        process_rewards, jnp.float32
    )


def implicit_process_rewards(prm_logp: Array, ref_logp: Array, mask: Array, beta: Scalar) -> Array:
    """PRIME's implicit process reward of every token (Cui et al. 2025, "Process
    Reinforcement through Implicit Rewards"; Yuan et al. 2024, "Free process
    rewards without process labels"):

        r_t = beta (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t))

    where pi_phi is a language model trained as an outcome reward model
    (`implicit_prm_loss`) and pi_ref the frozen start. Each token is a step.

    Returns (batch, length) float32, 0 off-mask."""
    m = float_mask(mask)
    return beta * (jnp.asarray(prm_logp, jnp.float32) - jnp.asarray(ref_logp, jnp.float32)) * m


def implicit_prm_loss(
    prm_logp: Array, ref_logp: Array, mask: Array, labels: Array, beta: Scalar
) -> Array:
    """PRIME's loss of the implicit PRM pi_phi on outcome labels (Cui et al. 2025):

        r_phi(y) = beta sum_t (log pi_phi(y_t) - log pi_ref(y_t))   (the sequence reward)
        L(y)     = -[l log sigmoid(r_phi(y)) + (1 - l) log(1 - sigmoid(r_phi(y)))]

    with l = 1 for a correct completion, 0 otherwise: a binary outcome reward model
    whose reward is a log-likelihood ratio, so its per-token terms are process rewards
    (`implicit_process_rewards`) without step labels.

    Args:
      prm_logp, ref_logp: (batch, length) completion log-probs under pi_phi and pi_ref.
      mask: (batch, length) completion mask.
      labels: (batch,) outcome labels in [0, 1].
      beta: the reward scale.
    Returns:
      (batch,) float32 per-sequence losses.
    """
    sequence_reward = jnp.sum(implicit_process_rewards(prm_logp, ref_logp, mask, beta), axis=1)
    return binary_cross_entropy_with_logits(sequence_reward, labels)
