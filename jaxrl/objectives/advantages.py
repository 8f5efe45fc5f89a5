"""Advantage estimators of token-level RL for language models (config field `advantage`).

Each estimator is registered in `ADVANTAGE_ESTIMATORS` under the name users pass, as a
function of the token rewards and the completion mask that returns `(advantages,
returns)`, both (batch, length) float32 and 0 off-mask:

- `grpo` (`grpo_advantages`), `dr_grpo` (`dr_grpo_advantages`), `rloo`
  (`rloo_advantages`): group baselines over the completions of one prompt, on the
  sequence score s_i = sum_t r_{i,t}; every completion token of sequence i gets A_i.
- `reinforce_pp` (`reinforce_pp_advantages`): token reward-to-go, batch-whitened.
- `gae` (`gae_advantages`): GAE with a learned critic's values, batch-whitened.

Helpers: `outcome_token_rewards` (the token form of a per-sequence reward), `masked_gae`
(GAE that steps over masked tokens), `masked_whiten`, `constant_reward_groups`,
`zero_advantage_group_fraction`.

Conventions: per-sequence `rewards` are (batch,), laid out prompt-major: rows
`[g * group_size, (g + 1) * group_size)` are the completions of prompt `g`. Token arrays
are (batch, length) with a float or bool `mask` that is 1 on the completion tokens the
loss counts (never prompt, padding or environment tokens of a multi-turn episode).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.config import ConfigError, check
from jaxrl.returns import gae

from ._masks import Array, Scalar, float_mask
from .registry import Registry


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
    m = float_mask(mask)
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
    the next value and advantage through unchanged (as verl's and Tunix's masked GAE):
    `jaxrl.returns.gae` with its `mask`, on the transposed rows. Under `jit` (as
    training runs it) the result equals the former standalone recursion bit for bit
    (tests/test_returns.py); op by op, XLA's fused multiply-adds differ by an ulp.

    Args:
      token_rewards: (batch, length) per-token rewards.
      values: (batch, length) V(s_t) of the learned value head at each token.
      mask: (batch, length) completion-token mask.
    Returns:
      `(advantages, returns)`, (batch, length) float32, 0 off-mask; `returns =
      advantages + values` on the mask (the value target).
    """
    m = float_mask(mask)
    rewards = jnp.asarray(token_rewards, jnp.float32) * m
    values = jnp.asarray(values, jnp.float32) * m
    # `returns.gae` is time-major: rows become columns. No step is `done` (V = A = 0 past
    # the row's end comes from the zero bootstrap); off-mask steps pass both through.
    m_t, zeros = m.T, jnp.zeros(rewards.shape[0], jnp.float32)
    advantages, _ = gae(
        rewards.T, values.T, jnp.zeros_like(m_t), zeros, gamma, gae_lambda, mask=m_t
    )
    advantages = advantages.T * m
    return advantages, (advantages + values) * m


def outcome_token_rewards(rewards: Array, mask: Array) -> Array:
    """Places each sequence's reward on its last completion token, 0 elsewhere: the
    token-level form of an outcome reward (as verl's `token_level_scores`).

    A row with an empty mask gets no reward anywhere.
    """
    m = float_mask(mask)
    length = m.shape[1]
    positions = jnp.arange(length)
    last = jnp.max(jnp.where(m > 0, positions, -1), axis=1)
    at_last = (positions[None, :] == last[:, None]).astype(jnp.float32)
    return at_last * jnp.asarray(rewards, jnp.float32)[:, None]


def sequence_scores(token_rewards: Array, mask: Array) -> Array:
    """s_i = sum_t r_{i,t} over the mask tokens, (batch,): the outcome reward (minus the
    summed KL penalty when the KL is in the reward; a multi-turn episode's return)."""
    return jnp.sum(jnp.asarray(token_rewards, jnp.float32) * float_mask(mask), axis=1)


def reward_to_go(token_rewards: Array, mask: Array, gamma: Scalar) -> Array:
    """G_t = sum_{t' >= t} gamma^(t' - t) r_t' over the mask tokens, (batch, length)."""
    m = float_mask(mask)
    returns, _ = masked_gae(token_rewards, jnp.zeros_like(m), m, gamma, 1.0)
    return returns


def gae_advantages(
    token_rewards: Array,
    values: Array,
    mask: Array,
    gamma: Scalar,
    gae_lambda: Scalar,
    whiten: bool,
    eps: float = 1e-8,
) -> tuple[Array, Array]:
    """`(advantages, returns)` of PPO with a critic, (batch, length), 0 off-mask.

    GAE over the completion tokens (`masked_gae`, Schulman et al. 2016, eq. 16), V = 0
    after the last token (the episode ends with the completion). With `whiten`, the
    advantages are whitened over all mask tokens of the batch (as verl and Tunix); the
    returns A + V, the value targets, always use the raw advantages.
    """
    m = float_mask(mask)
    advantages, returns = masked_gae(token_rewards, values, m, gamma, gae_lambda)
    if whiten:
        advantages = masked_whiten(advantages, m, eps)
    return advantages, returns


# ------------------------------------------------------------------ the registered estimators
# Each: (token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps)
#       -> (advantages, returns), (batch, length). `eps=None` is the estimator's default.
def _grpo(token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps):
    del values, gae_lambda
    scores = sequence_scores(token_rewards, mask)
    per_sequence = grpo_advantages(scores, group_size, 1e-6 if eps is None else eps)
    return per_sequence[:, None] * float_mask(mask), reward_to_go(token_rewards, mask, gamma)


def _dr_grpo(token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps):
    del values, gae_lambda, eps
    per_sequence = dr_grpo_advantages(sequence_scores(token_rewards, mask), group_size)
    return per_sequence[:, None] * float_mask(mask), reward_to_go(token_rewards, mask, gamma)


def _rloo(token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps):
    del values, gae_lambda, eps
    per_sequence = rloo_advantages(sequence_scores(token_rewards, mask), group_size)
    return per_sequence[:, None] * float_mask(mask), reward_to_go(token_rewards, mask, gamma)


def _reinforce_pp(token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps):
    del group_size, values, gae_lambda
    advantages = reinforce_pp_advantages(token_rewards, mask, gamma, 1e-8 if eps is None else eps)
    return advantages, reward_to_go(token_rewards, mask, gamma)


def _gae(token_rewards, mask, *, group_size, values, gamma, gae_lambda, eps):
    del group_size
    if values is None:
        raise ConfigError("advantage='gae' needs the value head's values (values=None given)")
    eps = 1e-8 if eps is None else eps
    return gae_advantages(token_rewards, values, mask, gamma, gae_lambda, True, eps)


ADVANTAGE_ESTIMATORS = Registry(
    "advantage",
    {"grpo": _grpo, "dr_grpo": _dr_grpo, "rloo": _rloo, "reinforce_pp": _reinforce_pp, "gae": _gae},
)
"""Every advantage estimator by the name of the `advantage` config field."""

GROUP_ADVANTAGES = ("grpo", "dr_grpo", "rloo")
"""Estimators whose baseline comes from the other completions of the same prompt."""

CRITIC_ADVANTAGES = ("gae",)
"""Estimators that need a learned critic's values."""


def validate_advantage(advantage: str, group_size: int) -> None:
    """Raises `ConfigError` for an unknown estimator, or a group estimator (`grpo`,
    `dr_grpo`, `rloo`) with `group_size` < 2: one completion per prompt has no group
    baseline (its advantage would be 0, or 0/0 for GRPO's unbiased std)."""
    ADVANTAGE_ESTIMATORS.check(advantage)
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
    return ADVANTAGE_ESTIMATORS[name](
        token_rewards,
        float_mask(mask),
        group_size=group_size,
        values=values,
        gamma=gamma,
        gae_lambda=gae_lambda,
        eps=eps,
    )


def step_group_advantages(
    step_returns: Array, step_groups: Array, step_mask: Array, eps: float = 1e-6
) -> Array:
    """GiGPO's step-level advantages (Feng et al. 2025, "Group-in-Group Policy
    Optimization for LLM Agent Training", eq. 7), for multi-turn episodes.

        A^S_{i,k} = (G_{i,k} - mean G) / (std G + eps),  over the turns in (i, k)'s group

    Turns share a step group when they start from the same *anchor state* (here: the
    same context, within one prompt's group of episodes); G_{i,k} is the return from
    turn k on. The std is unbiased (ddof=1), as GRPO's; a group of one turn, or of equal
    returns, gets 0 (the first-turn group is the whole episode group, so it repeats the
    episode-level advantage that GiGPO adds this to).

    Args:
      step_returns: (rows, turns) G_{i,k}.
      step_groups: (rows, turns) int32 group ids in [0, rows * turns); equal ids share
        an anchor state.
      step_mask: (rows, turns) 1 on turns that were played.
    Returns:
      (rows, turns) float32, 0 off-mask.
    """
    mask = float_mask(step_mask).reshape(-1)
    ids = jnp.asarray(step_groups, jnp.int32).reshape(-1)
    returns = jnp.asarray(step_returns, jnp.float32).reshape(-1) * mask
    n = ids.shape[0]
    count = jax.ops.segment_sum(mask, ids, num_segments=n)
    mean = jax.ops.segment_sum(returns, ids, num_segments=n) / jnp.maximum(count, 1.0)
    deviation = (returns - mean[ids]) * mask
    variance = jax.ops.segment_sum(deviation**2, ids, num_segments=n)
    std = jnp.sqrt(variance / jnp.maximum(count - 1.0, 1.0))
    shared = count[ids] > 1
    advantages = jnp.where(shared, deviation / (std[ids] + eps), 0.0) * mask
    return advantages.reshape(jnp.shape(step_returns))


def turn_token_advantages(step_advantages: Array, turn_of_token: Array) -> Array:
    """Each token's turn's advantage: `step_advantages[row, turn_of_token[row, t]]`, 0
    where `turn_of_token` is -1 (prompt, environment and padding tokens)."""
    turn = jnp.asarray(turn_of_token, jnp.int32)
    picked = jnp.take_along_axis(step_advantages, jnp.maximum(turn, 0), axis=1)
    return jnp.where(turn >= 0, picked, 0.0)


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
