"""Estimators and losses of token-rollout RL for language models (GRPO and its family).

Pure, jittable functions, each selected by name from configuration:

- **advantages** (`advantage`): `grpo`, `dr_grpo`, `rloo`, `reinforce_pp`, `gae`;
  `compute_advantages` dispatches, `validate_advantage` checks a config. Helpers:
  `outcome_token_rewards`, `masked_gae`, `masked_whiten`, `constant_reward_groups`,
  `zero_advantage_group_fraction`.
- **policy losses** (`policy_loss`): `clip` (PPO/GRPO/DAPO clipped surrogate with
  `eps_low`/`eps_high` and optional dual clip), `gspo`, `cispo`; `policy_loss` dispatches,
  `validate_clip` checks a config.
- **aggregation** (`loss_agg`): `seq_mean_token_mean`, `token_mean`,
  `seq_mean_token_sum_norm`, with the whole batch's normaliser passed in
  (`loss_normaliser`) so gradient accumulation gives the full-batch gradient.
- **KL to a reference** (`kl`): `k1`, `k2`, `k3`, `k3+`, in the reward
  (`kl_penalised_rewards`) or in the loss (`kl_estimate`).
- **entropy**: `entropy_bonus` and `high_entropy_mask` (the top-`rho` tokens).
- **DAPO overlong shaping**: `overlong_penalty`.

Conventions. Token arrays are `(batch, length)` float32, e.g. the `(B, T-1)` log-probs
and entropies of `jaxrl.lm.sampling.token_logprobs`, with a `mask` (float 0/1 or bool)
that is 1 on the completion tokens the loss counts (never prompt, padding, or
environment tokens of a multi-turn episode). Per-sequence `rewards` are `(batch,)`, and
a batch of `num_prompts x group_size` completions is laid out prompt-major: rows
`[g * group_size, (g + 1) * group_size)` are the completions of prompt `g`. Names and
sizes (`group_size`, `loss_agg`, `max_len`, ...) are static Python values; coefficients
may be traced (swept) float32 scalars.

What does not live here: sampling, log-prob computation (`jaxrl.lm.sampling`), reward
functions (`jaxrl.tasks`), dynamic sampling and the training loop (`train.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl.algorithms.sft.losses import masked_token_mean as _masked_mean
from jaxrl.config import ConfigError, check

Array = jax.Array
Scalar = jax.Array | float


def _float_mask(mask: Array) -> Array:
    return jnp.asarray(mask).astype(jnp.float32)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _choose(field: str, name: str, allowed: tuple[str, ...] | dict) -> None:
    check(name in allowed, field, name, f"one of {list(allowed)}")


# ============================================================================ advantages
ADVANTAGES = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "gae")
"""Names accepted by `compute_advantages` (the `advantage` config field)."""

GROUP_ADVANTAGES = ("grpo", "dr_grpo", "rloo")
"""Estimators whose baseline comes from the other completions of the same prompt."""


def validate_advantage(advantage: str, group_size: int) -> None:
    """Raises `ConfigError` for an unknown estimator, or a group estimator (`grpo`,
    `dr_grpo`, `rloo`) with `group_size` < 2: one completion per prompt has no group
    baseline (its advantage would be 0, or 0/0 for GRPO's unbiased std)."""
    _choose("advantage", advantage, ADVANTAGES)
    check(
        isinstance(group_size, int) and not isinstance(group_size, bool) and group_size >= 1,
        "group_size",
        group_size,
        "an int >= 1",
    )
    if advantage in GROUP_ADVANTAGES:
        check(
            group_size >= 2,
            "group_size",
            group_size,
            f">= 2 with advantage={advantage!r} (a group baseline needs two completions "
            "per prompt)",
        )


def _groups(rewards: Array, group_size: int) -> Array:
    """`(batch,)` rewards as `(num_prompts, group_size)`; checks the layout at trace time."""
    check(
        isinstance(group_size, int) and not isinstance(group_size, bool) and group_size >= 2,
        "group_size",
        group_size,
        "an int >= 2 for a group-normalised advantage (a group baseline needs two "
        "completions per prompt)",
    )
    batch = rewards.shape[0]
    check(
        rewards.ndim == 1 and batch % group_size == 0,
        "group_size",
        group_size,
        f"a divisor of the batch size {batch} (rows are num_prompts x group_size)",
    )
    return jnp.asarray(rewards, jnp.float32).reshape(batch // group_size, group_size)


def _deviation_from_group_mean(grouped: Array) -> Array:
    """r_i - mean(r), computed after shifting by the group's first reward.

    The shift changes nothing mathematically but makes a group of equal rewards give
    exactly 0: in float32, mean([0.1, 0.1, 0.1]) - 0.1 = 7e-9, which GRPO's division
    by (std + 1e-6) would blow up to an advantage of 0.007 of random sign.
    """
    shifted = grouped - grouped[:, :1]
    return shifted - shifted.mean(axis=1, keepdims=True)


def grpo_advantages(rewards: Array, group_size: int, eps: float = 1e-6) -> Array:
    """GRPO's group-normalised advantage (Shao et al. 2024, DeepSeekMath, sec. 4.1.2).

        A_i = (r_i - mean_j r_j) / (std_j r_j + eps),  j over the completions of the prompt

    The std is the unbiased one (ddof=1), as in TRL's `GRPOTrainer` (torch's default
    `.std()`), verl (`torch.std`) and Tunix (`ddof=1`); DeepSeekMath does not say. The
    epsilon is 1e-6 as in verl and Tunix; TRL adds 1e-4. An all-equal group gets A = 0.

    Args:
      rewards: (batch,) per-sequence rewards, prompt-major groups of `group_size`.
      group_size: completions per prompt (static, >= 2).
      eps: added to the std.
    Returns:
      (batch,) float32 advantages.
    """
    grouped = _groups(rewards, group_size)
    deviation = _deviation_from_group_mean(grouped)
    std = jnp.sqrt(jnp.sum(deviation**2, axis=1, keepdims=True) / (group_size - 1))
    return (deviation / (std + eps)).reshape(-1)


def dr_grpo_advantages(rewards: Array, group_size: int) -> Array:
    """Dr. GRPO's advantage: the group mean baseline, no std division.

        A_i = r_i - mean_j r_j

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective":
    dividing by the group std up-weights prompts that are nearly always or nearly
    never solved (a question-level difficulty bias).
    """
    return _deviation_from_group_mean(_groups(rewards, group_size)).reshape(-1)


def rloo_advantages(rewards: Array, group_size: int) -> Array:
    """REINFORCE leave-one-out (Ahmadian et al. 2024, "Back to Basics"; Kool et al. 2019):
    each completion's baseline is the mean of the *other* G - 1 rewards.

        A_i = r_i - 1/(G-1) sum_{j != i} r_j = G/(G-1) (r_i - mean_j r_j)

    The baseline is independent of r_i, so the gradient estimate is unbiased. With G = 2
    it is r_i - r_other.
    """
    deviation = _deviation_from_group_mean(_groups(rewards, group_size))
    return (deviation * (group_size / (group_size - 1))).reshape(-1)


def masked_whiten(x: Array, mask: Array, eps: float = 1e-8) -> Array:
    """(x - mean) / sqrt(var + eps) over the masked entries (population variance), 0 off-mask.

    The statistics are shifted by a masked entry first (any one; the largest), so a batch
    of equal values whitens to exactly 0 instead of float32 noise times 1e4.
    """
    m = _float_mask(mask)
    shift = jnp.max(jnp.where(m > 0, x, -jnp.inf))
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)  # empty mask
    shifted = (x - shift) * m
    count = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(shifted) / count
    var = jnp.sum(((shifted - mean) * m) ** 2) / count
    return (shifted - mean) * jax.lax.rsqrt(var + eps) * m


def reinforce_pp_advantages(
    token_rewards: Array, mask: Array, gamma: Scalar = 1.0, eps: float = 1e-8
) -> Array:
    """REINFORCE++ (Hu 2025, "REINFORCE++: a simple and efficient approach for aligning
    large language models"): the discounted reward-to-go of each token, whitened over
    all completion tokens of the batch (no critic, no group baseline).

        G_t = sum_{t' >= t} gamma^(t' - t) r_t'         (over mask tokens only)
        A_t = (G_t - mean_batch G) / sqrt(var_batch G + eps)

    Token-level statistics and the population variance follow OpenRLHF (the author's
    implementation); verl's `masked_whiten` uses the unbiased variance, a difference of
    a factor n/(n-1) that vanishes for real batch sizes. Works for any group size, so
    it takes none.

    Args:
      token_rewards: (batch, length) rewards per token (the outcome reward on the last
        completion token, see `outcome_token_rewards`, plus any per-token terms such as
        `kl_penalised_rewards`).
      mask: (batch, length) completion-token mask.
    Returns:
      (batch, length) float32 advantages, 0 off-mask.
    """
    returns, _ = masked_gae(token_rewards, jnp.zeros_like(token_rewards), mask, gamma, 1.0)
    return masked_whiten(returns, mask, eps)


def masked_gae(
    token_rewards: Array, values: Array, mask: Array, gamma: Scalar, gae_lambda: Scalar
) -> tuple[Array, Array]:
    """Generalised advantage estimation over the completion tokens of padded rows
    (Schulman et al. 2016, eq. 16), skipping masked positions.

        delta_t = r_t + gamma V(next) - V(t),  A_t = delta_t + gamma lambda A(next)

    where `next` is the next *mask* token of the row and V = A = 0 after the last one
    (the episode ends with the completion). `jaxrl.returns.gae` is time-major with a
    `done` flag per step; it can end a row at its last token, but not step over masked
    holes in the middle (environment tokens of a multi-turn episode), whose value must
    neither be bootstrapped from nor break the recursion. Here a masked step carries
    the next value and advantage through unchanged (as verl's and Tunix's masked GAE).

    Args:
      token_rewards: (batch, length) per-token rewards.
      values: (batch, length) V(s_t) of the learned value head at each token.
      mask: (batch, length) completion-token mask.
    Returns:
      `(advantages, returns)`, (batch, length) float32, 0 off-mask; `returns =
      advantages + values` on the mask (the value target).
    """
    m = _float_mask(mask)
    rewards = jnp.asarray(token_rewards, jnp.float32) * m
    values = jnp.asarray(values, jnp.float32) * m

    def backward(carry, inputs):
        next_value, next_adv = carry
        r_t, v_t, m_t = inputs
        adv_t = r_t + gamma * next_value - v_t + gamma * gae_lambda * next_adv
        # A masked step is skipped: it passes on the following token's value and advantage.
        next_value = m_t * v_t + (1.0 - m_t) * next_value
        next_adv = m_t * adv_t + (1.0 - m_t) * next_adv
        return (next_value, next_adv), adv_t * m_t

    zeros = jnp.zeros(rewards.shape[0], jnp.float32)
    _, advantages = jax.lax.scan(backward, (zeros, zeros), (rewards.T, values.T, m.T), reverse=True)
    advantages = advantages.T
    return advantages, (advantages + values) * m


def outcome_token_rewards(rewards: Array, mask: Array) -> Array:
    """Places each sequence's reward on its last completion token, 0 elsewhere: the
    token-level form of an outcome reward (as verl's `token_level_scores`).

    A row with an empty mask gets no reward anywhere.
    """
    m = _float_mask(mask)
    length = m.shape[1]
    positions = jnp.arange(length)
    last = jnp.max(jnp.where(m > 0, positions, -1), axis=1)
    at_last = (positions[None, :] == last[:, None]).astype(jnp.float32)
    return at_last * jnp.asarray(rewards, jnp.float32)[:, None]


def compute_advantages(
    name: str,
    token_rewards: Array,
    mask: Array,
    *,
    group_size: int,
    values: Array | None = None,
    gamma: Scalar = 1.0,
    gae_lambda: Scalar = 1.0,
    eps: float | None = None,
) -> tuple[Array, Array]:
    """The advantage estimator `name` (config field `advantage`), on token-level rewards.

    - `grpo`, `dr_grpo`, `rloo`: the sequence score s_i = sum_t r_{i,t} (the outcome
      reward, minus the summed KL penalty if the KL is in the reward) goes through the
      group estimator; every completion token of sequence i gets A_i.
    - `reinforce_pp`: `reinforce_pp_advantages` (token reward-to-go, batch-whitened).
    - `gae`: `masked_gae` with the learned `values`, then whitened over the batch's
      completion tokens (as verl and Tunix do for PPO with a critic).

    Args:
      token_rewards: (batch, length) (see `outcome_token_rewards`).
      mask: (batch, length) completion-token mask.
      group_size: completions per prompt; must be >= 2 for the group estimators.
      values: (batch, length) value predictions, required by `gae` only.
      gamma, gae_lambda: discount and GAE lambda (`reinforce_pp` uses gamma; `gae` both).
      eps: overrides the estimator's epsilon (1e-6 for `grpo`, 1e-8 for the whitening).
    Returns:
      `(advantages, returns)`, (batch, length) float32, 0 off-mask. `returns` is the
      value target for `gae` and the discounted reward-to-go otherwise.
    """
    validate_advantage(name, group_size)
    m = _float_mask(mask)
    if name == "gae":
        if values is None:
            raise ConfigError("advantage='gae' needs the value head's values (values=None given)")
        advantages, returns = masked_gae(token_rewards, values, m, gamma, gae_lambda)
        return masked_whiten(advantages, m, 1e-8 if eps is None else eps), returns
    returns, _ = masked_gae(token_rewards, jnp.zeros_like(m), m, gamma, 1.0)
    if name == "reinforce_pp":
        return reinforce_pp_advantages(
            token_rewards, m, gamma, 1e-8 if eps is None else eps
        ), returns
    scores = jnp.sum(jnp.asarray(token_rewards, jnp.float32) * m, axis=1)
    if name == "grpo":
        per_sequence = grpo_advantages(scores, group_size, 1e-6 if eps is None else eps)
    elif name == "dr_grpo":
        per_sequence = dr_grpo_advantages(scores, group_size)
    else:
        per_sequence = rloo_advantages(scores, group_size)
    return per_sequence[:, None] * m, returns


def constant_reward_groups(rewards: Array, group_size: int) -> Array:
    """(num_prompts,) bool: True for the groups whose rewards are all equal.

    Their group-relative advantage is 0, so they carry no learning signal; DAPO's dynamic
    sampling (Yu et al. 2025, sec. 3.2) drops them and samples more prompts.
    """
    grouped = _groups(rewards, group_size)
    return jnp.all(grouped == grouped[:, :1], axis=1)


def zero_advantage_group_fraction(rewards: Array, group_size: int) -> Array:
    """The fraction of groups whose rewards are all equal (a per-step metric)."""
    return jnp.mean(constant_reward_groups(rewards, group_size).astype(jnp.float32))


# ========================================================================= policy losses
POLICY_LOSSES = ("clip", "gspo", "cispo")
"""Names accepted by `policy_loss` (the `policy_loss` config field)."""


def validate_clip(
    policy_loss: str, eps_low: float, eps_high: float, dual_clip_c: float | None = None
) -> None:
    """Raises `ConfigError` for clip ranges the named policy loss cannot use.

    `clip` and `gspo` need 0 < eps_low < 1 (a positive lower ratio bound) and
    eps_high >= eps_low: DAPO's clip-higher (Yu et al. 2025, sec. 3.1) raises only the
    upper bound, and a trust region tighter above than below is a misconfiguration.
    `cispo` bounds an importance *weight*, not a trust region: MiniMax-M1 disables the
    lower bound (eps_low = 1 gives a bound of 0) and tunes only eps_high, so it takes
    0 < eps_low <= 1, eps_high > 0 in either order. `dual_clip_c` (clip and gspo only)
    must be > 1. Called by `policy_loss` when the values are Python numbers, and by
    the trainer's config `validate()`.
    """
    _choose("policy_loss", policy_loss, POLICY_LOSSES)
    if _is_number(eps_low) and policy_loss == "cispo":
        check(0.0 < eps_low <= 1.0, "eps_low", eps_low, "in (0, 1] for policy_loss='cispo'")
    elif _is_number(eps_low):
        check(0.0 < eps_low < 1.0, "eps_low", eps_low, f"in (0, 1) for policy_loss={policy_loss!r}")
    if _is_number(eps_high):
        check(math.isfinite(eps_high) and eps_high > 0.0, "eps_high", eps_high, "> 0")
    if policy_loss != "cispo" and _is_number(eps_low) and _is_number(eps_high):
        check(eps_high >= eps_low, "eps_high", eps_high, f">= eps_low={eps_low}")
    if dual_clip_c is not None:
        check(
            policy_loss != "cispo",
            "dual_clip_c",
            dual_clip_c,
            "None with policy_loss='cispo' (it has no surrogate to bound)",
        )
        if _is_number(dual_clip_c):
            check(dual_clip_c > 1.0, "dual_clip_c", dual_clip_c, "> 1 (or None to disable)")


def _token_advantages(advantages: Array) -> Array:
    """(batch,) sequence advantages broadcast over tokens; (batch, length) passed through."""
    advantages = jnp.asarray(advantages, jnp.float32)
    return advantages[:, None] if advantages.ndim == 1 else advantages


def _approx_kl(log_ratio: Array, mask: Array) -> Array:
    """KL(pi_old || pi) from the sampler's tokens by the k3 estimator (r - 1) - log r, as
    `jaxrl.algorithms.ppo.losses.ratio_diagnostics`: non-negative and unbiased."""
    return _masked_mean(jnp.expm1(log_ratio) - log_ratio, mask)


def _clipped_objective(
    ratio: Array, advantages: Array, eps_low: Scalar, eps_high: Scalar, dual_clip_c: Scalar | None
) -> tuple[Array, Array, Array, Array | None]:
    """Per-token -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), optionally dual-clipped.

    Returns the loss and where clipping zeroed the gradient: below (r < 1 - eps_low with
    A < 0), above (r > 1 + eps_high with A > 0) and, with a dual clip, where the bound
    -c A replaced the loss (A < 0 and r > c).
    """
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -jnp.minimum(unclipped, clipped)
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    dual = None
    if dual_clip_c is not None:
        # Dual clip (Ye et al. 2020, "Mastering complex control in MOBA games with deep RL"):
        # for A < 0 the clipped loss -r A grows without bound in r; cap it at -c A.
        dual = (advantages < 0) & (ratio > dual_clip_c)
        loss = jnp.where(advantages < 0, jnp.minimum(loss, -dual_clip_c * advantages), loss)
    return loss, low, high, dual


def _diagnostics(
    mask: Array, log_ratio: Array, ratio: Array, low: Array, high: Array, dual: Array | None
) -> dict[str, Array]:
    out = {
        "clip_fraction_low": _masked_mean(low.astype(jnp.float32), mask),
        "clip_fraction_high": _masked_mean(high.astype(jnp.float32), mask),
        "ratio_mean": _masked_mean(ratio, mask),
        "approx_kl": _approx_kl(log_ratio, mask),
    }
    if dual is not None:
        out["dual_clip_fraction"] = _masked_mean(dual.astype(jnp.float32), mask)
    return out


def clipped_surrogate(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The token-level clipped surrogate of PPO (Schulman et al. 2017, eq. 7) as used by
    GRPO (Shao et al. 2024, sec. 4.1) with DAPO's decoupled clip range (Yu et al. 2025,
    sec. 3.1, clip-higher):

        r_t = pi(y_t | ...) / pi_old(y_t | ...)
        l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)

    and, with `dual_clip_c` = c > 1, l_t = min(l_t, -c A_t) where A_t < 0 (Ye et al. 2020).
    `old_logp` are the sampler's log-probs (no gradient flows into them).

    Returns:
      `(per_token_loss, metrics)`: the (batch, length) loss, 0 off-mask, to aggregate
      with `aggregate_loss`; metrics (token means over the mask) `clip_fraction_low`,
      `clip_fraction_high`, `ratio_mean`, `approx_kl` (KL(pi_old || pi), k3) and, with
      a dual clip, `dual_clip_fraction`.
    """
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    ratio = jnp.exp(log_ratio)
    adv = _token_advantages(advantages)
    loss, low, high, dual = _clipped_objective(ratio, adv, eps_low, eps_high, dual_clip_c)
    metrics = _diagnostics(mask, log_ratio, ratio, low, high, dual)
    return loss * _float_mask(mask), metrics


def gspo(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Group Sequence Policy Optimization (Zheng et al. 2025), in its GSPO-token form.

    The importance ratio is the sequence's length-normalised (geometric-mean) ratio

        s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|) = exp(1/|y_i| sum_t (log pi - log pi_old))

    clipped as a whole, so one sequence is kept or dropped together. In the token form
    s_{i,t} = sg[s_i] pi(y_t) / sg[pi(y_t)] has the value s_i and the gradient of
    s_i grad log pi(y_t), which admits per-token advantages; with one advantage per
    sequence and `seq_mean_token_mean` aggregation it is exactly GSPO's objective.
    The paper's clip ranges are small (eps_low 3e-4, eps_high 4e-4) because s_i is an
    average. Returns and metrics as `clipped_surrogate`, with `ratio_mean` the mean of s_i
    over the mask tokens; `approx_kl` is the token-level KL(pi_old || pi).
    """
    m = _float_mask(mask)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    seq_log_ratio = jnp.sum(log_ratio * m, axis=1, keepdims=True) / jnp.maximum(
        jnp.sum(m, axis=1, keepdims=True), 1.0
    )
    # Value s_i, gradient per token (verl PR #2775: add the detached term last).
    token_log_ratio = logp - jax.lax.stop_gradient(logp) + jax.lax.stop_gradient(seq_log_ratio)
    ratio = jnp.exp(token_log_ratio)
    adv = _token_advantages(advantages)
    loss, low, high, dual = _clipped_objective(ratio, adv, eps_low, eps_high, dual_clip_c)
    metrics = _diagnostics(m, log_ratio, ratio, low, high, dual)
    return loss * m, metrics


def cispo(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """CISPO (MiniMax 2025, "MiniMax-M1", eqs. 4-5): REINFORCE with a clipped,
    stop-gradient importance weight.

        w_t = clip(r_t, 1 - eps_low, 1 + eps_high),  l_t = -sg[w_t] A_t log pi(y_t)

    Unlike the clipped surrogate, a token whose ratio left the range keeps its gradient
    (scaled by the bound) instead of losing it, which matters for rare tokens that
    open a reasoning step. `clip_fraction_low`/`_high` count the tokens whose weight
    was truncated below/above, whatever the advantage's sign. `dual_clip_c` must be None.
    """
    if dual_clip_c is not None:
        validate_clip("cispo", eps_low, eps_high, dual_clip_c)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    ratio = jnp.exp(log_ratio)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high))
    adv = _token_advantages(advantages)
    loss = -weight * adv * logp
    low = ratio < 1.0 - eps_low
    high = ratio > 1.0 + eps_high
    metrics = _diagnostics(mask, log_ratio, ratio, low, high, None)
    return loss * _float_mask(mask), metrics


PolicyLoss = Callable[..., tuple[Array, dict[str, Array]]]
_POLICY_LOSS_FNS: dict[str, PolicyLoss] = {"clip": clipped_surrogate, "gspo": gspo, "cispo": cispo}


def policy_loss(
    name: str,
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The per-token policy loss `name` (config field `policy_loss`) and its diagnostics.

    `logp` are the trainer's log-probs (differentiated), `old_logp` the sampler's,
    `advantages` (batch,) or (batch, length). See `clipped_surrogate`, `gspo`, `cispo`.
    """
    validate_clip(name, eps_low, eps_high, dual_clip_c)
    return _POLICY_LOSS_FNS[name](
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip_c=dual_clip_c,
    )


# =========================================================================== aggregation
LOSS_AGGS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
"""Names accepted by `aggregate_loss` (the `loss_agg` config field)."""


def loss_normaliser(mask: Array, loss_agg: str) -> Array:
    """The denominator of `aggregate_loss` for a batch: compute it on the *whole* batch.

    `token_mean`: the number of mask tokens. The sequence means: the number of
    sequences with at least one mask token (a fully masked row, e.g. padding added to
    fill a batch, contributes nothing and is not counted).

    Gradient accumulation splits a batch into minibatches and sums their gradients; if
    each minibatch divided by its own count, short and long minibatches would be
    weighted wrongly (verl #5625 for token_mean). Passing the whole batch's normaliser
    to every minibatch makes the sum of the minibatch losses equal the full-batch loss.
    """
    _choose("loss_agg", loss_agg, LOSS_AGGS)
    m = _float_mask(mask)
    if loss_agg == "token_mean":
        return jnp.sum(m)
    return jnp.sum((jnp.sum(m, axis=1) > 0).astype(jnp.float32))


def aggregate_loss(
    per_token: Array,
    mask: Array,
    loss_agg: str,
    normaliser: Array | float,
    max_len: int | None = None,
) -> Array:
    """Reduces a per-token loss to this minibatch's share of the batch loss.

    With N = `normaliser` (from `loss_normaliser` on the whole batch), m the mask:

    - `seq_mean_token_mean` (GRPO, Shao et al. 2024, sec. 4.1): 1/N sum_i 1/|y_i| sum_t l_it.
      Every sequence weighs the same, so a token of a long answer weighs less.
    - `token_mean` (DAPO, Yu et al. 2025, sec. 3.3): 1/N sum_i sum_t l_it with N the token
      count. Every token weighs the same.
    - `seq_mean_token_sum_norm` (Dr. GRPO, Liu et al. 2025): 1/N sum_i sum_t
      l_it / L with L = `max_len` a constant (the generation budget), so no length
      enters the weights. verl divided by L only, not by N (verl #3741), which scales the
      loss with the batch size; we divide by both, as Dr. GRPO's `mean` over the group.

    The minibatch losses of a batch split by rows, each given the whole batch's N, sum
    to the full-batch loss (and so do their gradients).

    Args:
      per_token: (batch, length) loss per token.
      mask: (batch, length) completion-token mask.
      loss_agg: the mode name (static).
      normaliser: the whole batch's `loss_normaliser(mask, loss_agg)`; clamped below at 1,
        so an all-masked batch has loss 0.
      max_len: the fixed length L of `seq_mean_token_sum_norm` (static int > 0).
    Returns:
      a float32 scalar.
    """
    _choose("loss_agg", loss_agg, LOSS_AGGS)
    m = _float_mask(mask)
    token_sums = jnp.sum(per_token * m, axis=1)
    if loss_agg == "token_mean":
        total = jnp.sum(token_sums)
    elif loss_agg == "seq_mean_token_mean":
        total = jnp.sum(token_sums / jnp.maximum(jnp.sum(m, axis=1), 1.0))
    else:
        check(
            isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0,
            "max_len",
            max_len,
            "an int > 0 (the fixed length of loss_agg='seq_mean_token_sum_norm')",
        )
        total = jnp.sum(token_sums) / max_len
    return total / jnp.maximum(jnp.asarray(normaliser, jnp.float32), 1.0)


# =================================================================== KL to the reference
KL_ESTIMATORS = ("k1", "k2", "k3", "k3+")
"""Names accepted by `kl_estimate` (the `kl` config field)."""


def kl_estimate(logp: Array, ref_logp: Array, kind: str, old_logp: Array | None = None) -> Array:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020,
    "Approximating KL divergence"), with log r = log pi_ref - log pi:

        k1 = -log r = log pi - log pi_ref      unbiased value, high variance, can be < 0
        k2 = (log r)^2 / 2                      biased value, low variance, >= 0
        k3 = (r - 1) - log r                    unbiased value, low variance, >= 0
        k3+ = value of k3, gradient of k2       (straight-through, verl's "k3+")

    As a *loss* what matters is the expected gradient, and of these only k2 gives the
    gradient of KL(pi || pi_ref) (Tang & Munos 2025, "On a few pitfalls in KL divergence
    gradient estimation for RL"; Zhang et al. 2025, "On the design of KL-regularized
    policy gradient algorithms for LLM reasoning"):

        E_pi[grad k1] = E_pi[grad log pi] = 0                  (no signal, only noise)
        E_pi[grad k2] = E_pi[(log pi - log pi_ref) grad log pi] = grad KL(pi || pi_ref)
        E_pi[grad k3] = E_pi[(1 - r) grad log pi] = grad KL(pi_ref || pi)   (the other KL)

    so GRPO's k3-in-the-loss (DeepSeekMath, sec. 4.1) descends the forward KL. `k3+` keeps
    k3's unbiased, non-negative value for logging and k2's unbiased gradient.

    When the tokens come from the sampler pi_old rather than pi (later epochs of the
    same batch), pass `old_logp`: every estimator is multiplied by sg[pi / pi_old], which
    keeps both the value and the `k2`/`k3+` gradient unbiased for KL(pi || pi_ref).

    In the *reward* (`kl_penalised_rewards`), no gradient flows through the estimate;
    REINFORCE then differentiates E[k], and `k1` (the usual choice) and `k3` both give
    the true KL gradient in expectation.

    No clamping: verl clamps k3 to [-10, 10], which hides a policy that has drifted far
    from the reference; we let the NaN/inf check of the driver see it.

    Returns:
      (batch, length) float32 per-token estimates (not masked: aggregate them with the
      policy loss, or mask them).
    """
    _choose("kl", kind, KL_ESTIMATORS)
    log_ratio = jnp.asarray(logp, jnp.float32) - ref_logp  # log pi - log pi_ref = -log r
    if kind == "k1":
        estimate = log_ratio
    elif kind == "k2":
        estimate = 0.5 * log_ratio**2
    else:
        k3 = jnp.expm1(-log_ratio) + log_ratio
        if kind == "k3":
            estimate = k3
        else:
            k2 = 0.5 * log_ratio**2
            estimate = k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(k3)
    if old_logp is not None:
        estimate = estimate * jax.lax.stop_gradient(jnp.exp(logp - old_logp))
    return estimate


def kl_penalised_rewards(
    token_rewards: Array,
    logp: Array,
    ref_logp: Array,
    mask: Array,
    kind: str,
    coef: Scalar,
) -> Array:
    """KL in the reward (Ouyang et al. 2022, eq. 2; `kl_in_reward`): r_t - beta k_t.

    The estimate is computed from the sampler's log-probs `logp` and carries no gradient.
    Returns (batch, length) float32 token rewards, penalised on mask tokens only.
    """
    penalty = jax.lax.stop_gradient(kl_estimate(logp, ref_logp, kind))
    return jnp.asarray(token_rewards, jnp.float32) - coef * penalty * _float_mask(mask)


# =============================================================================== entropy
def entropy_bonus(entropy: Array, coef: Scalar) -> Array:
    """Per-token loss term -c H_t (Williams & Peng 1991; the PPO entropy bonus), to add to
    the policy loss before `aggregate_loss`. Differentiable through `entropy` (from
    `token_logprobs(..., return_entropy=True)`)."""
    return -coef * entropy


def high_entropy_mask(entropy: Array, mask: Array, rho: float) -> Array:
    """Keeps the top `rho` fraction of the batch's mask tokens by entropy (bool (batch, length)).

    Wang et al. 2025, "Beyond the 80/20 rule: high-entropy minority tokens drive effective
    RL for LLM reasoning": training on the 20% highest-entropy "forking" tokens (rho = 0.2)
    matches or beats training on all tokens. Multiply it into the loss mask.

    Exactly k = clip(round(rho n), 1, n) of the n mask tokens are kept (none if n = 0),
    so ties at the threshold are broken deterministically, by position in the flattened
    batch (earlier first); the paper's quantile threshold keeps all tied tokens. The
    ranking is over the arrays given: compute it on the whole batch before splitting it
    into minibatches. No gradient flows through the selection.

    Args:
      entropy: (batch, length) token entropies.
      mask: (batch, length) completion-token mask.
      rho: the kept fraction, in (0, 1] (static or a Python float).
    """
    if _is_number(rho):
        check(0.0 < rho <= 1.0, "rho", rho, "in (0, 1] (the kept fraction of tokens)")
    valid = _float_mask(mask) > 0
    flat_valid = valid.reshape(-1)
    key = jnp.where(flat_valid, jax.lax.stop_gradient(entropy).reshape(-1), -jnp.inf)
    order = jnp.argsort(-key, stable=True)  # descending entropy, earlier position on ties
    rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0]))
    count = jnp.sum(flat_valid.astype(jnp.float32))
    keep = jnp.clip(jnp.floor(rho * count + 0.5), 1.0, count)
    return ((rank < keep) & flat_valid).reshape(valid.shape)


# ================================================================ DAPO overlong shaping
def overlong_penalty(
    lengths: Array, max_len: int, cache_len: int, penalty_factor: float = 1.0
) -> Array:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), a reward added to the task's:

        R(y) = 0                                 |y| <= L_max - L_cache
             = ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
             = -1                                L_max < |y|

    times `penalty_factor` (verl's `overlong_buffer.penalty_factor`, 1 in the paper), so
    a response is penalised linearly over the last `cache_len` tokens of the budget.

    Args:
      lengths: (batch,) response lengths in tokens.
      max_len: L_max (int > 0), usually the generation budget.
      cache_len: L_cache (int in (0, max_len]), the soft-punishment interval.
    Returns:
      (batch,) float32 rewards in [-penalty_factor, 0].
    """
    check(
        isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0,
        "max_len",
        max_len,
        "an int > 0",
    )
    check(
        isinstance(cache_len, int) and not isinstance(cache_len, bool) and 0 < cache_len <= max_len,
        "cache_len",
        cache_len,
        f"an int in (0, max_len={max_len}]",
    )
    if _is_number(penalty_factor):
        check(penalty_factor >= 0, "penalty_factor", penalty_factor, ">= 0")
    lengths = jnp.asarray(lengths, jnp.float32)
    expected = max_len - cache_len
    soft = (expected - lengths) / cache_len
    reward = jnp.where(lengths <= expected, 0.0, jnp.where(lengths <= max_len, soft, -1.0))
    return penalty_factor * reward
