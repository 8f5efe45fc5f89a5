"""Phases 0 and 1 of a token-rollout update: the prompts (`prepare`, host) and the
sampling (`collect`, jitted).

`RolloutSampling` is a mixin of `RolloutAlgorithm` (`lm_rollout.py`), which provides what
it reads: `config` (an `LMRLConfig`), `task`, `tokenizer`, `model`, `sampler_model`,
`sampler_slots`, `prompt_len`, `max_new_tokens`, `uses_reference`, `async_staleness`,
`clock`, `reference_params` and `LMAlgorithm`'s `sample`, `prompt_tokens` and
`model_params`.

* `prepare(host_state)`: draws `num_prompts` training prompts per agent (plus the
  dynamic-sampling spares), agent `i`'s batch `k` from `numpy.random.default_rng((seed,
  i, k))`, so the host state is a cursor and a resumed run draws the same prompts;
  left-pads them to one shape. With partial rollouts the queue starts with the groups
  carried from earlier updates (`partial_rollouts.PartialRollouts.prepare_partial`).
* `collect(state, prompts)`: samples `group_size` completions per prompt with the KV
  cache (`jaxrl.lm.generate`, or `generate_continuous` with continuous batching) by the
  rollout model (the learner's, or a `sampler_dtype` copy), keeps the sampler's own
  log-probs (the behaviour policy's), and re-scores the rows (`rescore`) when the loss
  does not.
* `SamplingClock`: the wall-clock marks behind the timing metrics.

What does not live here: the rewards (`lm_rollout_rewards.py`), the asynchronous
sampler's hooks (`lm_rollout_async.py`) and the sampler itself (`jaxrl/lm/`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import prng, tasks
from jaxrl.lm import Transformer, token_logprobs
from jaxrl.lm.continuous import generate_continuous


class RolloutSampling:
    """Prompts and sampling of a token-rollout algorithm (see the module docstring)."""

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
