"""Held-out evaluation of a token-rollout algorithm: pass@k (`evaluate`, `finish`).

`RolloutEvaluation` is a mixin of `RolloutAlgorithm` (`lm_rollout.py`), which provides
what it reads: `config`, `task`, `tokenizer`, `prompt_len`, `max_new_tokens` and
`LMAlgorithm`'s `sample`, `prompt_tokens`, `merged_params`, `load_params` and
`export_agent0`. Held-out prompts are sampled with the learner's model, statically (not
the rollout model of `sampler_dtype`, nor continuous batching), `eval_samples`
completions per prompt at `temperature`; pass@k is the unbiased estimator of
`jaxrl/tasks/metrics.py`. Multi-turn algorithms override `held_out_metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxrl import tasks
from jaxrl.algorithms.lm_common import agent
from jaxrl.lm import decode_completions
from jaxrl.tasks.metrics import pass_at_k

PASS_AT_KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The k of the pass@k metrics (those up to `eval_samples`)."""


class RolloutEvaluation:
    """Held-out pass@k of a token-rollout algorithm (see the module docstring)."""

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
