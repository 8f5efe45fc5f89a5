"""GRPO-family RL for language models: `losses.py` holds the advantage estimators, policy
losses, loss aggregation, KL estimators, entropy terms and DAPO's overlong shaping, each a
pure function selected by name (the trainer, config and `train.py` come next)."""

from .losses import (
    ADVANTAGES,
    GROUP_ADVANTAGES,
    KL_ESTIMATORS,
    LOSS_AGGS,
    POLICY_LOSSES,
    aggregate_loss,
    compute_advantages,
    constant_reward_groups,
    entropy_bonus,
    high_entropy_mask,
    kl_estimate,
    kl_penalised_rewards,
    loss_normaliser,
    outcome_token_rewards,
    overlong_penalty,
    policy_loss,
    validate_advantage,
    validate_clip,
    zero_advantage_group_fraction,
)

__all__ = [
    "ADVANTAGES",
    "GROUP_ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSS_AGGS",
    "POLICY_LOSSES",
    "aggregate_loss",
    "compute_advantages",
    "constant_reward_groups",
    "entropy_bonus",
    "high_entropy_mask",
    "kl_estimate",
    "kl_penalised_rewards",
    "loss_normaliser",
    "outcome_token_rewards",
    "overlong_penalty",
    "policy_loss",
    "validate_advantage",
    "validate_clip",
    "zero_advantage_group_fraction",
]
