"""GRPO and its family as a staged algorithm (`jaxrl/training/contract.py`).

One update is four phases of the shared driver's staged step:

  * `prepare(host_state)` (host): draws `num_prompts` training prompts per agent from
    the task (plus `dynamic_sampling * num_prompts` spares), agent `i`'s batch `k` from
    `numpy.random.default_rng((seed, i, k))`, so the host state is a cursor and a
    resumed run draws the same prompts; left-pads them to one shape.
  * `collect(state, prompts)` (jitted): samples `group_size` completions per prompt with
    the KV cache (`jaxrl.lm.generate`), and re-scores them with the same parameters
    (`token_logprobs`, vocabulary in chunks): the trainer's log-probs (the importance
    ratio's denominator), token entropies, and the reference policy's log-probs when
    there is a KL term. With one optimiser step per update the loss's own forward pass
    is that re-scoring, and collect skips it (`GRPOConfig.fuse_rescoring`). The sampler's
    own log-probs are kept too: their gap to the trainer's is a metric (they differ only
    by numerics here, but not with a separate inference engine).
  * `process(collected, host_state)` (host): decodes, scores with the reward blocks
    (`jaxrl/rewards`; failures count and score 0), applies DAPO's overlong penalty and
    dynamic sampling, and logs the sampling metrics.
  * `learn(state, batch)` (jitted): advantages, then `num_epochs` x `num_minibatches`
    AdamW steps of the policy loss, each minibatch's gradient accumulated over
    `micro_batches` with the minibatch's own normaliser (`losses.loss_normaliser`), so
    accumulation does not change the update.

The estimators and losses are in `losses.py`, each a pure function selected by name.
State: `params` (the model, or LoRA adapters), `base_params` (the frozen base under
LoRA, which is also the reference policy) and `ref_params` (a frozen copy of the
starting model when `kl_coef > 0` without LoRA); both frozen fields are rebuilt by `init`
and never checkpointed.

On a multi-turn task (`jaxrl/tasks/multiturn.py`), `make` returns `MultiTurnGRPO`
(`multiturn.py`): `collect` samples one model turn, a host `respond` answers it with the
task's feedback, for several rounds per update; each episode is one row whose
environment tokens are out of the loss mask.

After training, `finish` measures pass@k on held-out prompts (unbiased estimator from
`eval_samples` completions at `temperature`) for the starting model and the trained one,
and exports agent 0's model like SFT.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import prng, tasks
from jaxrl.algorithms.lm_common import (
    LMAlgorithm,
    TokenMean,
    agent,
    encode_example,
    split_rows,
)
from jaxrl.config import ConfigError
from jaxrl.lm import decode_completions, generate, token_logprobs
from jaxrl.rewards import blocks as reward_blocks
from jaxrl.tasks.metrics import pass_at_k

from . import losses
from .config import SWEEPABLE, GRPOConfig

logger = logging.getLogger(__name__)
# Updates in a row with all-equal rewards in every group before `_warn_if_stalled` warns.
STALL_UPDATES = 20


@struct.dataclass
class GRPOState:
    params: Any  # trained parameters: the model's, or the LoRA adapters
    opt_state: Any
    key: jax.Array
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # GRPOHyperParams (float32 leaves, sweepable)
    base_params: Any = None  # LoRA: the frozen base, also the reference (not checkpointed)
    ref_params: Any = None  # full fine-tuning with a KL term: the frozen start (not saved)


class GRPO(LMAlgorithm):
    """Token-rollout RL of a causal LM on a task (see the module docstring)."""

    name = "grpo"
    trains_on = "task"
    headline_metric = "accuracy"
    eval_metric = "pass@1"
    sweepable = SWEEPABLE
    progress_unit = "samples"
    checkpoint_exclude = ("base_params", "ref_params")
    batch_field = "num_prompts"
    multi_turn = False  # MultiTurnGRPO (multiturn.py) plays the episodes of multi-turn tasks

    def __init__(self, config: GRPOConfig):
        super().__init__(config)
        c = self.config
        if tasks.is_multi_turn(c.task) and not self.multi_turn:
            raise ConfigError(
                f"invalid task={c.task!r}: a multi-turn task, which {type(self).__name__} "
                "would train on first turns only; use grpo.make(config) (MultiTurnGRPO)"
            )
        self.steps_per_update = c.completions_per_update
        self.num_updates = c.num_updates
        self.batch_rows = c.completions_per_update
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
        self._pending: list[list[tasks.Example]] = []  # prompts of the current update
        self._clock: dict[str, float] = {}
        self._stalled: list[int] = []  # per agent: updates in a row without any advantage

    def _longest_prompt_and_answer(self) -> tuple[int, int]:
        """Tokens of the task's longest prompt (with bos) and longest answer + eos."""
        prompt_len = answer_len = 0
        for example in self.task.longest_examples():
            prompt, answer = encode_example(self.tokenizer, *example)
            prompt_len, answer_len = max(prompt_len, len(prompt)), max(answer_len, len(answer))
        return prompt_len, answer_len

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> GRPOState:
        """The policy from `params` (a warm start, normally an SFT run) or from `key`;
        with a KL term and no LoRA, a frozen copy of it as the reference."""
        key, k_model = jax.random.split(key)
        trainable, frozen = self.init_model(k_model, params)
        reference = None
        if self.uses_reference and self.lora is None:
            reference = jax.tree.map(jnp.copy, trainable)
        return GRPOState(
            params=trainable,
            opt_state=self.optimizer(hparams, 1.0).init(trainable),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
            base_params=frozen,
            ref_params=reference,
        )

    def _reference_params(self, state: GRPOState) -> Any:
        """The reference policy's parameters: the LoRA base, or the frozen start."""
        return state.base_params if self.lora is not None else state.ref_params

    # ------------------------------------------------------------------ phase 0: prompts
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, int]:
        """The prompt cursor: update `k` of agent `i` draws from `(seed, i, k)`."""
        return {"seed": int(seed), "num_agents": int(num_agents), "batches": 0}

    @property
    def prompts_per_update(self) -> int:
        """Prompts sampled per update: `num_prompts`, plus the dynamic-sampling spares."""
        return self.config.num_prompts * (1 + self.config.dynamic_sampling)

    def prepare(self, host_state: dict[str, int]) -> tuple[dict[str, np.ndarray], dict]:
        """This update's prompts of every agent, left-padded: `{"tokens", "mask"}`, each
        (agents, prompts_per_update, prompt_len)."""
        self._pending, host_state = self._draw_examples(host_state)
        padded = [self.prompt_tokens(examples, self.prompt_len) for examples in self._pending]
        inputs = {
            "tokens": np.stack([t for t, _ in padded]),
            "mask": np.stack([m for _, m in padded]),
        }
        return inputs, host_state

    def _draw_examples(self, host_state: dict[str, int]) -> tuple[list[list[tasks.Example]], dict]:
        """`prompts_per_update` training examples of every agent for this update (agent
        `i`'s batch `k` from `(seed, i, k)`), and the advanced cursor."""
        self._clock["prepare"] = time.perf_counter()
        seed, k = host_state["seed"], host_state["batches"]
        examples = [
            self.task.sample_train(np.random.default_rng((seed, i, k)), self.prompts_per_update)
            for i in range(host_state["num_agents"])
        ]
        return examples, {**host_state, "batches": k + 1}

    # ------------------------------------------------------------------ phase 1: sampling
    def collect(self, state: GRPOState, prompts: dict[str, jax.Array]):
        """`group_size` completions per prompt and their scores under the current (and
        reference) policy, for one agent. Rows are prompt-major groups."""
        c = self.config
        key, k_sample = prng.split(state.key)
        params = self.model_params(state.params, state.base_params)
        out = generate(
            self.model,
            params,
            prompts["tokens"],
            k_sample,
            max_new_tokens=self.max_new_tokens,
            temperature=c.temperature,
            eos_id=self.tokenizer.eos_id,
            prompt_mask=prompts["mask"],
            num_samples=c.group_size,
            pad_id=self.tokenizer.pad_id,
        )
        tokens, mask = out.sequences()
        collected = {
            "tokens": tokens,
            "mask": mask,
            "completion_mask": out.completion_mask,
            "lengths": out.lengths,
            "finished": out.finished,
            "sampler_logp": out.logprobs,
            **self._rescore(state, params, tokens, mask),
        }
        return state.replace(key=key), jax.tree.map(jax.lax.stop_gradient, collected)

    def _rescore(self, state: GRPOState, params, tokens, mask) -> dict[str, jax.Array]:
        """The completions of rows `tokens` under the policy `params` that sampled them:
        `old_logp` (the ratio's denominator) and `old_entropy`, unless the loss's forward
        pass provides them (`config.rescores_in_loss`), and the reference's `ref_logp`
        when there is a KL term; each (rows, completion length)."""
        scored = {}
        if not self.config.rescores_in_loss:
            logp, entropy = self._completion_logprobs(params, tokens, mask, with_entropy=True)
            scored = {"old_logp": logp, "old_entropy": entropy}
        if self.uses_reference:
            scored["ref_logp"] = self._completion_logprobs(
                self._reference_params(state), tokens, mask
            )
        return scored

    def _completion_logprobs(self, params, tokens, mask, with_entropy: bool = False):
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

    # ------------------------------------------------------------------ phase 2: rewards
    def process(self, collected: dict[str, np.ndarray], host_state: dict[str, int]):
        """Rewards, DAPO's overlong penalty and dynamic sampling for every agent; the
        sampling metrics (means over agents)."""
        rows, stats = [], []
        for i, examples in enumerate(self._pending):
            one = {name: value[i] for name, value in collected.items()}
            batch, row_stats = self._score_agent(one, examples)
            rows.append(batch)
            stats.append(row_stats)
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        metrics = {name: [s[name] for s in stats] for name in stats[0]}
        metrics.update(self._timing_metrics(float(np.sum(collected["lengths"]))))
        self._warn_if_stalled(metrics["zero_advantage_groups"])
        return batch, host_state, metrics

    def _warn_if_stalled(self, zero_advantage_groups: Sequence[float]) -> None:
        """Log a warning (once per stall, naming the agent) when, under a group estimator,
        every group of an agent has had equal rewards for `STALL_UPDATES` updates in a
        row: all advantages are zero, so the policy no longer changes. Measured on
        addition: a learning rate 1.5-2.5x the default (3e-4, 5e-4) drove the policy
        there (reward 0, most completions running to the length budget), and it did not
        recover (benchmarks/README.md, "GRPO learning-rate sensitivity")."""
        if self.config.advantage not in losses.GROUP_ADVANTAGES:
            return
        if len(self._stalled) != len(zero_advantage_groups):
            self._stalled = [0] * len(zero_advantage_groups)
        for i, fraction in enumerate(zero_advantage_groups):
            self._stalled[i] = self._stalled[i] + 1 if fraction >= 1.0 else 0
            if self._stalled[i] == STALL_UPDATES:
                logger.warning(
                    "agent %d: every group has had equal rewards for %d updates in a row, so "
                    "all advantages are zero and the policy no longer changes (collapsed or "
                    "saturated); if the reward is stuck at its minimum, a lower lr or "
                    "--dynamic-sampling may help",
                    i,
                    STALL_UPDATES,
                )

    def _timing_metrics(self, sampled_tokens: float) -> dict[str, float]:
        """Seconds from `prepare` to now (sampling and rewards), the sampling rate, and
        the previous update's learning phase (from its `process` to this `prepare`)."""
        now = time.perf_counter()
        sample_seconds = now - self._clock.get("prepare", now)
        learn_seconds = self._clock.get("prepare", now) - self._clock.get("processed", now)
        metrics = {
            "sample_seconds": sample_seconds,
            "sample_tokens_per_second": sampled_tokens / max(sample_seconds, 1e-9),
        }
        if learn_seconds > 0:  # the previous update's learning phase
            metrics["learn_seconds"] = learn_seconds
        self._clock["processed"] = time.perf_counter()
        return metrics

    def _score_agent(
        self, collected: dict[str, np.ndarray], examples: Sequence[tasks.Example]
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
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
                losses.overlong_penalty(
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
        lengths = collected["lengths"][rows]
        kept_rewards = rewards[rows].reshape(-1, g)
        stats = {
            "reward_mean": float(rewards[rows].mean()),
            "reward_std": float(rewards[rows].std()),
            "accuracy": float(correct[rows].mean()),
            "response_length_mean": float(lengths.mean()),
            "response_length_max": float(lengths.max()),
            "clipped_fraction": float(1.0 - collected["finished"][rows].mean()),
            "zero_advantage_groups": float(np.mean(kept_rewards.max(1) == kept_rewards.min(1))),
            "reward_failures": float(sum(scores.failures.values())),
            "sampled_accuracy": float(correct.mean()),
        }
        return batch, stats

    # ------------------------------------------------------------------ phase 3: learning
    def learn(self, state: GRPOState, batch: dict[str, jax.Array]) -> tuple[GRPOState, dict]:
        """Advantages, then `num_epochs` x `num_minibatches` optimiser steps (one agent).

        The loop is written once; an algorithm that trains more than the policy (PPO-LM's
        critic, `jaxrl/algorithms/ppo_lm`) overrides the hooks below it: `_advantages`
        (the learning data), `_learner`/`_with_learner` (what is trained),
        `_optimizer_step`, `_normaliser` and `_loss`."""
        c, hp = self.config, state.hparams
        cmask = batch["completion_mask"].astype(jnp.float32)
        token_rewards = self._token_rewards(batch, cmask)
        if c.kl_in_reward:
            token_rewards = losses.kl_penalised_rewards(
                token_rewards, batch["old_logp"], batch["ref_logp"], cmask, c.kl, hp.kl_coef
            )
        fields, metrics = self._advantages(state, batch, token_rewards, cmask)
        loss_mask = cmask
        if c.entropy_top_fraction < 1:  # ranked over the whole update, before minibatching
            loss_mask = cmask * losses.high_entropy_mask(
                batch["old_entropy"], cmask, c.entropy_top_fraction
            )
        data = {**batch, **fields, "loss_mask": loss_mask}
        lr_scale = self.lr_scale(state.update_step)
        rows = c.completions_per_update

        def minibatch_step(carry, minibatch):
            learner, opt_state = carry
            grads, stats = self._accumulated_grads(learner, state, minibatch)
            learner, opt_state, step_stats = self._optimizer_step(
                learner, opt_state, grads, hp, lr_scale
            )
            return (learner, opt_state), {**stats, **step_stats}

        def epoch(carry, key):
            order = jax.random.permutation(key, rows)
            shuffled = self.keep_rows_sharded(jax.tree.map(lambda x: x[order], data))
            minibatches = jax.tree.map(lambda x: split_rows(x, c.num_minibatches), shuffled)
            return jax.lax.scan(minibatch_step, carry, minibatches)

        key, k_epochs = prng.split(state.key)
        (learner, opt_state), stats = jax.lax.scan(
            epoch, self._learner(state), prng.split(k_epochs, c.num_epochs)
        )
        metrics.update({name: value.mean() for name, value in stats.items()})
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
        state = self._with_learner(state, learner, opt_state)
        return state.replace(key=key, update_step=state.update_step + 1), metrics

    def _token_rewards(self, batch: dict[str, jax.Array], cmask: jax.Array) -> jax.Array:
        """(rows, completion length) rewards per token: the outcome reward on each row's
        last completion token (multi-turn GRPO puts each turn's reward on its turn)."""
        return losses.outcome_token_rewards(batch["rewards"], cmask)

    def _advantages(
        self, state: GRPOState, batch: dict[str, jax.Array], token_rewards, cmask
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """`(fields, metrics)`: the per-row arrays the loss needs besides the batch (here
        `advantages`, from the rewards alone) and metrics of the whole update."""
        del state, batch
        advantages, _ = losses.compute_advantages(
            self.config.advantage, token_rewards, cmask, group_size=self.config.group_size
        )
        return {"advantages": advantages}, {}

    def _learner(self, state: GRPOState) -> tuple[Any, Any]:
        """`(trained pytree, its optimiser state)`, the carry of the epochs: the policy."""
        return state.params, state.opt_state

    def _with_learner(self, state: GRPOState, learner: Any, opt_state: Any) -> GRPOState:
        """`state` holding the trained pytree and optimiser state after the epochs."""
        return state.replace(params=learner, opt_state=opt_state)

    def _optimizer_step(self, learner, opt_state, grads, hp, lr_scale):
        """One AdamW step on a minibatch's gradient: `(learner, opt_state, metrics)`."""
        updates, opt_state = self.optimizer(hp, lr_scale).update(grads, opt_state, learner)
        grad_norm = optax.tree.norm(grads)
        return optax.apply_updates(learner, updates), opt_state, {"grad_norm": grad_norm}

    def _normaliser(self, minibatch: dict[str, jax.Array]) -> Any:
        """The loss denominator(s) of a minibatch, from all of its rows, so every
        micro-batch's `_loss` divides by the same (`losses.loss_normaliser`)."""
        return losses.loss_normaliser(minibatch["loss_mask"], self.config.loss_agg)

    def _accumulated_grads(self, params, state: GRPOState, minibatch: dict[str, jax.Array]):
        """Gradient and metrics of one minibatch's loss, over `micro_batches` slices (and
        the devices' shards) of its rows, each slice's loss divided by the whole
        minibatch's normaliser (`LMAlgorithm.accumulated_gradient`)."""
        return self.accumulated_gradient(
            lambda p, context, rows: self._loss(p, context[0], rows, context[1]),
            params,
            (state, self._normaliser(minibatch)),
            minibatch,
            self.config.micro_batches,
        )

    def _loss(self, params, state: GRPOState, batch: dict[str, jax.Array], normaliser):
        """The aggregated policy loss (+ KL and entropy terms) of a slice of rows, and its
        metrics: sums over the slice (`loss`, `logp_gap_sum`) or `TokenMean`s, which
        `_accumulated_grads` adds up over the slices of a minibatch."""
        c, hp = self.config, state.hparams
        logp, entropy = self._completion_logprobs(
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
        per_token, diagnostics = losses.policy_loss(
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
        if self.uses_reference:
            kl = losses.kl_estimate(logp, batch["ref_logp"], c.kl, old_logp)
            stats["kl"] = TokenMean.over(jax.lax.stop_gradient(kl), cmask)
            if not c.kl_in_reward:
                per_token = per_token + hp.kl_coef * kl
        if c.ent_coef > 0:
            per_token = per_token + losses.entropy_bonus(entropy, hp.ent_coef)
        loss = losses.aggregate_loss(
            per_token, batch["loss_mask"], c.loss_agg, normaliser, max_len=self.max_new_tokens
        )
        stats["entropy"] = TokenMean.over(jax.lax.stop_gradient(entropy), cmask)
        stats["loss"] = loss
        return loss, stats

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
            out = generate(
                self.model,
                params,
                tokens,
                k_sample,
                max_new_tokens=self.max_new_tokens,
                temperature=c.temperature,
                eos_id=self.tokenizer.eos_id,
                prompt_mask=mask,
                num_samples=n,
                pad_id=self.tokenizer.pad_id,
            )
            texts = decode_completions(self.tokenizer, out.tokens, out.completion_mask)
            for row, example in enumerate(chunk):
                correct[start + row] = [
                    self.task.is_correct(texts[row * n + j], example.answer) for j in range(n)
                ]
            lengths.extend(np.asarray(out.lengths).reshape(size, n)[: len(chunk)].ravel())
        ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= n]
        result = {
            f"pass@{k}": float(np.mean(pass_at_k(np.full(len(examples), n), correct.sum(1), k)))
            for k in ks
        }
        result["response_length_mean"] = float(np.mean(lengths))
        return result

    def held_out_metrics(
        self, params: Any, examples: Sequence[tasks.Example], key: jax.Array
    ) -> dict[str, float]:
        """What `evaluate` and `finish` report for one agent's plain model parameters:
        `pass_at_k` (multi-turn GRPO: held-out episodes)."""
        return self.pass_at_k(params, examples, key)

    def evaluate(self, state: GRPOState, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`jaxrl eval`: `held_out_metrics` (pass@k) per agent on the first `num_episodes`
        held-out prompts (0: all)."""
        examples = self.task.eval_examples()
        examples = examples[:num_episodes] if num_episodes else examples
        per_agent = [
            self.held_out_metrics(self.merged_params(agent(state, i)), examples, key)
            for i in range(int(state.update_step.shape[0]))
        ]
        return {name: np.asarray([r[name] for r in per_agent]) for name in per_agent[0]}

    def finish(self, state: GRPOState, run_dir: Any) -> dict[str, Any]:
        """Held-out pass@k (`held_out_metrics`) after training (mean over agents) and of
        the starting model (`_before`, when training started from a `model`), and agent
        0's exported model."""
        examples = self.task.eval_examples()
        key = jax.random.key(self.config.split_seed)
        after = self.evaluate(state, key, 0)
        summary: dict[str, Any] = {f"{name}_after": float(np.mean(v)) for name, v in after.items()}
        summary["pass@1_after_per_agent"] = after["pass@1"].tolist()
        start = self.load_params()
        if start is not None:
            before = self.held_out_metrics(start, examples, key)
            summary.update({f"{name}_before": value for name, value in before.items()})
        summary.update(self.export_agent0(state, run_dir))
        return summary


def make(config: GRPOConfig) -> GRPO:
    """The GRPO-family algorithm for `config` (validated; bad input raises `ConfigError`);
    a multi-turn task (`jaxrl/tasks/multiturn.py`) gets `MultiTurnGRPO`."""
    if tasks.is_multi_turn(config.task):
        from .multiturn import MultiTurnGRPO

        return MultiTurnGRPO(config)
    return GRPO(config)


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
