"""PPO with a learned critic for language models: GRPO's sampling and rewards plus a
critic and the shared objectives.

`PPOLM` is a token-rollout algorithm (`jaxrl/algorithms/lm_rollout.py`): prompts,
sampling and re-scoring (`prepare`, `collect`), host rewards (`process`), pass@k and
export are the ones GRPO uses. Its own parts are the critic and `learn`:

  * advantages: the critic values every completion token's state, V(s_t) with s_t the
    prompt plus the completion before token t, then GAE (Schulman et al. 2016,
    `jaxrl.objectives.gae_advantages`) over the token rewards (the outcome reward on
    the last completion token, plus `process_reward_weight` x the step rewards on the
    step-end tokens with `process_reward`, or PRIME's implicit reward on every token,
    minus the KL penalty with `kl_in_reward`), optionally
    whitened over the update's tokens; the returns A + V are the value targets and V
    the clipping anchor.
  * the trained pytree is `{"policy", "critic"}`, each with its own AdamW (`lr`,
    `critic_lr`), over the shared epochs of minibatches with exact accumulation.
  * the loss (`objective`): the policy objective (policy loss, KL and entropy terms)
    plus `vf_coef` times the clipped value loss (`jaxrl.losses.value_error`, shared with PPO),
    aggregated like the policy loss (`loss_agg`) but over every completion token.

The critic is a separate value model (InstructGPT, Ouyang et al. 2022, sec. 3.5; verl;
OpenRLHF): the policy's architecture with `value_head=True`, initialised from the
policy's starting weights (the warm start, or the random initialisation) and a zero
value head, so V = 0 at the start. A separate model rather than a value head on the
policy keeps the value loss's gradient out of the policy's weights (no `vf_coef`
trade-off with the policy loss) at the price of a second model and its optimiser
state. With LoRA it is LoRA adapters of its own on the policy's frozen base plus the
value head. Its parameters and AdamW state are fields of the state, so they are
checkpointed, resumed and sharded by the LM rules like the policy's. The critic keeps
the model's LM head (the model always builds it), which it never uses: for an untied
model that is a vocab x hidden matrix and its Adam moments of dead weight.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.algorithms.lm_common import TokenMean
from jaxrl.algorithms.lm_rollout import PolicyState, RolloutAlgorithm
from jaxrl.lm import Transformer, apply_lora, init_lora
from jaxrl.losses import value_error
from jaxrl.objectives import (
    aggregate_loss,
    explained_variance,
    gae_advantages,
    loss_normaliser,
    masked_token_mean,
    outcome_token_rewards,
    with_process_rewards,
)

from .config import SWEEPABLE, PPOLMConfig


@struct.dataclass
class PPOLMState(PolicyState):
    """The policy's state (`lm_rollout.PolicyState`) and the value model's."""

    critic_params: Any = None  # the value model's trained parameters (LoRA: adapters + head)
    critic_opt_state: Any = None


class PPOLM(RolloutAlgorithm):
    """PPO with a critic for a causal LM on a task (see the module docstring)."""

    name = "ppo-lm"
    trains_on = "task"
    headline_metric = "accuracy"
    eval_metric = "pass@1"
    sweepable = SWEEPABLE

    def __init__(self, config: PPOLMConfig):
        super().__init__(config)
        critic_config = dataclasses.replace(self.model.config, value_head=True)
        self.critic = Transformer(critic_config, remat=self.config.remat)

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PPOLMState:
        """The policy (and reference) as GRPO's, from the same key, so a GRPO and a PPO-LM
        run of one seed sample the same first completions, and the critic beside it."""
        policy = self.init_policy(key, hparams, params)
        critic = self.init_critic(
            jax.random.fold_in(key, 1), policy["params"], policy["base_params"]
        )
        return PPOLMState(
            **policy,
            critic_params=critic,
            critic_opt_state=self._critic_optimizer(hparams, 1.0).init(critic),
        )

    def init_critic(self, key: jax.Array, policy_params: Any, base_params: Any) -> Any:
        """The critic's trained parameters at the start: the policy's starting weights
        (`policy_params`) with a zero value head, or with LoRA, fresh adapters (from
        `key`) on the policy's frozen base (`base_params`) and a zero head."""
        hidden = self.model.config.hidden_size
        dtype = self.model.config.params_dtype
        # Dense(1) of jaxrl/lm/model.py, zero-initialised there too: V = 0 everywhere.
        head = {"kernel": jnp.zeros((hidden, 1), dtype), "bias": jnp.zeros((1,), dtype)}
        if self.lora is None:
            body = jax.tree.map(jnp.copy, policy_params["params"])
            return {"params": {**body, "value_head": head}}
        adapters = init_lora(key, self.model.config, self.lora, base_params)
        return {"adapters": adapters, "value_head": head}

    def critic_model_params(self, critic: Any, base: Any) -> Any:
        """The parameters the critic model runs with: its own, or base + its adapters
        with its value head."""
        if self.lora is None:
            return critic
        merged = apply_lora(base, critic["adapters"], self.lora)
        return {"params": {**merged["params"], "value_head": critic["value_head"]}}

    def _critic_optimizer(self, hp: Any, lr_scale: jax.Array | float):
        """The policy's AdamW chain at the critic's learning rate."""
        return self.optimizer(hp.replace(lr=hp.critic_lr), lr_scale)

    # ------------------------------------------------------------------ values
    def completion_values(self, model_params: Any, tokens: jax.Array, mask: jax.Array):
        """V(s_t) for each completion position t, (rows, max_new_tokens) float32.

        Completion token t sits at position `prompt_len + t` of `tokens`; the state
        before it is the prefix ending at position `prompt_len + t - 1`, whose value
        the value head reads there (so t = 0 is valued at the prompt's last token)."""
        _, values = self.critic.apply(
            model_params,
            tokens,
            attention_mask=mask,
            return_hidden=True,
            output_span=(self.prompt_len - 1, tokens.shape[1] - 1),
        )
        return values

    def _batch_values(self, state: PPOLMState, batch: dict[str, jax.Array]) -> jax.Array:
        """The critic's completion values of the whole update, computed in slices the
        size of a micro-batch (the learning step's activation memory)."""
        c = self.config
        model_params = self.critic_model_params(state.critic_params, state.base_params)
        pieces = c.num_minibatches * c.micro_batches
        split = lambda x: x.reshape(pieces, -1, *x.shape[1:])  # noqa: E731
        values = jax.lax.map(
            lambda p: self.completion_values(model_params, *p),
            (split(batch["tokens"]), split(batch["mask"])),
        )
        return values.reshape(batch["tokens"].shape[0], -1)

    # ------------------------------------------------------------------ learning
    def learn(self, state: PPOLMState, batch: dict[str, jax.Array]) -> tuple[PPOLMState, dict]:
        """`learn_from` with the outcome reward on each row's last completion token, plus
        `process_reward_weight` x the step rewards with `process_reward`."""
        cmask = batch["completion_mask"].astype(jnp.float32)
        token_rewards = outcome_token_rewards(batch["rewards"], cmask)
        process_metrics = {}
        if self.config.process_reward is not None:  # static: step rewards into GAE
            state, process, _, process_metrics = self.process_token_rewards(state, batch, cmask)
            token_rewards = with_process_rewards(
                token_rewards, process, self.config.process_reward_weight
            )
        state, metrics = self.learn_from(state, batch, token_rewards)
        return state, {**process_metrics, **metrics}

    def learn_from(
        self, state: PPOLMState, batch: dict[str, jax.Array], token_rewards: jax.Array
    ) -> tuple[PPOLMState, dict]:
        """GAE advantages on the critic's values (`critic_advantages`) for the (rows,
        completion length) `token_rewards`, then `num_epochs` x `num_minibatches` steps
        of the policy's and the critic's AdamW, each on its own part of the gradient of
        `objective` (one agent). Tokens off `completion_mask` (the environment's, in a
        multi-turn episode) are in neither loss, and GAE steps over them."""
        hp = state.hparams
        cmask = batch["completion_mask"].astype(jnp.float32)
        token_rewards = self.learning_rewards(state, batch, token_rewards, cmask)
        fields, critic_metrics = self.critic_advantages(state, batch, token_rewards, cmask)
        data = {**batch, **fields, "loss_mask": self.loss_mask(batch, cmask)}
        lr_scale = self.lr_scale(state.update_step)

        def minibatch_step(carry, minibatch):
            learner, opt_state = carry
            grads, stats = self.gradient(learner, state, minibatch)
            # Each model's own AdamW step, each clipped on its own gradient norm.
            policy, policy_opt, grad_norm = self.adamw_step(
                learner["policy"], opt_state["policy"], grads["policy"], hp, lr_scale
            )
            critic, critic_opt, critic_grad_norm = self.adamw_step(
                learner["critic"],
                opt_state["critic"],
                grads["critic"],
                hp.replace(lr=hp.critic_lr),
                lr_scale,
            )
            learner = {"policy": policy, "critic": critic}
            opt_state = {"policy": policy_opt, "critic": critic_opt}
            return (learner, opt_state), {
                **stats,
                "grad_norm": grad_norm,
                "critic_grad_norm": critic_grad_norm,
            }

        learner = {"policy": state.params, "critic": state.critic_params}
        opt_state = {"policy": state.opt_state, "critic": state.critic_opt_state}
        key, (learner, opt_state), step_metrics = self.epochs_of_minibatches(
            state.key, data, (learner, opt_state), minibatch_step
        )
        metrics = {**critic_metrics, **step_metrics}
        metrics = self.update_metrics(batch, cmask, metrics, hp, lr_scale)
        state = state.replace(
            params=learner["policy"],
            opt_state=opt_state["policy"],
            critic_params=learner["critic"],
            critic_opt_state=opt_state["critic"],
        )
        return state.replace(key=key, update_step=state.update_step + 1), metrics

    def critic_advantages(
        self, state: PPOLMState, batch: dict[str, jax.Array], token_rewards, cmask
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """`(fields, metrics)`: GAE on the critic's values (`advantages`), the returns
        and values as the value loss's data (`returns`, `old_values`), and the critic's
        metrics of the whole update."""
        c, hp = self.config, state.hparams
        # The critic is the one of `collect`: nothing trains between sampling and this
        # point, so these are the values of the behaviour-time critic (V_old).
        values = self._batch_values(state, batch)
        advantages, returns = gae_advantages(
            token_rewards, values, cmask, hp.gamma, hp.gae_lambda, c.whiten_advantages
        )
        metrics = {
            "value_mean": masked_token_mean(values, cmask),
            "return_mean": masked_token_mean(returns, cmask),
            "explained_variance": explained_variance(values, returns, cmask),
            "critic_lr": hp.critic_lr * self.lr_scale(state.update_step),
        }
        return {"advantages": advantages, "returns": returns, "old_values": values}, metrics

    def gradient(self, learner: dict[str, Any], state: PPOLMState, minibatch: dict[str, Any]):
        """The gradient of one minibatch's `objective` for `{"policy", "critic"}`, and its
        metrics, accumulated over `micro_batches` slices (`accumulated_gradient`).

        Normalisers, each of the whole minibatch: the policy loss's over `loss_mask`, the
        value loss's over every completion token (`entropy_top_fraction` selects tokens
        for the policy only)."""
        c = self.config
        normaliser = {
            "policy": loss_normaliser(minibatch["loss_mask"], c.loss_agg),
            "value": loss_normaliser(minibatch["completion_mask"], c.loss_agg),
        }
        return self.accumulated_gradient(
            lambda p, context, rows: self.objective(p, context[0], rows, context[1]),
            learner,
            (state, normaliser),
            minibatch,
            c.micro_batches,
        )

    def objective(self, learner, state: PPOLMState, batch: dict[str, jax.Array], normaliser):
        """The loss of a slice of rows: the policy objective (`policy_objective`: policy
        loss, KL and entropy terms) + vf_coef x the value loss, and its metrics.

        The value loss is PPO2's clipped squared error (Schulman et al. 2017, eq. 9, with
        the clipping of OpenAI baselines), per completion token, aggregated by `loss_agg`."""
        c, hp = self.config, state.hparams
        policy_loss, stats = self.policy_objective(
            learner["policy"], state, batch, normaliser["policy"]
        )
        model_params = self.critic_model_params(learner["critic"], state.base_params)
        values = self.completion_values(model_params, batch["tokens"], batch["mask"])
        per_token, clipped = value_error(
            values, batch["old_values"], batch["returns"], hp.vf_clip_eps, c.clip_value
        )
        cmask = batch["completion_mask"]
        value_loss = aggregate_loss(
            per_token, cmask, c.loss_agg, normaliser["value"], max_len=self.max_new_tokens
        )
        loss = policy_loss + hp.vf_coef * value_loss
        stats.update(
            loss=loss,
            policy_loss=policy_loss,
            value_loss=value_loss,
            value_clip_fraction=TokenMean.over(clipped.astype(jnp.float32), cmask),
        )
        return loss, stats
