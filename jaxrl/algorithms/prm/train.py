"""A process reward model as a staged algorithm (`jaxrl/training/contract.py`).

One update:
  * `process(None, host_state)` (host Python) draws `batch_size` training prompts of
    every agent from the step task and a labelled solution of each (correct, or with a
    corrupted step: `StepTask.labelled_solutions`), agent `i`'s batch `k` from
    `numpy.random.default_rng((seed, i, k))`, so the host state is a counter and a
    resumed run sees the same solutions. Rows are `prompt + solution + eos`,
    right-padded to one length, with a label at every step's end token
    (`jaxrl.algorithms.process_rewards.encode_step_rows`).
  * `learn(state, batch)` (jitted, one agent) takes one AdamW step on the mean binary
    cross-entropy over the batch's labelled steps (`losses.step_bce`), its gradient
    accumulated over `micro_batches` slices that each divide by the whole batch's step
    count.

The model is the LM with a scalar value head (`value_head=True`, zero-initialised, so
every step starts at probability 0.5); its output at a step's end token is the logit of
"the steps so far are correct". The LM head is kept (the exported model stays a valid
causal LM) but unused.

Evaluation (`evaluate`, `finish`): held-out step accuracy (prediction z > 0 against the
label) and solution accuracy (every step of a solution right) on labelled solutions of
the task's held-out prompts (`StepTask.prm_eval_examples`, fixed by `split_seed`);
`finish` exports agent 0's model to `run_dir/model/`, which `--process-reward RUN_DIR`
of GRPO and PPO-LM loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import tasks
from jaxrl.algorithms.lm_common import LMAlgorithm, TokenMean, agent
from jaxrl.algorithms.process_rewards import encode_step_rows, step_task
from jaxrl.lm import Transformer

from . import losses
from .config import SWEEPABLE, PRMConfig


@struct.dataclass
class PRMState:
    params: Any  # the model with its value head
    opt_state: Any
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # the sweepable hyperparameters (float32 leaves)
    base_params: Any = None  # always None: a PRM trains without LoRA


class PRM(LMAlgorithm):
    """A process reward model trained on a step task (see the module docstring)."""

    name = "prm"
    Config = PRMConfig
    trains_on = "task"
    headline_metric = "step_accuracy"
    eval_metric = "step_accuracy"
    sweepable = SWEEPABLE
    progress_unit = "samples"
    checkpoint_exclude = ("base_params",)

    def __init__(self, config: PRMConfig):
        super().__init__(config)
        c = self.config
        self.step_task = step_task(self.task, "task", c.task)
        if not self.model.config.value_head:
            value_config = dataclasses.replace(self.model.config, value_head=True)
            self.model = Transformer(value_config, remat=c.remat)
        self.steps_per_update = self.batch_rows = c.batch_size
        self.num_updates = c.num_updates
        self.max_len, _, _ = self.fit_lengths(
            self.task.longest_examples(), c.max_len, f"task {c.task!r}"
        )
        self._eval_examples = self.step_task.prm_eval_examples(c.corrupt_fraction)
        self._scores = jax.jit(self.step_logits)

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PRMState:
        """The model and its head from `params` (a warm start: an SFT run, whose missing
        head starts at zero) or from `key`."""
        trainable, _ = self.init_model(key, params)
        return PRMState(
            params=trainable,
            opt_state=self.optimizer(hparams, 1.0).init(trainable),
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    # ------------------------------------------------------------------ staged step
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, int]:
        """The data position: batch `k` of agent `i` is drawn from `(seed, i, k)`."""
        return {"seed": int(seed), "num_agents": int(num_agents), "batches": 0}

    def process(
        self, collected: Any, host_state: dict[str, int]
    ) -> tuple[dict[str, np.ndarray], dict[str, int], dict[str, Any]]:
        """The next batch of every agent, `{"tokens", "mask", "label_mask", "labels"}` each
        (agents, batch_size, max_len); `collected` is unused (nothing is sampled)."""
        del collected
        seed, k, c = host_state["seed"], host_state["batches"], self.config
        rows = []
        for i in range(host_state["num_agents"]):
            rng = np.random.default_rng((seed, i, k))
            examples = self.task.sample_train(rng, c.batch_size)
            solutions = self.step_task.labelled_solutions(rng, examples, c.corrupt_fraction)
            rows.append(self.encode(solutions))
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        return batch, {**host_state, "batches": k + 1}, {}

    def encode(self, solutions: Sequence[tasks.StepExample]) -> dict[str, np.ndarray]:
        """Rows of labelled solutions (`encode_step_rows`), `max_len` long."""
        return encode_step_rows(self.tokenizer, solutions, self.step_task.separator, self.max_len)

    def learn(self, state: PRMState, batch: dict[str, jax.Array]) -> tuple[PRMState, dict]:
        """One AdamW step on the batch's mean step cross-entropy (one agent)."""
        c, hp = self.config, state.hparams
        lr_scale = self.lr_scale(state.update_step)
        num_steps = jnp.sum(batch["label_mask"].astype(jnp.float32))
        grads, metrics = self.accumulated_gradient(
            self._loss, state.params, num_steps, batch, c.micro_batches
        )
        updates, opt_state = self.optimizer(hp, lr_scale).update(
            grads, state.opt_state, state.params
        )
        state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            update_step=state.update_step + 1,
        )
        metrics.update(grad_norm=optax.tree.norm(grads), lr=hp.lr * lr_scale, steps=num_steps)
        return state, metrics

    def _loss(self, params: Any, num_steps: jax.Array, rows: dict[str, jax.Array]):
        """This slice's share of the batch's mean step loss (its summed loss over the
        whole batch's `num_steps`, so slices add up) and its statistics as `TokenMean`s."""
        logits = self.step_logits(params, rows["tokens"], rows["mask"])
        labels, label_mask = rows["labels"], rows["label_mask"]
        loss = losses.step_bce(logits, labels, label_mask) / jnp.maximum(num_steps, 1.0)
        steps = jnp.sum(label_mask.astype(jnp.float32))
        return loss, {
            "loss": loss,
            "step_accuracy": TokenMean(losses.step_accuracy(logits, labels, label_mask), steps),
            "positive_fraction": TokenMean.over(labels, label_mask),
        }

    def step_logits(self, params: Any, tokens: jax.Array, mask: jax.Array) -> jax.Array:
        """The head's output at every token, (rows, length) float32."""
        _, values = self.model.apply(params, tokens, attention_mask=mask, return_hidden=True)
        return values

    # ------------------------------------------------------------------ evaluation
    def held_out(self, params: Any, solutions: Sequence[tasks.StepExample]) -> dict[str, float]:
        """Step accuracy, solution accuracy and mean loss over `solutions` for one agent's
        parameters, in chunks of `eval_batch_size` rows (the last one padded with copies of
        its first row, which are not counted: one compiled shape)."""
        size = self.config.eval_batch_size
        right = steps = whole = loss = 0.0
        for start in range(0, len(solutions), size):
            chunk = list(solutions[start : start + size])
            rows = self.encode(chunk + [chunk[0]] * (size - len(chunk)))
            real = np.arange(size) < len(chunk)
            logits = np.asarray(self._scores(params, rows["tokens"], rows["mask"]))
            label_mask = rows["label_mask"] & real[:, None]
            labels = rows["labels"]
            right += float(losses.step_accuracy(logits, labels, label_mask))
            steps += float(label_mask.sum())
            whole += float(
                np.sum(np.asarray(losses.solution_accuracy(logits, labels, label_mask))[real])
            )
            loss += float(losses.step_bce(logits, labels, label_mask))
        return {
            "step_accuracy": right / max(steps, 1.0),
            "solution_accuracy": whole / len(solutions),
            "loss": loss / max(steps, 1.0),
        }

    def held_out_size(self) -> int:
        """The held-out labelled solutions."""
        return len(self._eval_examples)

    def evaluate(self, state: PRMState, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`jaxrl eval`: held-out step and solution accuracy per agent on the first
        `num_episodes` held-out solutions (all when 0); `key` is unused (nothing is
        sampled)."""
        del key
        solutions = self._eval_examples[:num_episodes] if num_episodes else self._eval_examples
        per_agent = [
            self.held_out(agent(state, i).params, solutions)
            for i in range(int(state.update_step.shape[0]))
        ]
        return {name: np.asarray([r[name] for r in per_agent]) for name in per_agent[0]}

    def finish(self, state: PRMState, run_dir: Any) -> dict[str, Any]:
        """Held-out step and solution accuracy (mean and per agent), and agent 0's model
        with its head exported to `run_dir/model/`."""
        held = self.evaluate(state, jax.random.key(0), 0)
        summary: dict[str, Any] = {f"eval_{k}": float(np.mean(v)) for k, v in held.items()}
        summary["eval_step_accuracy_per_agent"] = held["step_accuracy"].tolist()
        summary.update(self.export_agent0(state, run_dir))
        return summary
