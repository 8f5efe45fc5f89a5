"""The configuration every token-rollout RL algorithm shares, and its validation.

`LMRLConfig` holds the fields of GRPO, its variants, multi-turn GRPO and PPO-LM
(sampling, rewards, estimator and loss, rollout correction, the asynchronous sampler,
optimisation, process rewards, evaluation); an algorithm's config subclasses it, may
restrict `ADVANTAGES` and adds its own fields. `validate` raises a `ConfigError` naming
the first invalid field and the values it allows, before anything compiles.

What does not live here: the algorithm (`lm_rollout.py` and the modules it names).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.algorithms import process_rewards
from jaxrl.algorithms.lm_common import LMConfig
from jaxrl.lm.config import SUPPORTED_DTYPES
from jaxrl.objectives import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    ROLLOUT_CORRECTIONS,
    validate_advantage,
    validate_clip,
    validate_rollout_correction,
)

RL_SWEEPABLE = ("lr", "weight_decay", "max_grad_norm", "eps_low", "eps_high", "kl_coef", "ent_coef")
"""The sweepable hyperparameters every token-rollout algorithm has (float32 state leaves)."""


@dataclasses.dataclass(frozen=True)
class LMRLConfig(LMConfig):
    """Fields shared by the token-rollout RL algorithms (GRPO and its variants, PPO with a
    critic). Every estimator, loss and aggregation is a name from a registry of
    `jaxrl.objectives`, so a paper's variant is a configuration.

    Budget units: `total_steps` counts *completions* (samples) per agent; one update samples
    `group_size` completions for each of `num_prompts` prompts, so a run makes
    `total_steps // (num_prompts * group_size)` updates.
    """

    # -- budget (completions per agent; see the class docstring)
    total_steps: int = 204_800
    """Completions (samples) per agent. The default, 1,600 updates, is the budget of the
    learning target, a held-out pass@1 gain from the default SFT warm start (the
    `grpo_addition` result in benchmarks/results; its `-m full` test's threshold is
    +0.30)."""
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
    reuse_kv_cache: bool = True
    """Multi-turn tasks: keep each episode's KV cache between its turns and prefill only
    the new tokens (the environment's answer), instead of re-reading the whole context
    every turn (jaxrl/algorithms/lm_multiturn.py; ignored on a single-turn task)."""
    continuous_batching: bool = False
    """Sample with continuous batching (jaxrl/lm/continuous.py): `sampler_slots`
    completions decode at a time, and a slot whose completion ended takes the next one
    at once instead of idling until the longest has ended (faster when completion lengths
    vary). The same completions as the static sampler, up to float rounding
    (docs/lm_sampling.md, "Continuous batching"). Single-turn tasks only."""
    sampler_slots: int | None = None
    """Continuous batching: completions decoded at a time (the decode batch and the KV
    cache's rows), at most the completions sampled per update (num_prompts x (1 +
    dynamic_sampling) x group_size); None: half of them."""
    partial_rollouts: bool = False
    """Partial rollouts (Kimi k1.5): a completion samples at most `rollout_token_budget`
    tokens per update, and one cut there goes on in the next update, its tokens and
    behaviour log-probs kept in the host state (so in checkpoints). A group is learned
    from once all its completions have ended; until then its rows stay in the batch with
    no loss (they wait), and each update draws only as many new prompts as groups
    ended. Needs continuous_batching."""
    rollout_token_budget: int | None = None
    """Partial rollouts: tokens a completion samples per update (>= 1; None: the whole
    completion budget max_new_tokens, so nothing is cut)."""
    # -- rewards
    reward: str = "correct"
    """Reward blocks, e.g. "correct", "correct+0.1*format" (see jaxrl/rewards/blocks.py)."""
    overlong_cache: int = 0
    """DAPO soft overlong penalty over the last this many tokens of the budget (0: off)."""
    dynamic_sampling: int = 0
    """DAPO dynamic sampling: also sample this many times num_prompts extra prompts, and
    replace groups with all-equal rewards by informative ones (0: off)."""
    # -- estimator and loss
    advantage: str = dataclasses.field(
        default="grpo", metadata={"choices": ADVANTAGE_ESTIMATORS.names()}
    )
    """Advantage estimator (see jaxrl/objectives/advantages.py); each algorithm accepts some."""
    policy_loss: str = dataclasses.field(
        default="clip", metadata={"choices": POLICY_LOSSES.names()}
    )
    """Policy loss: clip (PPO/DAPO surrogate), gspo (sequence ratio) or cispo."""
    loss_agg: str = dataclasses.field(
        default="seq_mean_token_mean", metadata={"choices": LOSS_AGGREGATIONS.names()}
    )
    """Loss aggregation: seq_mean_token_mean, token_mean or seq_mean_token_sum_norm."""
    eps_low: float = 0.2
    """Lower clip range of the ratio (1 - eps_low)."""
    eps_high: float = 0.2
    """Upper clip range of the ratio (1 + eps_high; DAPO's clip-higher uses 0.28)."""
    dual_clip_c: float | None = None
    """Dual-clip bound c > 1 for negative advantages (Ye et al. 2020; None: off)."""
    # -- rollout correction: the sampler (behaviour) policy against the learner's
    rollout_correction: str = dataclasses.field(
        default="none", metadata={"choices": ROLLOUT_CORRECTIONS.names()}
    )
    """Importance weights for the sampler-learner mismatch (see
    jaxrl/objectives/rollout_correction.py): none, token_tis, seq_tis, token_mis, seq_mis
    or geo_mis."""
    rollout_is_cap: float = 2.0
    """Truncation cap C >= 1 of token_tis and seq_tis."""
    rollout_mask_band: tuple[float, ...] = (0.5, 2.0)
    """Ratios low,high (low <= 1 <= high) outside which token_mis, seq_mis and geo_mis
    drop a token or row."""
    sampler_dtype: str | None = None
    """Compute dtype of the sampler's forward passes, with its own cast copy of the
    parameters (e.g. bfloat16, as pods sample; None: the learner's `dtype`)."""
    # -- asynchronous sampler and learner (jaxrl/training/async_stages.py, docs/lm.md)
    async_staleness: int = 0
    """K: the policy versions between the parameters that sampled a row and the ones
    that learn from it. 0: the synchronous algorithm. K >= 1: the sampler runs on its
    own devices (`sampler_devices`) exactly K versions behind the learner, sampling the
    batch of update u + K while the learner learns from the batch of update u."""
    sampler_devices: int = 1
    """With async_staleness >= 1: the sampler's devices (the first this many; the
    learner gets the rest)."""
    kl: str = dataclasses.field(default="k3+", metadata={"choices": KL_ESTIMATORS.names()})
    """KL estimator to the reference policy: k1, k2, k3 or k3+ (see jaxrl/objectives/kl.py)."""
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
    # -- process rewards (jaxrl/algorithms/process_rewards.py, jaxrl/objectives/process.py)
    process_reward: str | None = None
    """Step rewards beside the outcome: "verifier" (a step task's step labels), a PRM run
    directory (`jaxrl train prm`), or "implicit" (PRIME's implicit PRM, trained online on
    the outcome; Cui et al. 2025). None: the outcome alone."""
    process_reward_weight: float = 0.2
    """Weight of the process term: GRPO adds weight x the step advantages to the outcome's,
    PPO-LM adds weight x the step rewards to the token rewards of its GAE. The default
    keeps the outcome in charge: at weight 1 the step advantages drown the outcome's and
    a PRM's errors steer the policy (the weight sweep: benchmarks/notes, "process
    rewards")."""
    process_reward_std: bool = True
    """GRPO: divide the step rewards' deviations from their group mean by the group's std
    (DeepSeekMath's process supervision); False: the deviations alone (Dr. GRPO's
    correction, which keeps a PRM's small differences between good steps small)."""
    implicit_prm_beta: float = 0.05
    """PRIME: beta of the implicit process reward beta log(pi_phi / pi_ref) (PRIME's
    recipe uses 0.05)."""
    implicit_prm_lr: float = 1e-4
    """PRIME: learning rate of the implicit PRM pi_phi (AdamW, the policy's schedule)."""
    # -- evaluation: pass@k on held-out prompts, sampled at `temperature`
    eval_samples: int = 8
    """Completions per held-out prompt for pass@k (k = 1 .. eval_samples)."""

    # The advantage estimators this config accepts, a registry of `jaxrl.objectives`
    # (an algorithm's config restricts it); a class attribute, not a field.
    ADVANTAGES = ADVANTAGE_ESTIMATORS

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

    def validate(self) -> LMRLConfig:
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
        self.ADVANTAGES.check(self.advantage)
        validate_advantage(self.advantage, self.group_size)
        POLICY_LOSSES.check(self.policy_loss)
        LOSS_AGGREGATIONS.check(self.loss_agg)
        KL_ESTIMATORS.check(self.kl)
        cfg.check(self.eps_low >= 0, "eps_low", self.eps_low, ">= 0")
        cfg.check(self.eps_high >= 0, "eps_high", self.eps_high, ">= 0")
        validate_clip(self.policy_loss, self.eps_low, self.eps_high, self.dual_clip_c)
        validate_rollout_correction(
            self.rollout_correction, self.rollout_is_cap, self.rollout_mask_band
        )
        if self.sampler_dtype is not None:
            cfg.check_choice(self, "sampler_dtype", SUPPORTED_DTYPES)
        for name in ("async_staleness", "sampler_devices"):
            value = getattr(self, name)
            cfg.check(isinstance(value, int) and not isinstance(value, bool), name, value, "an int")
        cfg.check(
            self.async_staleness >= 0,
            "async_staleness",
            self.async_staleness,
            ">= 0 (0: synchronous; K >= 1: the sampler K policy versions behind)",
        )
        cfg.check(
            self.sampler_devices >= 1,
            "sampler_devices",
            self.sampler_devices,
            ">= 1 and fewer than the devices (the learner needs the rest)",
        )
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
        self._validate_sampler_slots()
        self._validate_process_reward()
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

    @property
    def sampled_per_update(self) -> int:
        """Completions sampled per update: with dynamic sampling's spares."""
        return self.num_prompts * (1 + self.dynamic_sampling) * self.group_size

    def _validate_sampler_slots(self) -> None:
        """`continuous_batching`, its `sampler_slots` and partial rollouts."""
        slots, rows = self.sampler_slots, self.sampled_per_update
        budget = self.rollout_token_budget
        cfg.check(
            budget is None or self.partial_rollouts,
            "rollout_token_budget",
            budget,
            "None without partial_rollouts=True",
        )
        cfg.check(
            budget is None or (isinstance(budget, int) and budget >= 1),
            "rollout_token_budget",
            budget,
            "None or an integer >= 1 (a completion samples at least one token per update)",
        )
        if self.partial_rollouts:
            cfg.check(
                self.continuous_batching,
                "partial_rollouts",
                True,
                "False without continuous_batching=True (the continuous sampler cuts and "
                "continues completions)",
            )
            cfg.check(
                self.async_staleness == 0,
                "async_staleness",
                self.async_staleness,
                "0 with partial_rollouts=True (a carried completion's segments are sampled "
                "by several policy versions, so no one version bounds its staleness)",
            )
            for name in ("dynamic_sampling", "process_reward"):
                cfg.check(
                    not getattr(self, name),
                    name,
                    getattr(self, name),
                    f"{0 if name == 'dynamic_sampling' else None} with partial_rollouts=True "
                    "(each update's batch is the groups in flight)",
                )
        if not self.continuous_batching:
            cfg.check(
                slots is None, "sampler_slots", slots, "None without continuous_batching=True"
            )
            return
        cfg.check(
            not tasks.is_multi_turn(self.task),
            "continuous_batching",
            True,
            f"False on the multi-turn task {self.task!r} (its turns continue from each "
            "episode's KV cache; continuous batching is for single-turn tasks)",
        )
        cfg.check(
            slots is None or (isinstance(slots, int) and 1 <= slots <= rows),
            "sampler_slots",
            slots,
            f"None or an integer in [1, {rows}] (the completions sampled per update)",
        )

    def _validate_process_reward(self) -> None:
        """The process-reward fields; a PRM directory and the task's step verifier are
        checked when the algorithm is built (`RolloutAlgorithm.__init__`)."""
        source = self.process_reward
        cfg.check(
            source is None or (isinstance(source, str) and bool(source)),
            "process_reward",
            source,
            f"None, {process_rewards.VERIFIER!r}, {process_rewards.IMPLICIT!r} or a PRM run "
            "directory",
        )
        weight = self.process_reward_weight
        cfg.check(
            cfg.is_finite_number(weight) and weight >= 0,
            "process_reward_weight",
            weight,
            "a finite number >= 0",
        )
        cfg.check_positive(self, "implicit_prm_beta", "implicit_prm_lr")
        if source is None:
            return
        cfg.check(
            not tasks.is_multi_turn(self.task),
            "process_reward",
            source,
            f"None on the multi-turn task {self.task!r} (step rewards are for single-turn "
            "step tasks)",
        )
        cfg.check(
            source != process_rewards.IMPLICIT or self.lora_rank == 0,
            "lora_rank",
            self.lora_rank,
            "0 with process_reward='implicit' (the implicit PRM is a full copy of the model)",
        )
