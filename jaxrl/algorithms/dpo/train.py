"""Preference optimisation as a staged algorithm (`jaxrl/training/contract.py`).

One update:
  * `process(None, host_state)` (host Python) takes batch `k` of `batch_size` pairs of
    every agent from the pair source (`jaxrl/tasks/preferences.py`: a JSONL file walked
    in epochs, or synthetic pairs from a task), a pure function of `(seed, agent, k)`,
    so the host state is a counter and a resumed run sees the same pairs. Each pair is
    two right-padded rows, `prompt + chosen + eos` and `prompt + rejected + eos`, with
    the completion and its eos as the scored tokens: arrays (agents, batch_size, 2,
    max_len), so a batch has one shape and `learn` compiles once.
  * `learn(state, batch)` (jitted, one agent) takes one AdamW step on the mean per-pair
    loss (`losses.py`), its gradient summed over `micro_batches` slices that each
    divide by the whole batch's pair count: accumulation gives the same update.

Sequence scores: for the policy losses, each completion's summed log-probability
(`token_logprobs`, vocabulary in chunks; `losses.sequence_logprobs`), and for DPO and
IPO the same under the reference policy, computed in `learn` without gradient. For
`bt`, the model has a value head and a completion's reward is the head's output at its
last token (the eos), the hidden state that has read the whole prompt and completion.

State: `params` (the model, or LoRA adapters; for `bt` under LoRA the adapters and the
value head, which LoRA does not cover), `base_params` (LoRA's frozen base, which is
also DPO's reference) and `ref_params` (a frozen copy of the starting model: DPO and
IPO without LoRA). Both frozen fields are rebuilt by `init` and never checkpointed;
SimPO and the reward model keep no reference.

After training, `finish` measures the held-out pairs' preference loss, reward accuracy
(ties count half) and margin and, for pairs made from a task (an answer checker) and a
policy loss, held-out greedy exact match (pass@1 at temperature 0; before training
too when the run started from a `model`), and exports agent 0's model like SFT.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import tasks
from jaxrl.algorithms.lm_common import LMAlgorithm, TokenMean, agent, encode_rows
from jaxrl.lm import Transformer, apply_lora, merge_lora, token_logprobs
from jaxrl.tasks import preferences

from . import losses
from .config import SWEEPABLE, DPOConfig

HEAD = "value_head"  # the reward model's head (a top-level module of the model params)


@struct.dataclass
class DPOState:
    params: Any  # trained parameters: the model's, or the LoRA adapters (+ value head)
    opt_state: Any
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # DPOHyperParams (float32 leaves, sweepable)
    base_params: Any = None  # LoRA: the frozen base, also the reference (not checkpointed)
    ref_params: Any = None  # DPO/IPO without LoRA: the frozen start (not checkpointed)


class DPO(LMAlgorithm):
    """Preference optimisation of a causal LM, or a reward model (see the module docstring)."""

    name = "dpo"
    trains_on = "task"
    headline_metric = "reward_accuracy"
    eval_metric = "reward_accuracy"
    sweepable = SWEEPABLE
    progress_unit = "samples"
    checkpoint_exclude = ("base_params", "ref_params")

    @classmethod
    def target_name(cls, config: DPOConfig) -> str:
        """Runs on a preference file are named after it (its stem), others after the task."""
        return pathlib.Path(config.data).stem if config.data else config.task

    def __init__(self, config: DPOConfig):
        super().__init__(config)
        c = self.config
        self.reward_model = c.preference_loss == "bt"
        if self.reward_model and not self.model.config.value_head:
            value_config = dataclasses.replace(self.model.config, value_head=True)
            self.model = Transformer(value_config, remat=c.remat)
        self.pairs = preferences.make_pairs(self.task, c.split_seed)
        self.pairs.eval_pairs()  # made now: an answer that cannot be corrupted fails early
        self.batch_rows = self.steps_per_update = c.batch_size
        if c.epochs > 0:
            self.num_updates = max(1, int(c.epochs * self.pairs.num_train) // c.batch_size)
        else:
            self.num_updates = c.total_steps // c.batch_size
        longest = [
            tasks.Example(p.prompt, completion)
            for p in self.pairs.longest_pairs()
            for completion in (p.chosen, p.rejected)
        ]
        source = f"data={c.data!r}" if c.data else f"task {c.task!r}"
        self.max_len, self.prompt_len, self.answer_len = self.fit_lengths(
            longest, c.max_len, source
        )
        # Held-out exact match needs an answer checker and a policy (not a reward model).
        self.checks_answers = self.pairs.task is not None and not self.reward_model
        self._score = jax.jit(self.pair_losses)  # held-out scoring, compiled once per shape

    def make_task(self, config: DPOConfig) -> tasks.Task:
        """A `data` file of pairs (a `Task` of its prompts and chosen completions), else
        the config's task."""
        if config.data is None:
            return super().make_task(config)
        return preferences.PairFile(config.data, config.num_eval, config.split_seed)

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> DPOState:
        """The model from `params` (a warm start, e.g. an SFT run) or from `key`; LoRA
        adapters from `key` on top of it (a reward model also trains its value head);
        for DPO and IPO without LoRA, a frozen copy of the start as the reference."""
        trainable, frozen = self.init_model(key, params)
        if self.reward_model and self.lora is not None:
            trainable = {"adapters": trainable, HEAD: frozen["params"][HEAD]}
        reference = None
        if self.config.uses_reference and self.lora is None:
            reference = jax.tree.map(jnp.copy, trainable)
        return DPOState(
            params=trainable,
            opt_state=self.optimizer(hparams, 1.0).init(trainable),
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
            base_params=frozen,
            ref_params=reference,
        )

    def model_params(self, trainable: Any, base: Any) -> Any:
        """The parameters the model runs with; a LoRA reward model's value head is trained
        beside the adapters (outside `apply_lora`, which stops the base's gradients)."""
        if not (self.reward_model and self.lora is not None):
            return super().model_params(trainable, base)
        adapted = apply_lora(base, trainable["adapters"], self.lora)
        return {"params": {**adapted["params"], HEAD: trainable[HEAD]}}

    def merged_params(self, state: Any) -> Any:
        """One agent's plain model parameters (LoRA merged; a reward model's trained head)."""
        if not (self.reward_model and self.lora is not None):
            return super().merged_params(state)
        merged = merge_lora(state.base_params, state.params["adapters"], self.lora)
        return {"params": {**merged["params"], HEAD: state.params[HEAD]}}

    def _reference_params(self, state: DPOState) -> Any:
        """The reference policy: the LoRA base, or the frozen start."""
        return state.base_params if self.lora is not None else state.ref_params

    # ------------------------------------------------------------------ staged step
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, int]:
        """The data position: batch `k` of agent `i` is the pair source's `(seed, i, k)`."""
        return {"seed": int(seed), "num_agents": int(num_agents), "batches": 0}

    def process(
        self, collected: Any, host_state: dict[str, int]
    ) -> tuple[dict[str, np.ndarray], dict[str, int], dict[str, Any]]:
        """The next batch of every agent, `{"tokens", "mask", "loss_mask"}` each
        (agents, batch_size, 2, max_len); `collected` is unused (nothing is sampled)."""
        del collected
        seed, k, size = host_state["seed"], host_state["batches"], self.config.batch_size
        rows = [
            self.encode_pairs(self.pairs.train_batch(seed, i, k, size))
            for i in range(host_state["num_agents"])
        ]
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        return batch, {**host_state, "batches": k + 1}, {}

    def encode_pairs(self, pairs: Sequence[preferences.Pair]) -> dict[str, np.ndarray]:
        """Right-padded rows of each pair's chosen (index 0) and rejected (1) completion:
        `tokens`, `mask`, `loss_mask` (completion and eos), each (len(pairs), 2, max_len)."""
        examples = [tasks.Example(p.prompt, completion) for p in pairs for completion in p[1:]]
        rows = encode_rows(self.tokenizer, examples, self.max_len)
        return {name: x.reshape(len(pairs), 2, self.max_len) for name, x in rows.items()}

    def learn(self, state: DPOState, batch: dict[str, jax.Array]) -> tuple[DPOState, dict]:
        """One optimiser step on the batch's mean preference loss (one agent), the
        gradient accumulated over `micro_batches` slices of pairs."""
        c, hp = self.config, state.hparams
        lr_scale = self.lr_scale(state.update_step)
        grads, metrics = self.accumulated_gradient(
            self._loss, state.params, state, batch, c.micro_batches
        )
        updates, opt_state = self.optimizer(hp, lr_scale).update(
            grads, state.opt_state, state.params
        )
        state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            update_step=state.update_step + 1,
        )
        metrics.update(grad_norm=optax.tree.norm(grads), lr=hp.lr * lr_scale)
        return state, metrics

    def _loss(self, trainable: Any, state: DPOState, piece: dict[str, jax.Array]):
        """This slice's share of the batch's mean loss (its per-pair losses summed and
        divided by `batch_size`), and its statistics: the loss and token count as sums,
        the rest as means over the slice's pairs (`TokenMean`), which add up over the
        slices of a batch."""
        per_pair, stats = self.pair_losses(trainable, state, piece)
        loss = jnp.sum(per_pair) / self.config.batch_size
        pairs = per_pair.shape[0]
        stats = {
            name: value if name == "tokens" else TokenMean.of(value, pairs)
            for name, value in stats.items()
        }
        return loss, {**stats, "loss": loss}

    def pair_losses(
        self, trainable: Any, state: DPOState, pairs: dict[str, jax.Array]
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Per-pair losses (pairs,) of the configured objective and the means of the
        rewards, their accuracy and margin (and the policy's summed log-probs) over
        `pairs` ((pairs, 2, max_len) arrays, chosen then rejected)."""
        c, hp = self.config, state.hparams
        tokens, mask = _rows(pairs["tokens"]), _rows(pairs["mask"])
        loss_mask = _rows(pairs["loss_mask"])
        stats = {"tokens": jnp.sum(loss_mask.astype(jnp.float32))}
        params = self.model_params(trainable, state.base_params)
        if self.reward_model:
            rewards = _pair_view(self.last_token_values(params, tokens, mask, loss_mask))
            per_pair, metrics = losses.bradley_terry_loss(
                rewards[:, 0], rewards[:, 1], hp.label_smoothing
            )
            return per_pair, {**stats, **metrics}
        logp, length = self._sequence_logprobs(params, tokens, mask, loss_mask)
        reference: dict[str, jax.Array] = {}
        if c.uses_reference:
            ref_logp, _ = self._sequence_logprobs(
                self._reference_params(state), tokens, mask, loss_mask
            )
            ref_logp = jax.lax.stop_gradient(ref_logp)
            reference = {"ref_chosen": ref_logp[:, 0], "ref_rejected": ref_logp[:, 1]}
        per_pair, metrics = losses.preference_loss(
            c.preference_loss,
            logp[:, 0],
            logp[:, 1],
            beta=hp.beta,
            chosen_length=length[:, 0],
            rejected_length=length[:, 1],
            gamma=hp.gamma,
            label_smoothing=hp.label_smoothing,
            **reference,
        )
        # RPO's term; with nll_weight 0 it adds exact zeros (kept in the program so that
        # a sweep over nll_weight compiles once).
        nll = losses.chosen_nll(logp[:, 0], length[:, 0])
        per_pair = per_pair + hp.nll_weight * nll
        stats["nll_chosen"] = jnp.mean(jax.lax.stop_gradient(nll))
        stats["logp_chosen"] = jnp.mean(jax.lax.stop_gradient(logp[:, 0]))
        stats["logp_rejected"] = jnp.mean(jax.lax.stop_gradient(logp[:, 1]))
        return per_pair, {**stats, **metrics}

    def _sequence_logprobs(self, params, tokens, mask, loss_mask):
        """Summed completion log-probs and lengths, each (pairs, 2)."""
        logp = token_logprobs(
            self.model, params, tokens, attention_mask=mask, chunk_size=self.config.logprob_chunk
        )
        total, length = losses.sequence_logprobs(logp, loss_mask[:, 1:])  # scores 1..L-1
        return _pair_view(total), _pair_view(length)

    def last_token_values(self, params: Any, tokens, mask, loss_mask) -> jax.Array:
        """The value head's output at each row's last completion token (its eos): the
        reward of the whole prompt and completion, (rows,)."""
        _, values = self.model.apply(params, tokens, attention_mask=mask, return_hidden=True)
        positions = jnp.arange(tokens.shape[1])
        last = jnp.max(jnp.where(loss_mask, positions, 0), axis=1)
        return jnp.take_along_axis(values, last[:, None], axis=1)[:, 0]

    # ------------------------------------------------------------------ evaluation
    def held_out(self, state: DPOState, pairs: Sequence[preferences.Pair]) -> dict[str, float]:
        """Mean preference loss, reward accuracy (ties count half), reward margin and
        rewards over `pairs` for one agent's state, in chunks of `eval_batch_size` pairs."""
        size = self.config.eval_batch_size
        totals: dict[str, float] = {}
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            batch = jax.tree.map(jnp.asarray, self.encode_pairs(chunk))
            per_pair, stats = self._score(state.params, state, batch)
            stats = {**stats, "loss": jnp.mean(per_pair)}
            for name in EVAL_METRICS:  # means weighted by the chunk's size
                totals[name] = totals.get(name, 0.0) + float(stats[name]) * len(chunk)
        return {name: value / len(pairs) for name, value in totals.items()}

    def held_out_size(self) -> int:
        """The held-out preference pairs."""
        return len(self.pairs.eval_pairs())

    def evaluate(self, state: DPOState, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`jaxrl eval`: held-out preference metrics per agent on the first `num_episodes`
        held-out pairs (all when None or 0); `key` is unused (nothing is sampled)."""
        del key
        pairs = self.pairs.eval_pairs()
        pairs = pairs[:num_episodes] if num_episodes else pairs
        per_agent = [
            self.held_out(agent(state, i), pairs) for i in range(int(state.update_step.shape[0]))
        ]
        return {name: np.asarray([r[name] for r in per_agent]) for name in EVAL_METRICS}

    def finish(self, state: DPOState, run_dir: Any) -> dict[str, Any]:
        """Held-out preference metrics (mean and per agent); for a policy trained on a
        task's pairs, held-out greedy exact match after (and, from a `model`, before)
        training; agent 0's model exported to `run_dir/model/`."""
        held = self.evaluate(state, jax.random.key(0), 0)
        summary: dict[str, Any] = {f"eval_{k}": float(np.mean(v)) for k, v in held.items()}
        summary["eval_reward_accuracy_per_agent"] = held["reward_accuracy"].tolist()
        if self.checks_answers:
            examples = self.pairs.task.eval_examples()
            per_agent = [
                self.accuracy(
                    self.merged_params(agent(state, i)), examples, self.prompt_len, self.answer_len
                )
                for i in range(int(state.update_step.shape[0]))
            ]
            summary["eval_accuracy"] = float(np.mean(per_agent))
            summary["eval_accuracy_per_agent"] = per_agent
            start = self.load_params()
            if start is not None:
                summary["eval_accuracy_before"] = self.accuracy(
                    start, examples, self.prompt_len, self.answer_len
                )
        summary.update(self.export_agent0(state, run_dir))
        return summary


# Held-out statistics `held_out` reports (the first is `jaxrl eval`'s headline).
EVAL_METRICS = ("reward_accuracy", "reward_margin", "reward_chosen", "reward_rejected", "loss")


def _rows(x: jax.Array) -> jax.Array:
    """(pairs, 2, L) -> (2 * pairs, L): chosen and rejected rows of a pair adjacent."""
    return x.reshape(-1, x.shape[-1])


def _pair_view(x: jax.Array) -> jax.Array:
    """(2 * pairs,) -> (pairs, 2): column 0 the chosen completions, 1 the rejected."""
    return x.reshape(-1, 2)


def make(config: DPOConfig) -> DPO:
    """The preference-optimisation algorithm for `config` (validated; bad input raises
    `ConfigError`)."""
    return DPO(config)
