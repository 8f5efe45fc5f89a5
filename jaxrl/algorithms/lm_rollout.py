"""What the token-rollout RL algorithms share: GRPO, multi-turn GRPO and PPO with a critic.

Each of them is a staged algorithm (`jaxrl/training/contract.py`) whose update is
`prepare` (host prompts) -> `collect` (jitted sampling) -> `process` (host rewards) ->
`learn` (jitted, each algorithm's own: `grpo/learning.py`, `ppo_lm/train.py`).
`RolloutAlgorithm` here is an `LMAlgorithm` with all of that but `init` and `learn`;
it builds what the phases read (`__init__`) and the policy's state (`init_policy`,
`PolicyState`), and takes each phase from one module:

* `lm_rollout_config.py`: `LMRLConfig`, every shared field with its docstring (the
  `--help` text) and `validate`.
* `lm_rollout_sampling.py`: phases 0 and 1, `prepare` (the prompt cursor) and `collect`
  (sampling by the rollout model of `sampler_dtype`, re-scoring); `SamplingClock`.
* `lm_rollout_rewards.py`: phase 2, `process` (reward blocks, the overlong penalty,
  dynamic sampling's `select_groups`, step rewards, `stall_counters`).
* `lm_rollout_learning.py`: phase 3's pieces, `policy_objective`, `rollout_correction`,
  `epochs_of_minibatches`, `adamw_step`, PRIME's `implicit_prm_rewards`,
  `update_metrics`.
* `lm_rollout_async.py`: asynchronous mode's hooks, the sampler's and the learner's
  sub-meshes, `sampler_view`, `async_collect`, `async_learn` (the driver's side is
  `jaxrl/training/async_stages.py`).
* `partial_rollouts.py`: partial rollouts, the carried groups on the host and the hooks
  `prepare_partial`, `continuation`, `wait_for_groups`.
* `lm_rollout_eval.py`: held-out pass@k, `evaluate` and `finish`.

Each of those modules holds one mixin class of `RolloutAlgorithm` (plain methods on
`self`, no state of their own) and says in its docstring which attributes it reads.
The formulas themselves are pure functions of `jaxrl.objectives`; multi-turn episodes
are `lm_multiturn.py`, process rewards `process_rewards.py`.

Host state. Between updates (what checkpoints save) it is JSON: the prompt cursor
`{"seed", "num_agents", "batches"}` and `stalled`, each agent's count of updates in a row
with no learning signal (and `carry` with partial rollouts). Inside an update, `prepare`
adds the drawn prompts under `"rollout"` and `process` removes them again, so nothing of
an update outlives it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import tasks
from jaxrl.algorithms import process_rewards
from jaxrl.algorithms.lm_common import LMAlgorithm, encode_example
from jaxrl.algorithms.lm_rollout_async import AsyncRollout
from jaxrl.algorithms.lm_rollout_config import RL_SWEEPABLE, LMRLConfig
from jaxrl.algorithms.lm_rollout_eval import PASS_AT_KS, RolloutEvaluation
from jaxrl.algorithms.lm_rollout_learning import RolloutLearning
from jaxrl.algorithms.lm_rollout_rewards import (
    STALL_UPDATES,
    RolloutRewards,
    select_groups,
    stall_counters,
)
from jaxrl.algorithms.lm_rollout_sampling import RolloutSampling, SamplingClock
from jaxrl.algorithms.partial_rollouts import PartialRollouts
from jaxrl.config import ConfigError
from jaxrl.lm import Transformer
from jaxrl.rewards import blocks as reward_blocks

# Re-exported so that imports from this module keep working; a constant is read where
# it is defined (patch `lm_rollout_rewards.STALL_UPDATES`, not this copy).
__all__ = [
    "PASS_AT_KS",
    "RL_SWEEPABLE",
    "STALL_UPDATES",
    "LMRLConfig",
    "PolicyState",
    "RolloutAlgorithm",
    "SamplingClock",
    "select_groups",
    "stall_counters",
]


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


class RolloutAlgorithm(
    RolloutSampling,
    PartialRollouts,
    RolloutRewards,
    RolloutLearning,
    AsyncRollout,
    RolloutEvaluation,
    LMAlgorithm,
):
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
