"""GRPO-family hyperparameters and their validation.

Budget units: `total_steps` counts *completions* (samples) per agent; one update samples
`group_size` completions for each of `num_prompts` prompts, so a run makes
`total_steps // (num_prompts * group_size)` updates. Every estimator, loss and
aggregation is selected by name (`jaxrl/algorithms/grpo/losses.py`), so a paper's
variant is a configuration: GRPO (the defaults), Dr. GRPO (`advantage=dr_grpo`,
`loss_agg=seq_mean_token_sum_norm`), DAPO (`eps_high=0.28`, `loss_agg=token_mean`,
`dynamic_sampling`, `overlong_cache`), RLOO (`advantage=rloo`), REINFORCE++
(`advantage=reinforce_pp`), GSPO (`policy_loss=gspo`), CISPO (`policy_loss=cispo`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.algorithms.lm_common import LMConfig

from . import losses

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = ("lr", "weight_decay", "max_grad_norm", "eps_low", "eps_high", "kl_coef", "ent_coef")
# Estimators a GRPO run can use: the group estimators and REINFORCE++. `gae` needs a
# learned critic: `jaxrl train ppo-lm` (jaxrl/algorithms/ppo_lm) trains one.
ADVANTAGES = ("grpo", "dr_grpo", "rloo", "reinforce_pp")


@dataclasses.dataclass(frozen=True)
class GRPOConfig(LMConfig):
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath, sec. 4) and its
    variants, selected by configuration (see the module docstring).

    One update: `num_prompts` training prompts, `group_size` completions each (sampled
    with the KV cache at `temperature`), rewards on the host, advantages, then
    `num_epochs` passes of `num_minibatches` optimiser steps with importance ratios
    against the log-probs of the policy that sampled. Start from an SFT run or a Hugging
    Face model with `model`; the defaults fine-tune the tiny character-level Llama of
    `jaxrl train sft --task addition`.
    """

    # -- budget (completions per agent; see the module docstring)
    total_steps: int = 204_800
    """Completions (samples) per agent. The default, 1,600 updates (~3.5 min on 2 CPU
    cores), is the budget of the learning target: from the default SFT warm start,
    held-out pass@1 +30 points or more (benchmarks/README.md, "GRPO learning")."""
    num_prompts: int = 16
    """Prompts per update."""
    group_size: int = 8
    """Completions sampled per prompt (the group of GRPO's baseline)."""
    # -- sampling
    max_new_tokens: int | None = None
    """Completion length budget in tokens, per model turn on a multi-turn task (None: the
    task's longest answer + eos)."""
    temperature: float = 1.0
    """Sampling temperature (the log-probs of the loss use the same)."""
    # -- rewards
    reward: str = "correct"
    """Reward blocks, e.g. "correct", "correct+0.1*format" (see jaxrl/rewards/blocks.py)."""
    overlong_cache: int = 0
    """DAPO soft overlong penalty over the last this many tokens of the budget (0: off)."""
    dynamic_sampling: int = 0
    """DAPO dynamic sampling: also sample this many times num_prompts extra prompts, and
    replace groups with all-equal rewards by informative ones (0: off)."""
    # -- estimator and loss
    advantage: str = "grpo"
    """Advantage estimator: grpo, dr_grpo, rloo or reinforce_pp."""
    policy_loss: str = "clip"
    """Policy loss: clip (PPO/DAPO surrogate), gspo (sequence ratio) or cispo."""
    loss_agg: str = "seq_mean_token_mean"
    """Loss aggregation: seq_mean_token_mean, token_mean or seq_mean_token_sum_norm."""
    eps_low: float = 0.2
    """Lower clip range of the ratio (1 - eps_low)."""
    eps_high: float = 0.2
    """Upper clip range of the ratio (1 + eps_high; DAPO's clip-higher uses 0.28)."""
    dual_clip_c: float | None = None
    """Dual-clip bound c > 1 for negative advantages (Ye et al. 2020; None: off)."""
    kl: str = "k3+"
    """KL estimator to the reference policy: k1, k2, k3 or k3+ (see losses.kl_estimate)."""
    kl_coef: float = 0.0
    """KL coefficient (0: no reference model is kept at all)."""
    kl_in_reward: bool = False
    """Put the KL penalty in the token rewards instead of the loss."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    entropy_top_fraction: float = 1.0
    """Train only on this fraction of highest-entropy tokens (Wang et al. 2025; 1: all)."""
    # -- optimisation
    num_epochs: int = 1
    """Passes over each update's completions."""
    num_minibatches: int = 1
    """Optimiser steps per epoch (the completions are split by row)."""
    micro_batches: int = 1
    """Gradient-accumulation steps per minibatch (same result, less activation memory)."""
    fuse_rescoring: bool = True
    """Re-score in the loss when one optimiser step uses the batch (False: in `collect`).

    The trainer's log-probs of the sampled rows (the ratio's denominator) then come from
    the loss's own forward pass, which runs on the sampling parameters when there is one
    optimiser step per update (num_epochs = num_minibatches = 1) and nothing reads them
    before the loss (no KL in the reward, entropy_top_fraction = 1). It saves the separate
    re-scoring forward pass in `collect` (as TRL and verl do with one update per batch);
    the ratio is then 1 with the same gradient, and `logp_gap` comes from the loss's pass."""
    lr: float = 2e-4
    """Peak learning rate (AdamW)."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW)."""
    warmup: float = 0.0
    """Fraction of the updates with a linear learning-rate warmup."""
    lr_schedule: str = "constant"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""
    # -- evaluation: pass@k on held-out prompts, sampled at `temperature`
    eval_samples: int = 8
    """Completions per held-out prompt for pass@k (k = 1 .. eval_samples)."""

    # The `advantage` names this config accepts (a subclass with a critic changes it);
    # a class attribute, not a field (no annotation).
    ADVANTAGE_CHOICES = ADVANTAGES

    @property
    def completions_per_update(self) -> int:
        return self.num_prompts * self.group_size

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.completions_per_update

    @property
    def rescores_in_loss(self) -> bool:
        """Whether the loss's forward pass is the re-scoring (see `fuse_rescoring`)."""
        return (
            self.fuse_rescoring
            and self.num_epochs == 1
            and self.num_minibatches == 1
            and not self.kl_in_reward
            and self.entropy_top_fraction >= 1
        )

    def validate(self) -> GRPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_prompts", "group_size", "temperature")
        cfg.check_positive(self, "num_epochs", "num_minibatches", "micro_batches", "eval_samples")
        cfg.check(
            self.total_steps >= self.completions_per_update,
            "total_steps",
            self.total_steps,
            f">= num_prompts * group_size = {self.completions_per_update} (one update; "
            "total_steps counts completions)",
        )
        cfg.check(
            self.max_new_tokens is None or self.max_new_tokens >= 1,
            "max_new_tokens",
            self.max_new_tokens,
            "None or >= 1",
        )
        cfg.check_choice(self, "advantage", self.ADVANTAGE_CHOICES)
        losses.validate_advantage(self.advantage, self.group_size)
        cfg.check_choice(self, "policy_loss", losses.POLICY_LOSSES)
        cfg.check_choice(self, "loss_agg", losses.LOSS_AGGS)
        cfg.check_choice(self, "kl", losses.KL_ESTIMATORS)
        cfg.check(self.eps_low >= 0, "eps_low", self.eps_low, ">= 0")
        cfg.check(self.eps_high >= 0, "eps_high", self.eps_high, ">= 0")
        losses.validate_clip(self.policy_loss, self.eps_low, self.eps_high, self.dual_clip_c)
        for name in ("kl_coef", "ent_coef", "overlong_cache", "dynamic_sampling"):
            cfg.check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        cfg.check(
            self.kl_coef > 0 or not self.kl_in_reward,
            "kl_in_reward",
            self.kl_in_reward,
            "False when kl_coef=0 (there is no KL to put in the reward)",
        )
        cfg.check(
            0 < self.entropy_top_fraction <= 1,
            "entropy_top_fraction",
            self.entropy_top_fraction,
            "in (0, 1] (1: train on every token)",
        )
        rows = self.completions_per_update
        cfg.check(
            rows % (self.num_minibatches * self.micro_batches) == 0,
            "num_minibatches",
            self.num_minibatches,
            f"such that num_minibatches * micro_batches divides the {rows} completions of "
            "an update",
        )
        super().validate()
        return self


def default_config() -> GRPOConfig:
    """GRPO on 3-digit addition, from the tiny model (pass `model=` an SFT run)."""
    return GRPOConfig()
