"""GRPO's state and learning step, shared by single-turn GRPO (`train.py`) and
multi-turn GRPO (`multiturn.py`).

`learn` is the whole update of the policy from a batch of scored completions:

  1. token rewards (the outcome on a row's last completion token, or each turn's
     reward on its last token), minus the KL penalty with `kl_in_reward`;
  2. advantages by the `advantage` estimator (`jaxrl.objectives.compute_advantages`),
     plus, on a multi-turn task with `step_advantage_weight`, GiGPO's step-level ones
     (`step_group_advantages`: turns grouped by the context they start from), plus,
     with `process_reward`, `process_reward_weight` x DeepSeekMath's process-supervision
     advantages of the step rewards (`process_advantages`: each step reward normalised
     over all step rewards of the prompt's group, summed over the token's step and the
     later ones);
  3. `num_epochs` x `num_minibatches` AdamW steps of the policy objective
     (`RolloutAlgorithm.policy_objective`: policy loss + KL + entropy, aggregated by
     `loss_agg`), each minibatch's gradient accumulated over `micro_batches` slices
     divided by the whole minibatch's normaliser (`loss_normaliser`), so accumulation
     does not change the update.

State: `params` (the model, or LoRA adapters), `base_params` (the frozen base under
LoRA, which is also the reference policy) and `ref_params` (a frozen copy of the
starting model when `kl_coef > 0` without LoRA); both frozen fields are rebuilt by `init`
and never checkpointed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algorithms.lm_rollout import PolicyState, RolloutAlgorithm
from jaxrl.objectives import (
    compute_advantages,
    loss_normaliser,
    process_advantages,
    step_group_advantages,
    turn_token_advantages,
)

GRPOState = PolicyState  # GRPO's state is the policy's alone (`lm_rollout.PolicyState`)


def init_state(algo: RolloutAlgorithm, key: jax.Array, hparams: Any, params: Any) -> GRPOState:
    """The policy from `params` (a warm start, normally an SFT run) or from `key`; with a
    KL term and no LoRA, a frozen copy of it as the reference."""
    return GRPOState(**algo.init_policy(key, hparams, params))


def learn(
    algo: RolloutAlgorithm,
    state: GRPOState,
    batch: dict[str, jax.Array],
    token_rewards: jax.Array,
) -> tuple[GRPOState, dict[str, jax.Array]]:
    """One GRPO update of one agent from `batch` (see the module docstring), with the
    (rows, completion length) `token_rewards` of its completions."""
    c, hp = algo.config, state.hparams
    cmask = batch["completion_mask"].astype(jnp.float32)
    token_rewards = algo.learning_rewards(state, batch, token_rewards, cmask)
    advantages, _ = compute_advantages(c.advantage, token_rewards, cmask, group_size=c.group_size)
    if c.step_advantage_weight:  # GiGPO on a multi-turn task (static: a config value)
        steps = step_group_advantages(
            batch["step_returns"], batch["step_groups"], batch["step_mask"]
        )
        per_token = turn_token_advantages(steps, batch["turn_of_token"])
        advantages = advantages + c.step_advantage_weight * cmask * per_token
    process_metrics = {}
    if c.process_reward is not None:  # static: a config value
        state, process, step_ends, process_metrics = algo.process_token_rewards(state, batch, cmask)
        steps = process_advantages(
            process, step_ends, cmask, c.group_size, scale_by_std=c.process_reward_std
        )
        advantages = advantages + c.process_reward_weight * steps
    data = {**batch, "advantages": advantages, "loss_mask": algo.loss_mask(batch, cmask)}
    lr_scale = algo.lr_scale(state.update_step)

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        normaliser = loss_normaliser(minibatch["loss_mask"], c.loss_agg)
        grads, stats = algo.accumulated_gradient(
            lambda p, context, rows: algo.policy_objective(p, context[0], rows, context[1]),
            params,
            (state, normaliser),
            minibatch,
            c.micro_batches,
        )
        params, opt_state, grad_norm = algo.adamw_step(params, opt_state, grads, hp, lr_scale)
        return (params, opt_state), {**stats, "grad_norm": grad_norm}

    key, (params, opt_state), metrics = algo.epochs_of_minibatches(
        state.key, data, (state.params, state.opt_state), minibatch_step
    )
    metrics = algo.update_metrics(batch, cmask, {**process_metrics, **metrics}, hp, lr_scale)
    state = state.replace(params=params, opt_state=opt_state)
    return state.replace(key=key, update_step=state.update_step + 1), metrics
