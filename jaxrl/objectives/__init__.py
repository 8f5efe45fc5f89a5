"""The objectives of token-level RL for language models.

Small pure, jittable functions, each with its formula and source in its docstring,
shared by every LM RL algorithm (GRPO and its variants, PPO with a critic). Every choice
that papers vary is a `Registry` keyed by the names users pass (config values, CLI
flags); config validation, CLI choices and error messages read the keys from there:

- `advantages`: `ADVANTAGE_ESTIMATORS` (`advantage`: grpo, dr_grpo, rloo, reinforce_pp,
  gae), `compute_advantages`, `masked_gae`, `outcome_token_rewards`, ...
- `policy_losses`: `POLICY_LOSSES` (`policy_loss`: clip, gspo, cispo), `policy_loss`,
  `validate_clip`.
- `aggregation`: `LOSS_AGGREGATIONS` (`loss_agg`: seq_mean_token_mean, token_mean,
  seq_mean_token_sum_norm), `loss_normaliser`, `aggregate_loss`, `masked_token_mean`.
- `kl`: `KL_ESTIMATORS` (`kl`: k1, k2, k3, k3+), `kl_estimate`, `kl_penalised_rewards`.
- `entropy`: `entropy_bonus`, `high_entropy_mask`.
- `rollout_correction`: `ROLLOUT_CORRECTIONS` (`rollout_correction`: none, token_tis,
  seq_tis, token_mis, seq_mis, geo_mis), `rollout_weights`, `rollout_metrics`.
- `shaping`: DAPO's `overlong_penalty`.
- `process`: step rewards: `process_advantages` (GRPO's process supervision),
  `with_process_rewards`, PRIME's `implicit_process_rewards` and `implicit_prm_loss`,
  `binary_cross_entropy_with_logits` (a PRM's loss).
- `value`: `explained_variance` of a critic.

Conventions. Token arrays are `(batch, length)` float32, e.g. the `(B, T-1)` log-probs
and entropies of `jaxrl.lm.sampling.token_logprobs`, with a `mask` (float 0/1 or bool)
that is 1 on the completion tokens the loss counts (never prompt, padding, or
environment tokens of a multi-turn episode). Per-sequence `rewards` are `(batch,)`, and
a batch of `num_prompts x group_size` completions is laid out prompt-major: rows
`[g * group_size, (g + 1) * group_size)` are the completions of prompt `g`. Names and
sizes (`group_size`, `loss_agg`, `max_len`, ...) are static Python values; coefficients
may be traced (swept) float32 scalars.

What does not live here: sampling and log-probs (`jaxrl.lm`), reward functions
(`jaxrl.tasks`, `jaxrl.rewards`), and the training loops (`jaxrl/algorithms/`).
"""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    CRITIC_ADVANTAGES,
    GROUP_ADVANTAGES,
    compute_advantages,
    constant_reward_groups,
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    masked_gae,
    masked_whiten,
    outcome_token_rewards,
    reinforce_pp_advantages,
    reward_to_go,
    rloo_advantages,
    sequence_scores,
    step_group_advantages,
    turn_token_advantages,
    validate_advantage,
    zero_advantage_group_fraction,
)
from .aggregation import LOSS_AGGREGATIONS, aggregate_loss, loss_normaliser, masked_token_mean
from .entropy import entropy_bonus, high_entropy_mask
from .kl import KL_ESTIMATORS, kl_estimate, kl_penalised_rewards
from .policy_losses import POLICY_LOSSES, cispo, clipped_surrogate, gspo, policy_loss, validate_clip
from .process import (
    binary_cross_entropy_with_logits,
    implicit_prm_loss,
    implicit_process_rewards,
    process_advantages,
    with_process_rewards,
)
from .registry import Registry
from .rollout_correction import (
    ROLLOUT_CORRECTIONS,
    rollout_metrics,
    rollout_weights,
    validate_rollout_correction,
)
from .shaping import overlong_penalty
from .value import explained_variance

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "CRITIC_ADVANTAGES",
    "GROUP_ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS",
    "Registry",
    "aggregate_loss",
    "binary_cross_entropy_with_logits",
    "cispo",
    "clipped_surrogate",
    "compute_advantages",
    "constant_reward_groups",
    "dr_grpo_advantages",
    "entropy_bonus",
    "explained_variance",
    "gae_advantages",
    "grpo_advantages",
    "gspo",
    "high_entropy_mask",
    "implicit_prm_loss",
    "implicit_process_rewards",
    "kl_estimate",
    "kl_penalised_rewards",
    "loss_normaliser",
    "masked_gae",
    "masked_token_mean",
    "masked_whiten",
    "outcome_token_rewards",
    "overlong_penalty",
    "policy_loss",
    "process_advantages",
    "reinforce_pp_advantages",
    "reward_to_go",
    "rloo_advantages",
    "rollout_metrics",
    "rollout_weights",
    "sequence_scores",
    "step_group_advantages",
    "turn_token_advantages",
    "validate_advantage",
    "validate_clip",
    "validate_rollout_correction",
    "with_process_rewards",
    "zero_advantage_group_fraction",
]
