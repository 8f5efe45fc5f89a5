"""Phase 3 of a token-rollout update: the pieces each algorithm's `learn` is written
with (GRPO's `grpo/learning.py`, PPO-LM's `ppo_lm/train.py`).

`RolloutLearning` is a mixin of `RolloutAlgorithm` (`lm_rollout.py`), which provides
what it reads: `config`, `max_new_tokens`, `uses_reference`, `implicit_prm`,
`completion_logprobs`, `reference_params`, `lr_scale` and `LMAlgorithm`'s `optimizer`,
`model_params`, `accumulated_gradient` and `keep_rows_sharded`.

* Rewards the advantages see: `learning_rewards` (KL in the reward),
  `process_token_rewards` and `implicit_prm_rewards` (PRIME's implicit PRM, trained
  online).
* The loop: `loss_mask` (the tokens trained on), `epochs_of_minibatches` (the
  `num_epochs` x `num_minibatches` scan), `adamw_step`.
* The loss: `policy_objective` (the policy loss, KL and entropy terms, aggregated),
  `rollout_correction` (importance weights for the sampler-learner mismatch, and its
  metrics), `update_metrics`.

Every formula is a function of `jaxrl.objectives` (its registries name the variants);
these methods only wire them to the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxrl import prng
from jaxrl.algorithms.lm_common import TokenMean, split_rows
from jaxrl.minibatches import run_epochs
from jaxrl.objectives import (
    aggregate_loss,
    entropy_bonus,
    high_entropy_mask,
    implicit_prm_loss,
    implicit_process_rewards,
    kl_estimate,
    kl_penalised_rewards,
    masked_token_mean,
    policy_loss,
    rollout_metrics,
    rollout_weights,
)


class RolloutLearning:
    """The pieces of `learn` of a token-rollout algorithm (see the module docstring)."""

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
