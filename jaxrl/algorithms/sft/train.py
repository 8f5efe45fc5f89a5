"""SFT as a staged algorithm (`jaxrl/training/contract.py`): data on the host, learning jitted.

One update:
  * `process(None, host_state)` (host Python) draws `batch_size` examples per agent from
    the task, encodes `prompt + answer + eos` and right-pads every row to `max_len`, so
    the batch has one fixed shape and `learn` compiles once. Agent `i`'s batch `k` is
    drawn from `numpy.random.default_rng((seed, i, k))`: the host state is just
    `{"seed", "num_agents", "batches"}`, and a resumed run redraws exactly the batches
    an uninterrupted one would have seen.
  * `learn(state, batch)` (jitted, one agent) takes one optimiser step on the masked
    token cross-entropy (`losses.py`), and updates the running training accuracy
    (greedy exact match of the batch, free under teacher forcing). Once it reaches
    `stop_at_train_accuracy` the agent is stopped: later `learn` calls leave its
    parameters and optimiser state as they are, and `early_stop` ends the run when
    every agent has stopped.

State: `params` are the trained parameters (the whole model, or the LoRA adapters),
`base_params` the frozen base model under LoRA (None otherwise; not checkpointed: `init`
rebuilds it from the same key or warm-start parameters on resume).

After training, `finish` measures held-out exact match with greedy decoding and writes
agent 0's model, LoRA merged, to `run_dir/model/` in Hugging Face layout (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json), which `from_pretrained` and
`SFTConfig(model=...)` load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import tasks
from jaxrl.algorithms.lm_common import (
    MODEL_DIR,
    LMAlgorithm,
    TokenMean,
    agent,
    encode_example,
    encode_rows,
    lr_schedule,
)
from jaxrl.lm import token_logprobs

from . import losses
from .config import SWEEPABLE, SFTConfig

__all__ = ["MODEL_DIR", "SFT", "SFTState", "encode_example", "lr_schedule", "make"]


@struct.dataclass
class SFTState:
    params: Any  # trained parameters: the model's, or the LoRA adapters
    opt_state: Any
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # SFTHyperParams (float32 leaves, sweepable)
    train_accuracy: jax.Array  # float32, EMA of the batches' greedy exact match
    stopped_at: jax.Array  # int32, the update after which the agent stopped; -1: training
    base_params: Any = None  # LoRA: the frozen base model (not checkpointed)


class SFT(LMAlgorithm):
    """Supervised fine-tuning of a causal LM on a task (see the module docstring)."""

    name = "sft"
    trains_on = "task"
    headline_metric = "train_accuracy"
    eval_metric = "eval_accuracy"
    sweepable = SWEEPABLE
    progress_unit = "samples"
    checkpoint_exclude = ("base_params",)

    def __init__(self, config: SFTConfig):
        super().__init__(config)
        c = self.config
        self.steps_per_update = c.batch_size
        self.num_updates = c.num_updates
        self.batch_rows = c.batch_size
        self.max_len, self.prompt_len, self.answer_len = self._check_lengths()

    # ------------------------------------------------------------------ construction
    def _check_lengths(self) -> tuple[int, int, int]:
        """(row length, longest prompt, longest answer + eos) in tokens; raises
        `ConfigError` when an example does not fit `max_len` or the model's context."""
        c = self.config
        return self.fit_lengths(self.task.longest_examples(), c.max_len, f"task {c.task!r}")

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> SFTState:
        """Initial state: the model from `params` (a warm start) or from `key`; LoRA adapters
        from `key` on top of it. Pure; the same key and params give the same state."""
        trainable, frozen = self.init_model(key, params)
        return SFTState(
            params=trainable,
            opt_state=self.optimizer(hparams, 1.0).init(trainable),
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
            train_accuracy=jnp.zeros((), jnp.float32),
            stopped_at=jnp.full((), -1, jnp.int32),
            base_params=frozen,
        )

    # ------------------------------------------------------------------ staged step
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, int]:
        """The data loader's position: batch `k` of agent `i` is drawn from `(seed, i, k)`."""
        return {"seed": int(seed), "num_agents": int(num_agents), "batches": 0}

    def process(
        self, collected: Any, host_state: dict[str, int]
    ) -> tuple[dict[str, np.ndarray], dict[str, int], dict[str, Any]]:
        """The next batch of every agent, `{"tokens", "mask", "loss_mask"}` each
        (agents, batch_size, max_len); `collected` is unused (SFT collects nothing)."""
        del collected
        seed, k = host_state["seed"], host_state["batches"]
        rows = [
            self.encode_batch(
                self.task.sample_train(np.random.default_rng((seed, i, k)), self.config.batch_size)
            )
            for i in range(host_state["num_agents"])
        ]
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        return batch, {**host_state, "batches": k + 1}, {}

    def encode_batch(self, examples: Sequence[tasks.Example]) -> dict[str, np.ndarray]:
        """Right-padded `prompt + answer + eos` rows: `tokens` int32, `mask` (real tokens)
        and `loss_mask` (answer and eos tokens) bool, each (len(examples), max_len)."""
        return encode_rows(self.tokenizer, examples, self.max_len)

    def learn(self, state: SFTState, batch: dict[str, jax.Array]) -> tuple[SFTState, dict]:
        """One optimiser step on the batch's masked token cross-entropy (one agent); a
        stopped agent computes the same metrics and keeps its parameters."""
        c, hp = self.config, state.hparams
        lr_scale = self.lr_scale(state.update_step)
        num_tokens = jnp.sum(batch["loss_mask"][:, 1:].astype(jnp.float32))
        grads, stats = self.accumulated_gradient(
            self._loss, state.params, (state, num_tokens), batch
        )
        optimizer = self.optimizer(hp, lr_scale)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        stopped = state.stopped_at >= 0
        params, opt_state = jax.tree.map(
            lambda old, new: jnp.where(stopped, old, new),
            (state.params, state.opt_state),
            (optax.apply_updates(state.params, updates), opt_state),
        )
        exact_match = stats["exact_match"]
        train_accuracy = optax.incremental_update(
            exact_match, state.train_accuracy, 1.0 - c.train_accuracy_decay
        )
        update_step = state.update_step + 1
        if c.stop_at_train_accuracy is not None:
            reached = ~stopped & (train_accuracy >= c.stop_at_train_accuracy)
            stopped_at = jnp.where(reached, update_step, state.stopped_at)
        else:
            stopped_at = state.stopped_at
        state = state.replace(
            params=params,
            opt_state=opt_state,
            update_step=update_step,
            train_accuracy=jnp.where(stopped, state.train_accuracy, train_accuracy),
            stopped_at=stopped_at,
        )
        metrics = {
            **stats,
            "train_accuracy": state.train_accuracy,
            "stopped": (stopped_at >= 0).astype(jnp.float32),
            "tokens": num_tokens,
            "grad_norm": optax.tree.norm(grads),
            "lr": hp.lr * lr_scale,
        }
        return state, metrics

    def _loss(self, trainable: Any, context: tuple[SFTState, jax.Array], rows: Any):
        """This slice of rows' share of the batch's token-mean cross-entropy (its summed
        token NLL over the whole batch's `num_tokens`, so slices add up), and its
        statistics as `TokenMean`s: `exact_match` (greedy, free under teacher forcing)
        and `answer_prob` per row, `entropy` per loss token."""
        state, num_tokens = context
        loss_mask = rows["loss_mask"][:, 1:]  # token_logprobs scores tokens 1..L-1
        logprobs, entropy, top = token_logprobs(
            self.model,
            self.model_params(trainable, state.base_params),
            rows["tokens"],
            attention_mask=rows["mask"],
            chunk_size=self.config.logprob_chunk,
            return_entropy=True,
            return_top=True,
        )
        slice_loss, slice_tokens = losses.masked_token_nll(logprobs, loss_mask)
        loss = slice_loss * slice_tokens / jnp.maximum(num_tokens, 1.0)
        num_rows = loss_mask.shape[0]
        return loss, {
            "loss": loss,
            "exact_match": TokenMean.of(
                losses.greedy_exact_match(logprobs, top, loss_mask), num_rows
            ),
            "answer_prob": TokenMean.of(losses.answer_probability(logprobs, loss_mask), num_rows),
            "entropy": TokenMean.over(jax.lax.stop_gradient(entropy), loss_mask),
        }

    @property
    def early_stop_reason(self) -> str:
        return (
            "every agent reached stop_at_train_accuracy="
            f"{self.config.stop_at_train_accuracy:g} (pass --stop-at-train-accuracy none "
            "to train the whole budget)"
        )

    def early_stop(self, state: SFTState) -> tuple[SFTState, bool]:
        """Ends the run once every agent has stopped (see `stop_at_train_accuracy`)."""
        if self.config.stop_at_train_accuracy is None:
            return state, False
        return state, bool(np.all(np.asarray(state.stopped_at) >= 0))

    # ------------------------------------------------------------------ evaluation
    def eval_accuracy(self, params: Any, examples: Sequence[tasks.Example]) -> float:
        """Held-out greedy exact match of one agent's plain model parameters."""
        return self.accuracy(params, examples, self.prompt_len, self.answer_len)

    def evaluate(self, state: SFTState, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """Held-out greedy exact match per agent on the first `num_episodes` held-out
        prompts (all when None or 0). `key` is unused: greedy decoding is deterministic."""
        del key
        examples = self.task.eval_examples()
        examples = examples[:num_episodes] if num_episodes else examples
        return {"eval_accuracy": np.asarray(self._per_agent_accuracy(state, examples))}

    def finish(self, state: SFTState, run_dir: Any) -> dict[str, Any]:
        """Held-out accuracy (mean and per agent) and, with a run directory, agent 0's
        model exported to `run_dir/model/` (LoRA merged; Hugging Face layout)."""
        per_agent = self._per_agent_accuracy(state, self.task.eval_examples())
        stopped_at = np.asarray(state.stopped_at).reshape(-1)
        summary: dict[str, Any] = {
            "eval_accuracy": float(np.mean(per_agent)),
            "eval_accuracy_per_agent": per_agent,
            "train_accuracy_per_agent": np.asarray(state.train_accuracy).reshape(-1).tolist(),
            # Samples each agent trained on (None: it never stopped, so the whole budget).
            "stopped_at_samples_per_agent": [
                int(u) * self.config.batch_size if u >= 0 else None for u in stopped_at
            ],
        }
        summary.update(self.export_agent0(state, run_dir))
        return summary

    def _per_agent_accuracy(
        self, state: SFTState, examples: Sequence[tasks.Example]
    ) -> list[float]:
        num_agents = int(state.update_step.shape[0])
        return [
            self.eval_accuracy(self.merged_params(agent(state, i)), examples)
            for i in range(num_agents)
        ]


def make(config: SFTConfig) -> SFT:
    """The SFT algorithm for `config` (validated; bad input raises `ConfigError`)."""
    return SFT(config)
