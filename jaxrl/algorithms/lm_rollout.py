"""What the token-rollout RL algorithms share: GRPO, multi-turn GRPO and PPO with a critic.

Each of them is a staged algorithm (`jaxrl/training/contract.py`) whose update is

  * `prepare(host_state)` (host): draws `num_prompts` training prompts per agent from
    the task (plus `dynamic_sampling * num_prompts` spares), agent `i`'s batch `k` from
    `numpy.random.default_rng((seed, i, k))`, so the host state is a cursor and a
    resumed run draws the same prompts; left-pads them to one shape.
  * `collect(state, prompts)` (jitted): samples `group_size` completions per prompt with
    the KV cache (`jaxrl.lm.generate`), and re-scores them with the same parameters
    (`token_logprobs`, vocabulary in chunks): the trainer's log-probs (the importance
    ratio's denominator), token entropies, and the reference policy's log-probs when
    there is a KL term. With one optimiser step per update the loss's own forward pass
    is that re-scoring, and collect skips it (`LMRLConfig.fuse_rescoring`). The
    sampler's own log-probs are kept too: their gap to the trainer's is a metric (they
    differ only by numerics here, but not with a separate inference engine).
  * `process(collected, host_state)` (host): decodes, scores with the reward blocks
    (`jaxrl/rewards`; failures count and score 0), applies DAPO's overlong penalty and
    dynamic sampling, and logs the sampling metrics.
  * `learn(state, batch)` (jitted): each algorithm's own (`grpo/learning.py`,
    `ppo_lm/train.py`), written with the pieces here: `learning_rewards`,
    `loss_mask`, `epochs_of_minibatches` (the `num_epochs` x `num_minibatches` scan),
    `accumulated_gradient` (`lm_common`), `adamw_step`, `policy_objective` (the policy
    loss with its KL and entropy terms, from `jaxrl.objectives`) and `update_metrics`.

So this module holds:

* `LMRLConfig`: the fields every token-rollout algorithm shares (an algorithm's config
  subclasses it, may restrict `ADVANTAGES` and adds its own fields).
* `RolloutAlgorithm`: an `LMAlgorithm` with the phases above but `init` and `learn`, and
  held-out pass@k (`evaluate`, `finish`).
* Pure helpers: `select_groups` (dynamic sampling), `stall_counters`.

Host state. Between updates (what checkpoints save) it is JSON: the prompt cursor
`{"seed", "num_agents", "batches"}` and `stalled`, each agent's count of updates in a row
with no learning signal. Inside an update, `prepare` adds the drawn prompts under
`"rollout"` and `process` removes them again, so nothing of an update outlives it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from jaxrl import config as cfg
from jaxrl import prng, tasks
from jaxrl.algorithms import partial_rollouts, process_rewards
from jaxrl.algorithms.lm_common import (
    LMAlgorithm,
    LMConfig,
    TokenMean,
    agent,
    encode_example,
    split_rows,
)
from jaxrl.config import ConfigError
from jaxrl.lm import Transformer, decode_completions, token_logprobs
from jaxrl.lm import sharding as lm_sharding
from jaxrl.lm.config import SUPPORTED_DTYPES
from jaxrl.lm.continuous import Prefix, generate_continuous
from jaxrl.minibatches import run_epochs
from jaxrl.objectives import (
    ADVANTAGE_ESTIMATORS,
    GROUP_ADVANTAGES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    ROLLOUT_CORRECTIONS,
    aggregate_loss,
    entropy_bonus,
    high_entropy_mask,
    implicit_prm_loss,
    implicit_process_rewards,
    kl_estimate,
    kl_penalised_rewards,
    masked_token_mean,
    overlong_penalty,
    policy_loss,
    rollout_metrics,
    rollout_weights,
    validate_advantage,
    validate_clip,
    validate_rollout_correction,
)
from jaxrl.rewards import blocks as reward_blocks
from jaxrl.tasks.metrics import pass_at_k
from jaxrl.training import mesh as mesh_lib

logger = logging.getLogger(__name__)

RL_SWEEPABLE = ("lr", "weight_decay", "max_grad_norm", "eps_low", "eps_high", "kl_coef", "ent_coef")
"""The sweepable hyperparameters every token-rollout algorithm has (float32 state leaves)."""

STALL_UPDATES = 20
"""Updates in a row with all-equal rewards in every group before a stall is reported."""

PASS_AT_KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The k of the pass@k metrics (those up to `eval_samples`)."""


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


@struct.dataclass
class PolicyState:
    """The training state of a token-rollout policy (GRPO's whole state; PPO-LM adds its
    critic). `RolloutAlgorithm.init_policy` gives its fields."""

    params: Any  # trained parameters: the model's, or the LoRA adapters
    opt_state: Any
    key: jax.Array
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # the sweepable hyperparameters (float32 leaves, `Algorithm.hyperparams`)
    base_params: Any = None  # LoRA: the frozen base, also the reference (not checkpointed)
    ref_params: Any = None  # full fine-tuning with a KL term: the frozen start (not saved)
    # Multi-turn episodes with `reuse_kv_cache`: their KV cache between the turns of an
    # update (a `jaxrl.lm.KVCache`; `lm_multiturn.py`, not checkpointed); else None.
    episode_cache: Any = None
    prm_params: Any = None  # process_reward="implicit": PRIME's implicit PRM pi_phi
    prm_opt_state: Any = None


class RolloutAlgorithm(LMAlgorithm):
    """A token-rollout RL algorithm but its `init` and `learn` (see the module docstring).

    After `__init__`: `reward` (the reward blocks), `prompt_len` (the task's longest
    prompt), `max_new_tokens` (the completion budget), `uses_reference` (a KL term).
    """

    progress_unit = "samples"
    # `episode_cache` (multi-turn episodes' KV cache, rebuilt every update; None on a
    # single-turn task) is never saved: left out, a checkpoint's tree stays the one of
    # runs made before the field existed.
    checkpoint_exclude = ("base_params", "ref_params", "episode_cache")
    batch_field = "num_prompts"
    multi_turn = False  # True for an algorithm that plays the episodes of multi-turn tasks

    def __init__(self, config: LMRLConfig):
        super().__init__(config)
        c = self.config
        if tasks.is_multi_turn(c.task) and not self.multi_turn:
            raise ConfigError(
                f"invalid task={c.task!r}: a multi-turn task, which {type(self).__name__} "
                "would train on first turns only; use the package's make(config), which "
                "returns its multi-turn algorithm (MultiTurnGRPO, MultiTurnPPOLM)"
            )
        self.steps_per_update = c.completions_per_update
        self.num_updates = c.num_updates
        self.batch_rows = c.completions_per_update
        self.sampler_model = None  # the learner's model samples
        if c.sampler_dtype is not None and c.sampler_dtype != self.model.config.dtype:
            sampler_config = dataclasses.replace(self.model.config, dtype=c.sampler_dtype)
            self.sampler_model = Transformer(sampler_config, remat=c.remat)
        self.reward = reward_blocks.make_reward(c.reward, self.task)
        self.prompt_len, answer_len = self._longest_prompt_and_answer()
        self.max_new_tokens = answer_len if c.max_new_tokens is None else c.max_new_tokens
        context = self.model.config.max_position_embeddings
        if self.prompt_len + self.max_new_tokens > context:
            field = "max_new_tokens" if c.max_new_tokens is not None else "context_len"
            raise ConfigError(
                f"invalid {field}={getattr(c, field)!r}: the longest prompt of task "
                f"{c.task!r} ({self.prompt_len} tokens) plus {self.max_new_tokens} new tokens "
                f"exceeds the model's context of {context} tokens"
            )
        if c.overlong_cache >= self.max_new_tokens:
            raise ConfigError(
                f"invalid overlong_cache={c.overlong_cache}: must be < the completion budget "
                f"max_new_tokens={self.max_new_tokens}"
            )
        self.uses_reference = c.kl_coef > 0
        self.implicit_prm = c.process_reward == process_rewards.IMPLICIT
        if not self.implicit_prm:
            # The implicit PRM's fields are None then: left out of checkpoints, whose tree
            # stays the one of runs made before the fields existed (they still resume).
            self.checkpoint_exclude = (*self.checkpoint_exclude, "prm_params", "prm_opt_state")
        self.step_rewards = None  # the host source of step rewards (verifier or PRM)
        if c.process_reward is not None and not self.implicit_prm:
            self.step_rewards = process_rewards.StepRewards(
                c.process_reward,
                self.task,
                self.tokenizer,
                self.prompt_len + self.max_new_tokens + 1,  # a PRM's rows add an eos
                c.dtype,
            )
        # Continuous batching's decode slots (`LMRLConfig.sampler_slots`; None: half the rows).
        self.sampler_slots = c.sampler_slots or max(1, c.sampled_per_update // 2)
        self.clock = SamplingClock()
        self.async_staleness = c.async_staleness
        if self.async_staleness and self.multi_turn:
            raise ConfigError(
                f"invalid async_staleness={c.async_staleness}: 0 on the multi-turn task "
                f"{c.task!r} (asynchronous mode samples single-turn completions; a multi-turn "
                "episode's rounds are not pipelined)"
            )

    def _longest_prompt_and_answer(self) -> tuple[int, int]:
        """Tokens of the task's longest prompt (with bos) and longest answer + eos."""
        prompt_len = answer_len = 0
        for example in self.task.longest_examples():
            prompt, answer = encode_example(self.tokenizer, *example)
            prompt_len, answer_len = max(prompt_len, len(prompt)), max(answer_len, len(answer))
        return prompt_len, answer_len

    # ------------------------------------------------------------------ the policy
    def init_policy(self, key: jax.Array, hparams: Any, params: Any = None) -> dict[str, Any]:
        """The state fields of the policy: from `params` (a warm start, normally an SFT
        run) or from `key`; with a KL term or PRIME's implicit PRM and no LoRA, a frozen
        copy of it as the reference. `{params, opt_state, key, update_step, hparams,
        base_params, ref_params}`, and with the implicit PRM `prm_params` (a copy of the
        start, as PRIME initialises its PRM from the SFT model) and `prm_opt_state`."""
        key, k_model = jax.random.split(key)
        trainable, frozen = self.init_model(k_model, params)
        reference = None
        if (self.uses_reference or self.implicit_prm) and self.lora is None:
            reference = jax.tree.map(jnp.copy, trainable)
        if self.implicit_prm:
            prm = jax.tree.map(jnp.copy, trainable)
            implicit = dict(prm_params=prm, prm_opt_state=self.optimizer(hparams, 1.0).init(prm))
        else:
            implicit = {}
        return dict(
            **implicit,
            params=trainable,
            opt_state=self.optimizer(hparams, 1.0).init(trainable),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
            base_params=frozen,
            ref_params=reference,
        )

    def reference_params(self, state: Any) -> Any:
        """The reference policy's parameters: the LoRA base, or the frozen start."""
        return state.base_params if self.lora is not None else state.ref_params

    # ------------------------------------------------------------------ phase 0: prompts
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, Any]:
        """The prompt cursor (update `k` of agent `i` draws from `(seed, i, k)`) and each
        agent's stall counter (`stall_counters`); with partial rollouts, each agent's
        carried groups (`partial_rollouts.py`)."""
        host = {
            "seed": int(seed),
            "num_agents": int(num_agents),
            "batches": 0,
            "stalled": [0] * int(num_agents),
        }
        if self.config.partial_rollouts:
            host["carry"] = [[] for _ in range(int(num_agents))]
        return host

    @property
    def prompts_per_update(self) -> int:
        """Prompts sampled per update: `num_prompts`, plus the dynamic-sampling spares."""
        return self.config.num_prompts * (1 + self.config.dynamic_sampling)

    def prepare(self, host_state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
        """This update's prompts of every agent, left-padded: `{"tokens", "mask"}`, each
        (agents, prompts_per_update, prompt_len). The drawn examples go to `process`
        in the host state's `rollout`."""
        if self.config.partial_rollouts:
            return self.prepare_partial(host_state)
        examples, host_state = self.draw_examples(host_state)
        padded = [
            self.prompt_tokens(agent_examples, self.prompt_len) for agent_examples in examples
        ]
        inputs = {
            "tokens": np.stack([t for t, _ in padded]),
            "mask": np.stack([m for _, m in padded]),
        }
        return inputs, {**host_state, "rollout": {"examples": examples}}

    def draw_examples(
        self, host_state: dict[str, Any], counts: Sequence[int] | None = None
    ) -> tuple[list[list[tasks.Example]], dict]:
        """`prompts_per_update` (or agent `i`'s `counts[i]`) training examples of every
        agent for this update (agent `i`'s batch `k` from `(seed, i, k)`), and the
        advanced cursor."""
        self.clock.mark_prepared()
        seed, k = host_state["seed"], host_state["batches"]
        if counts is None:
            counts = [self.prompts_per_update] * host_state["num_agents"]
        examples = [
            self.task.sample_train(np.random.default_rng((seed, i, k)), n) if n else []
            for i, n in enumerate(counts)
        ]
        return examples, {**host_state, "batches": k + 1}

    def prepare_partial(self, host_state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
        """`prepare` with partial rollouts: each agent's queue is its carried groups, then
        as many new prompts as make `num_prompts` (drawn as `draw_examples` draws), with
        the sampler's prefix of the carried rows (`partial_rollouts.prefix_arrays`)."""
        c = self.config
        carried = host_state["carry"]
        drawn, host_state = self.draw_examples(
            host_state, [c.num_prompts - len(groups) for groups in carried]
        )
        examples = [
            partial_rollouts.carried_examples(groups) + new
            for groups, new in zip(carried, drawn, strict=True)
        ]
        padded = [
            self.prompt_tokens(agent_examples, self.prompt_len) for agent_examples in examples
        ]
        prefixes = [
            partial_rollouts.prefix_arrays(
                groups, c.num_prompts, c.group_size, self.max_new_tokens, self.tokenizer.pad_id
            )
            for groups in carried
        ]
        inputs = {
            "tokens": np.stack([t for t, _ in padded]),
            "mask": np.stack([m for _, m in padded]),
            **{name: np.stack([p[name] for p in prefixes]) for name in prefixes[0]},
        }
        carried_tokens = int(sum(p["prefix_lengths"].sum() for p in prefixes))
        rollout = {"examples": examples, "carried_tokens": carried_tokens}
        return inputs, {**host_state, "rollout": rollout}

    def continuation(self, prompts: dict[str, jax.Array]) -> dict[str, Any]:
        """The sampler's partial-rollout arguments: `token_budget` and the `prefix` of the
        carried rows (`prepare_partial`'s); none without partial rollouts."""
        if not self.config.partial_rollouts:
            return {}
        prefix = Prefix(
            tokens=prompts["prefix_tokens"],
            logprobs=prompts["prefix_logprobs"],
            lengths=prompts["prefix_lengths"],
            finished=prompts["prefix_finished"],
        )
        return {"token_budget": self.config.rollout_token_budget, "prefix": prefix}

    # ------------------------------------------------------------------ phase 1: sampling
    def collect(self, state: Any, prompts: dict[str, jax.Array]):
        """`group_size` completions per prompt and their scores under the current (and
        reference) policy, for one agent. Rows are prompt-major groups."""
        c = self.config
        key, k_sample = prng.split(state.key)
        params = self.model_params(state.params, state.base_params)
        out = self.rollout_sample(
            params,
            prompts["tokens"],
            prompts["mask"],
            k_sample,
            max_new_tokens=self.max_new_tokens,
            temperature=c.temperature,
            num_samples=c.group_size,
            **self.continuation(prompts),
        )
        tokens, mask = out.sequences()
        collected = {
            "tokens": tokens,
            "mask": mask,
            "completion_mask": out.completion_mask,
            "lengths": out.lengths,
            "finished": out.finished,
            "sampler_logp": out.logprobs,
            **self.rescore(state, params, tokens, mask),
        }
        return state.replace(key=key), jax.tree.map(jax.lax.stop_gradient, collected)

    def rollout_sample(self, params: Any, tokens, mask, key, **kwargs: Any) -> Any:
        """`sample` for training rollouts, by `rollout_model`. Its `logprobs` are the
        behaviour policy's, which `rollout_correction` weighs against the learner's.
        With `continuous_batching`, by `generate_continuous` in `sampler_slots` slots (the
        same completions). Held-out evaluation samples with the learner's model, statically."""
        model, params = self.rollout_model(params)
        if self.config.continuous_batching:
            return generate_continuous(
                model,
                params,
                tokens,
                key,
                num_slots=self.sampler_slots,
                eos_id=self.tokenizer.eos_id,
                prompt_mask=mask,
                pad_id=self.tokenizer.pad_id,
                **kwargs,
            )
        return self.sample(params, tokens, mask, key, model=model, **kwargs)

    def rollout_model(self, params: Any) -> tuple[Transformer, Any]:
        """The model that samples training rollouts and its parameters: the learner's, or
        with `sampler_dtype` a copy in that compute dtype whose parameters are cast to it
        first (as a pod's sampler holds bfloat16 weights; half the bytes read per decoded
        token)."""
        if self.sampler_model is None:
            return self.model, params
        dtype = jnp.dtype(self.config.sampler_dtype)
        cast = jax.tree.map(
            lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params
        )
        return self.sampler_model, cast

    def rescore(self, state: Any, params: Any, tokens, mask) -> dict[str, jax.Array]:
        """The completions of rows `tokens` under the policy `params` that sampled them:
        `old_logp` (the ratio's denominator) and `old_entropy`, unless the loss's forward
        pass provides them (`config.rescores_in_loss`) or the learner does (asynchronous mode:
        `async_learn`), and the reference's `ref_logp`
        when there is a KL term; each (rows, completion length)."""
        scored = {}
        if not self.config.rescores_in_loss and not self.async_staleness:
            logp, entropy = self.completion_logprobs(params, tokens, mask, with_entropy=True)
            scored = {"old_logp": logp, "old_entropy": entropy}
        if self.uses_reference:
            scored["ref_logp"] = self.completion_logprobs(
                self.reference_params(state), tokens, mask
            )
        return scored

    def completion_logprobs(self, params, tokens, mask, with_entropy: bool = False):
        """Log-probs (and entropies) of the completion tokens, (rows, max_new_tokens):
        `token_logprobs` scores positions 1..L-1; the completion starts at prompt_len."""
        out = token_logprobs(
            self.model,
            params,
            tokens,
            attention_mask=mask,
            targets_start=self.prompt_len,
            chunk_size=self.config.logprob_chunk,
            temperature=self.config.temperature,
            return_entropy=with_entropy,
        )
        completion = lambda x: x[:, self.prompt_len - 1 :]  # noqa: E731
        if with_entropy:
            return completion(out[0]), completion(out[1])
        return completion(out)

    # ------------------------------------------------------------------ asynchronous mode
    # The hooks `jaxrl/training/async_stages.py` drives when `async_staleness` >= 1.
    sampler_fields = ("params", "key", "update_step", "hparams", "base_params", "ref_params")
    """The state fields `collect` reads: all the sampler's sub-mesh receives."""

    def make_mesh(self, num_devices: int | None) -> Mesh:
        """The learner's mesh: all `num_devices` devices, or in asynchronous mode the
        ones after the sampler's (`async_devices`)."""
        if not self.async_staleness:
            return super().make_mesh(num_devices)
        return self.mesh_on(self.async_devices(num_devices)[1])

    def sampler_mesh(self, num_devices: int | None) -> Mesh:
        """The sampler's mesh: its `sampler_devices` devices on the `data` axis, so that
        the parameters are replicated and each device samples its share of the rows
        (decoding reads every weight per token: no collectives inside the loop)."""
        devices = self.async_devices(num_devices)[0]
        rows = self.prompts_per_update
        cfg.check(
            rows % len(devices) == 0,
            "sampler_devices",
            len(devices),
            f"a divisor of the {rows} prompts sampled per update (each sampler device "
            "takes an equal share)",
        )
        return lm_sharding.make_mesh(len(devices), 1, 1, devices=devices)

    def async_devices(self, num_devices: int | None) -> tuple[list[Any], list[Any]]:
        """`(sampler devices, learner devices)`: the first `sampler_devices` of the run's
        devices and the rest. A `ConfigError` on one device, or when the sampler would
        take none or all of them."""
        c = self.config
        devices = mesh_lib.select_devices(num_devices)
        if jax.process_count() > 1:
            # Not built yet: XLA's CPU and GPU runtimes cannot copy parameters between
            # the different device sets of two sub-meshes across processes (device_put
            # refuses such a cross-host reshard), so the copy would go through the hosts.
            raise ConfigError(
                f"invalid async_staleness={c.async_staleness}: asynchronous mode runs in "
                f"one process for now (this run has {jax.process_count()}); use "
                "async_staleness=0 for a multi-process run"
            )
        if len(devices) < 2:
            raise ConfigError(
                f"invalid async_staleness={c.async_staleness}: asynchronous mode needs at "
                f"least 2 devices (the sampler's and the learner's), but the run has "
                f"{len(devices)}; use async_staleness=0 on one device"
            )
        cfg.check(
            1 <= c.sampler_devices < len(devices),
            "sampler_devices",
            c.sampler_devices,
            f"in [1, {len(devices) - 1}] (of the run's {len(devices)} devices; the learner "
            "takes the rest)",
        )
        return devices[: c.sampler_devices], devices[c.sampler_devices :]

    def sampler_view(self, state: Any) -> Any:
        """`state` with only the `sampler_fields` (the others None, so neither the
        optimiser state nor a critic is copied to the sampler)."""
        return state.replace(
            **{f.name: None for f in dataclasses.fields(state) if f.name not in self.sampler_fields}
        )

    def async_collect(
        self, view: Any, batch_index: jax.Array, prompts: dict[str, jax.Array]
    ) -> tuple[Any, dict[str, jax.Array]]:
        """`collect` by the sampler (one agent): `(view, collected)`. `view` holds the
        parameters of the version that samples batch `batch_index`, with the key
        `fold_in(view.key, batch_index)`, so that two batches sampled by one version
        draw different completions and a resumed run draws the same ones; it is
        returned unchanged (its frozen fields stay on the sampler)."""
        keyed = view.replace(key=jax.random.fold_in(view.key, batch_index))
        return view, self.collect(keyed, prompts)[1]

    def async_learn(self, state: Any, batch: dict[str, jax.Array]) -> tuple[Any, dict]:
        """`learn` from a batch some versions old (one agent). The ratio's denominator
        is the learner's *current* policy, as AReaL's decoupled objective (Fu et al.
        2025) has it: the proximal policy the clip keeps the update near, re-scored here
        (or by the loss's own pass with `rescores_in_loss`); the sampler's log-probs stay
        the behaviour policy's, which `rollout_correction` weighs against it."""
        if not self.config.rescores_in_loss:
            params = self.model_params(state.params, state.base_params)
            logp, entropy = self.completion_logprobs(
                params, batch["tokens"], batch["mask"], with_entropy=True
            )
            batch = {**batch, "old_logp": logp, "old_entropy": entropy}
        return self.learn(state, jax.tree.map(jax.lax.stop_gradient, batch))

    # ------------------------------------------------------------------ phase 2: rewards
    def process(self, collected: dict[str, np.ndarray], host_state: dict[str, Any]):
        """Rewards, DAPO's overlong penalty and dynamic sampling for every agent; the
        sampling metrics (means over agents)."""
        host_state = dict(host_state)
        rollout = host_state.pop("rollout")
        rows, stats, carried = [], [], []
        for i, agent_examples in enumerate(rollout["examples"]):
            one = {name: value[i] for name, value in collected.items()}
            learned = None
            if self.config.partial_rollouts:  # groups still going wait, carried on
                learned, groups = self.wait_for_groups(one, agent_examples)
                carried.append(groups)
            batch, row_stats = self._score_agent(one, agent_examples, learned)
            rows.append(batch)
            stats.append(row_stats)
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        metrics = {name: [s[name] for s in stats] for name in stats[0]}
        sampled = np.sum(collected["lengths"]) - rollout.get("carried_tokens", 0)
        metrics.update(self.clock.metrics(float(sampled)))
        host_state = self.count_stalls(host_state, metrics["zero_advantage_groups"])
        if self.config.partial_rollouts:
            host_state["carry"] = carried
        return batch, host_state, metrics

    def wait_for_groups(
        self, collected: dict[str, np.ndarray], examples: Sequence[tasks.Example]
    ) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Partial rollouts, one agent: which rows to learn from (those of groups whose
        completions have all ended) and the other groups, to carry to the next update
        with their tokens and behaviour log-probs so far (`partial_rollouts.py`)."""
        g = self.config.group_size
        ended = partial_rollouts.ended_groups(
            collected["lengths"], collected["finished"], g, self.max_new_tokens
        )
        groups = partial_rollouts.carry(
            examples,
            collected["tokens"][:, self.prompt_len :],
            collected["sampler_logp"],
            collected["lengths"],
            collected["finished"],
            ended,
        )
        return np.repeat(ended, g), groups

    def count_stalls(
        self, host_state: dict[str, Any], zero_advantage_groups: Sequence[float]
    ) -> dict[str, Any]:
        """The host state with this update's stall counters (`stall_counters`); a host
        state saved before the counters existed starts them at 0."""
        stalled = host_state.get("stalled") or [0] * len(zero_advantage_groups)
        if self.config.advantage in GROUP_ADVANTAGES:
            stalled = stall_counters(stalled, zero_advantage_groups)
        return {**host_state, "stalled": stalled}

    def _score_agent(
        self,
        collected: dict[str, np.ndarray],
        examples: Sequence[tasks.Example],
        learned: np.ndarray | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """One agent's learning batch and sampling statistics. `learned` (partial
        rollouts): which rows belong to groups that have ended; the others wait, with no
        loss (completion mask cleared, reward 0), and stay out of the statistics."""
        c, g = self.config, self.config.group_size
        texts = decode_completions(
            self.tokenizer, collected["tokens"][:, self.prompt_len :], collected["completion_mask"]
        )
        grouped_examples = [e for e in examples for _ in range(g)]
        scores = reward_blocks.score(self.reward, texts, grouped_examples)
        rewards = scores.rewards.astype(np.float32)
        correct = np.array(
            [
                self.task.is_correct(t, e.answer)
                for t, e in zip(texts, grouped_examples, strict=True)
            ],
            np.float32,
        )
        if c.overlong_cache:
            rewards = rewards + np.asarray(
                overlong_penalty(
                    jnp.asarray(collected["lengths"]), self.max_new_tokens, c.overlong_cache
                )
            )
        keep = select_groups(rewards, g, c.num_prompts)
        rows = (keep[:, None] * g + np.arange(g)).reshape(-1)
        scored = ("sampler_logp", "old_logp", "old_entropy", "ref_logp")
        batch = {
            name: collected[name][rows]
            for name in ("tokens", "mask", "completion_mask", *scored)
            if name in collected
        }
        batch["rewards"] = rewards[rows]
        if self.step_rewards is not None:
            batch.update(
                self.step_rewards.token_rewards(
                    [grouped_examples[r] for r in rows],
                    [texts[r] for r in rows],
                    collected["tokens"][rows, self.prompt_len :],
                    collected["completion_mask"][rows],
                )
            )
        if self.implicit_prm:
            batch["outcome_labels"] = correct[rows]
        if learned is not None:  # partial rollouts: the rows of groups still going wait
            batch["completion_mask"] = batch["completion_mask"] & learned[rows, None]
            batch["rewards"] = np.where(learned[rows], batch["rewards"], np.float32(0))
            rows = rows[learned[rows]]  # the statistics: of the groups learned from
        lengths = collected["lengths"][rows]
        kept_rewards = rewards[rows].reshape(-1, g)
        stats = {
            "reward_mean": _mean(rewards[rows]),
            "reward_std": _mean(rewards[rows], np.std),
            "accuracy": _mean(correct[rows]),
            "response_length_mean": _mean(lengths),
            "response_length_max": _mean(lengths, np.max),
            "clipped_fraction": 1.0 - _mean(collected["finished"][rows]),
            "zero_advantage_groups": _mean(kept_rewards.max(1) == kept_rewards.min(1)),
            "reward_failures": float(sum(scores.failures.values())),
            "sampled_accuracy": float(correct.mean()),
        }
        if learned is not None:
            stats["waiting_groups"] = float(1.0 - len(rows) / len(learned))
        if self.step_rewards is not None:
            ends = batch["step_ends"] > 0
            stats["process_reward_mean"] = float(batch["process_rewards"][ends].mean())
        return batch, stats

    # ------------------------------------------------------------------ phase 3: pieces of learn
    def learning_rewards(self, state: Any, batch: dict[str, jax.Array], token_rewards, cmask):
        """The token rewards the advantages see: `token_rewards`, minus the KL penalty
        when it is in the reward (`kl_in_reward`, from the sampler-time log-probs)."""
        c = self.config
        if not c.kl_in_reward:
            return token_rewards
        return kl_penalised_rewards(
            token_rewards, batch["old_logp"], batch["ref_logp"], cmask, c.kl, state.hparams.kl_coef
        )

    def process_token_rewards(
        self, state: Any, batch: dict[str, jax.Array], cmask: jax.Array
    ) -> tuple[Any, jax.Array, jax.Array, dict[str, jax.Array]]:
        """`(state, process_rewards, step_ends, metrics)` with `process_reward` set: the
        host's step rewards at step-end tokens (verifier or PRM), or PRIME's implicit
        rewards at every completion token (`implicit_prm_rewards`, which trains pi_phi
        and so returns a new state)."""
        if not self.implicit_prm:
            return state, batch["process_rewards"], batch["step_ends"], {}
        state, rewards, metrics = self.implicit_prm_rewards(state, batch, cmask)
        return state, rewards, cmask, metrics

    def implicit_prm_rewards(
        self, state: Any, batch: dict[str, jax.Array], cmask: jax.Array
    ) -> tuple[Any, jax.Array, dict[str, jax.Array]]:
        """PRIME (Cui et al. 2025): one AdamW step of the implicit PRM pi_phi on this
        update's completions with their outcome labels (`implicit_prm_loss`, the mean over
        completions, accumulated over `micro_batches`), then the process reward of every
        token under the updated pi_phi, beta log(pi_phi / pi_ref)
        (`implicit_process_rewards`; pi_ref the frozen start). Returns the state with
        the new pi_phi, the (rows, completion length) rewards and metrics."""
        c = self.config
        tokens, mask = batch["tokens"], batch["mask"]
        ref_logp = batch.get("ref_logp")  # the reference's, when a KL term re-scored it
        if ref_logp is None:
            ref_logp = self.completion_logprobs(self.reference_params(state), tokens, mask)
        ref_logp = jax.lax.stop_gradient(ref_logp)
        rows = tokens.shape[0]
        data = {
            "tokens": tokens,
            "mask": mask,
            "completion_mask": cmask,
            "ref_logp": ref_logp,
            "labels": batch["outcome_labels"],
        }

        def loss(prm_params, context, piece):
            del context
            logp = self.completion_logprobs(prm_params, piece["tokens"], piece["mask"])
            per_row = implicit_prm_loss(
                logp,
                piece["ref_logp"],
                piece["completion_mask"],
                piece["labels"],
                c.implicit_prm_beta,
            )
            value = jnp.sum(per_row) / rows  # the whole batch's mean: slices add up
            return value, {"implicit_prm_loss": value}

        grads, metrics = self.accumulated_gradient(
            loss, state.prm_params, None, data, c.micro_batches
        )
        hp = state.hparams.replace(lr=jnp.asarray(c.implicit_prm_lr, jnp.float32))
        prm_params, prm_opt_state, _ = self.adamw_step(
            state.prm_params, state.prm_opt_state, grads, hp, self.lr_scale(state.update_step)
        )
        logp = jax.lax.stop_gradient(self.completion_logprobs(prm_params, tokens, mask))
        rewards = implicit_process_rewards(logp, ref_logp, cmask, c.implicit_prm_beta)
        metrics["implicit_reward_mean"] = masked_token_mean(rewards, cmask)
        return state.replace(prm_params=prm_params, prm_opt_state=prm_opt_state), rewards, metrics

    def loss_mask(self, batch: dict[str, jax.Array], cmask: jax.Array) -> jax.Array:
        """The tokens the policy loss trains on: every completion token, or with
        `entropy_top_fraction` < 1 the highest-entropy ones, ranked over the whole update
        (before it is split into minibatches)."""
        c = self.config
        if c.entropy_top_fraction >= 1:
            return cmask
        return cmask * high_entropy_mask(batch["old_entropy"], cmask, c.entropy_top_fraction)

    def epochs_of_minibatches(
        self,
        key: jax.Array,
        data: dict[str, jax.Array],
        carry: Any,
        minibatch_step: Callable[[Any, dict[str, jax.Array]], tuple[Any, dict]],
    ) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
        """`num_epochs` passes over the update's rows (`jaxrl.minibatches.run_epochs`),
        each a fresh permutation split into `num_minibatches` strided minibatches
        (`split_rows`, which keeps every device's share of sharded rows),
        `minibatch_step(carry, minibatch) -> (carry, stats)` on each. Returns the
        advanced `key`, the final carry and the stats' means over every step."""
        c = self.config

        def split(x: jax.Array, num_minibatches: int) -> jax.Array:
            return split_rows(self.keep_rows_sharded(x), num_minibatches)

        key, k_epochs = prng.split(key)
        carry, stats = run_epochs(
            minibatch_step,
            carry,
            data,
            k_epochs,
            num_epochs=c.num_epochs,
            num_minibatches=c.num_minibatches,
            split=split,
        )
        return key, carry, {name: value.mean() for name, value in stats.items()}

    def adamw_step(self, params, opt_state, grads, hp, lr_scale):
        """One AdamW step (`optimizer`) on a minibatch's gradient: `(params, opt_state,
        the gradient's global norm before clipping)`."""
        updates, opt_state = self.optimizer(hp, lr_scale).update(grads, opt_state, params)
        grad_norm = optax.tree.norm(grads)
        return optax.apply_updates(params, updates), opt_state, grad_norm

    def policy_objective(self, params, state: Any, batch: dict[str, jax.Array], normaliser):
        """The aggregated policy loss (+ KL and entropy terms) of a slice of rows, and its
        metrics: sums over the slice (`loss`, `logp_gap_sum`) or `TokenMean`s, which
        `accumulated_gradient` adds up over the slices of a minibatch.

        Per token: the policy loss (`policy_loss`, against the sampler-time `old_logp`,
        or the loss's own stop-gradient log-probs with `rescores_in_loss`), plus
        `kl_coef` x the KL estimate to the reference (unless it is in the reward), minus
        `ent_coef` x the entropy; then `aggregate_loss` (`loss_agg`) over `loss_mask`
        with the whole minibatch's `normaliser`."""
        c, hp = self.config, state.hparams
        logp, entropy = self.completion_logprobs(
            self.model_params(params, state.base_params),
            batch["tokens"],
            batch["mask"],
            with_entropy=True,
        )
        cmask = batch["completion_mask"].astype(jnp.float32)
        stats = {}
        old_logp = batch.get("old_logp")
        if old_logp is None:  # `config.rescores_in_loss`: this pass is the re-scoring
            old_logp = jax.lax.stop_gradient(logp)
            stats["logp_gap_sum"] = jnp.sum(jnp.abs(batch["sampler_logp"] - old_logp) * cmask)
        per_token, diagnostics = policy_loss(
            c.policy_loss,
            logp,
            old_logp,
            batch["advantages"],
            batch["loss_mask"],
            eps_low=hp.eps_low,
            eps_high=hp.eps_high,
            dual_clip_c=c.dual_clip_c,
        )
        loss_tokens = jnp.sum(batch["loss_mask"])
        stats.update({k: TokenMean.of(v, loss_tokens) for k, v in diagnostics.items()})
        if self.measures_rollout_mismatch:
            per_token, correction_stats = self.rollout_correction(per_token, old_logp, batch)
            stats.update(correction_stats)
        if self.uses_reference:
            kl = kl_estimate(logp, batch["ref_logp"], c.kl, old_logp)
            stats["kl"] = TokenMean.over(jax.lax.stop_gradient(kl), cmask)
            if not c.kl_in_reward:
                per_token = per_token + hp.kl_coef * kl
        if c.ent_coef > 0:
            per_token = per_token + entropy_bonus(entropy, hp.ent_coef)
        loss = aggregate_loss(
            per_token, batch["loss_mask"], c.loss_agg, normaliser, max_len=self.max_new_tokens
        )
        stats["entropy"] = TokenMean.over(jax.lax.stop_gradient(entropy), cmask)
        stats["loss"] = loss
        return loss, stats

    @property
    def measures_rollout_mismatch(self) -> bool:
        """Whether the loss weighs or measures the sampler-learner mismatch: with a
        `rollout_correction`, or a sampler in another dtype than the learner (whose
        mismatch the `rollout_*` metrics then show even uncorrected)."""
        c = self.config
        return (
            c.rollout_correction != "none"
            or c.async_staleness > 0
            or (c.sampler_dtype is not None and c.sampler_dtype != c.dtype)
        )

    def rollout_correction(
        self, per_token: jax.Array, proximal_logp: jax.Array, batch: dict[str, jax.Array]
    ) -> tuple[jax.Array, dict[str, TokenMean]]:
        """The per-token policy loss weighted by `rollout_correction` (the learner's
        `proximal_logp` against the sampler's `sampler_logp`), and the mismatch metrics
        over the loss's tokens: `rollout_ratio` (mean pi_prox / pi_behav),
        `rollout_corrected` (fraction truncated or masked) and `rollout_kl` (k3 of
        KL(pi_behav || pi_prox)). See jaxrl/objectives/rollout_correction.py."""
        c, mask = self.config, batch["loss_mask"]
        weights, changed = rollout_weights(
            c.rollout_correction,
            proximal_logp,
            batch["sampler_logp"],
            mask,
            c.rollout_is_cap,
            tuple(c.rollout_mask_band),
        )
        measured = rollout_metrics(proximal_logp, batch["sampler_logp"], mask)
        tokens = jnp.sum(mask.astype(jnp.float32))
        stats = {
            "rollout_ratio": TokenMean(jnp.sum(measured["ratio"]), tokens),
            "rollout_kl": TokenMean(jnp.sum(measured["kl"]), tokens),
            "rollout_corrected": TokenMean(jnp.sum(changed), tokens),
        }
        if c.rollout_correction == "none":
            return per_token, stats
        return per_token * weights, stats

    def update_metrics(
        self, batch: dict[str, jax.Array], cmask: jax.Array, metrics: dict, hp: Any, lr_scale
    ) -> dict[str, jax.Array]:
        """`metrics` (the steps' means) completed with the update's `tokens` (completion
        tokens trained on, over all epochs), `lr` and `logp_gap`, the mean |sampler -
        trainer| log-prob gap per completion token (from the re-scoring pass, or from the
        loss's own pass, whose `logp_gap_sum` it consumes)."""
        c = self.config
        metrics = dict(metrics)
        completion_tokens = jnp.sum(cmask)
        if "old_logp" in batch:
            gap = jnp.sum(jnp.abs(batch["sampler_logp"] - batch["old_logp"]) * cmask)
        else:  # rescored by the loss (one optimiser step: the scan's mean is its value)
            gap = metrics.pop("logp_gap_sum")
        metrics.update(
            tokens=completion_tokens * c.num_epochs,
            lr=hp.lr * lr_scale,
            logp_gap=gap / jnp.maximum(completion_tokens, 1.0),
        )
        return metrics

    # ------------------------------------------------------------------ evaluation
    def pass_at_k(self, params: Any, examples: Sequence[tasks.Example], key: jax.Array) -> dict:
        """pass@k (k = 1, 2, 4, ... up to `eval_samples`) and mean response length on
        `examples`, from `eval_samples` completions per prompt at `temperature` (one
        agent's plain model parameters)."""
        c, n = self.config, self.config.eval_samples
        size = max(1, c.eval_batch_size // n)
        correct = np.zeros((len(examples), n), bool)
        lengths = []
        for start in range(0, len(examples), size):
            chunk = list(examples[start : start + size])
            padded = chunk + [chunk[0]] * (size - len(chunk))  # one shape: compiled once
            tokens, mask = self.prompt_tokens(padded, self.prompt_len)
            key, k_sample = jax.random.split(key)
            out = self.sample(
                params,
                tokens,
                mask,
                k_sample,
                max_new_tokens=self.max_new_tokens,
                temperature=c.temperature,
                num_samples=n,
            )
            texts = decode_completions(self.tokenizer, out.tokens, out.completion_mask)
            for row, example in enumerate(chunk):
                correct[start + row] = [
                    self.task.is_correct(texts[row * n + j], example.answer) for j in range(n)
                ]
            lengths.extend(np.asarray(out.lengths).reshape(size, n)[: len(chunk)].ravel())
        result = {
            f"pass@{k}": float(np.mean(pass_at_k(np.full(len(examples), n), correct.sum(1), k)))
            for k in PASS_AT_KS
            if k <= n
        }
        result["response_length_mean"] = float(np.mean(lengths))
        return result

    def held_out_metrics(
        self, params: Any, examples: Sequence[tasks.Example], key: jax.Array
    ) -> dict[str, float]:
        """What `evaluate` and `finish` report for one agent's plain model parameters:
        `pass_at_k` (multi-turn GRPO: held-out episodes)."""
        return self.pass_at_k(params, examples, key)

    def evaluate(self, state: Any, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`jaxrl eval`: `held_out_metrics` (pass@k) per agent on the first `num_episodes`
        held-out prompts (0: all)."""
        examples = self.task.eval_examples()
        examples = examples[:num_episodes] if num_episodes else examples
        per_agent = [
            self.held_out_metrics(self.merged_params(agent(state, i)), examples, key)
            for i in range(int(state.update_step.shape[0]))
        ]
        return {name: np.asarray([r[name] for r in per_agent]) for name in per_agent[0]}

    @property
    def eval_seed(self) -> int:
        """pass@k samples completions: `finish` seeds them with `split_seed`."""
        return self.config.split_seed

    def finish(self, state: Any, run_dir: Any) -> dict[str, Any]:
        """Held-out pass@k (`held_out_metrics`) after training (mean over agents) and of
        the starting model (`_before`, when training started from a `model`), and agent
        0's exported model."""
        examples = self.task.eval_examples()
        key = jax.random.key(self.eval_seed)
        after = self.evaluate(state, key, 0)
        summary: dict[str, Any] = {f"{name}_after": float(np.mean(v)) for name, v in after.items()}
        summary["pass@1_after_per_agent"] = after["pass@1"].tolist()
        start = self.load_params()
        if start is not None:
            before = self.held_out_metrics(start, examples, key)
            summary.update({f"{name}_before": value for name, value in before.items()})
        summary.update(self.export_agent0(state, run_dir))
        return summary


class SamplingClock:
    """Wall-clock marks of the host phases, for the timing metrics only.

    `sample_seconds` (from `prepare` to the end of `process`: sampling and rewards),
    `sample_tokens_per_second`, and `learn_seconds` (the previous update's learning
    phase, from its `process` to this `prepare`). These describe the machine, not the
    run: no result depends on them, so they are not part of the checkpointed host state
    (a time mark of another process would be meaningless after a resume). A resumed
    run's first update has no `learn_seconds`, as a run's first update has none.
    """

    def __init__(self) -> None:
        self.prepared: float | None = None
        self.processed: float | None = None

    def mark_prepared(self) -> None:
        self.prepared = time.perf_counter()

    def metrics(self, sampled_tokens: float) -> dict[str, float]:
        """The timing metrics of the update whose `process` calls this."""
        now = time.perf_counter()
        prepared = now if self.prepared is None else self.prepared
        processed = prepared if self.processed is None else self.processed
        sample_seconds = now - prepared
        metrics = {
            "sample_seconds": sample_seconds,
            "sample_tokens_per_second": sampled_tokens / max(sample_seconds, 1e-9),
        }
        if prepared - processed > 0:  # the previous update's learning phase
            metrics["learn_seconds"] = prepared - processed
        self.processed = time.perf_counter()
        return metrics


def stall_counters(stalled: Sequence[int], zero_advantage_groups: Sequence[float]) -> list[int]:
    """Each agent's updates in a row in which every group had equal rewards (`stalled`,
    advanced by this update's `zero_advantage_groups` fractions); logs a warning, naming
    the agent, when a count reaches `STALL_UPDATES`.

    Under a group estimator all advantages are then zero, so the policy no longer
    changes (collapsed or saturated). Too high a learning rate drives the policy there on
    addition (reward 0, most completions running to the length budget), and it does not
    recover (benchmarks/notes, "GRPO learning-rate sensitivity").
    The counters live in the host state, so a resumed run warns when the uninterrupted
    one would.
    """
    counts = []
    for i, (count, fraction) in enumerate(zip(stalled, zero_advantage_groups, strict=True)):
        count = count + 1 if fraction >= 1.0 else 0
        if count == STALL_UPDATES:
            logger.warning(
                "agent %d: every group has had equal rewards for %d updates in a row, so "
                "all advantages are zero and the policy no longer changes (collapsed or "
                "saturated); if the reward is stuck at its minimum, a lower lr or "
                "--dynamic-sampling may help",
                i,
                STALL_UPDATES,
            )
        counts.append(count)
    return counts


def select_groups(rewards: np.ndarray, group_size: int, num_prompts: int) -> np.ndarray:
    """Indices of the `num_prompts` groups to train on, out of `len(rewards) // group_size`.

    Without spares (as many groups as `num_prompts`) all of them, in order. With spares
    (DAPO's dynamic sampling, Yu et al. 2025, sec. 3.2), groups whose rewards are not all
    equal come first, in sampling order, then all-equal ones to fill the batch when the
    spares ran out (they have zero advantage under the group estimators, so they change
    nothing but the count: the `zero_advantage_groups` metric shows how often).
    """
    grouped = np.asarray(rewards).reshape(-1, group_size)
    if len(grouped) == num_prompts:
        return np.arange(num_prompts)
    informative = grouped.max(1) != grouped.min(1)
    order = np.concatenate([np.flatnonzero(informative), np.flatnonzero(~informative)])
    return np.sort(order[:num_prompts])


def _mean(x: np.ndarray, reduce: Callable[[np.ndarray], Any] = np.mean) -> float:
    """`reduce(x)` as a float; NaN for no values (partial rollouts: no group ended yet)."""
    return float(reduce(x)) if np.size(x) else float("nan")
