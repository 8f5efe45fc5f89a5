"""PPO with a learned critic for language models, on GRPO's staged step.

`PPOLM` subclasses `GRPO` (jaxrl/algorithms/grpo/train.py): prompts, sampling and
re-scoring (`prepare`, `collect`), host rewards (`process`), the epochs of minibatches
with exact gradient accumulation, the policy losses, KL terms, pass@k and export are
GRPO's. What changes is what `learn` trains and where the advantages come from, through
GRPO's learning hooks:

  * `_advantages`: the critic values every completion token's state, V(s_t) with s_t the
    prompt plus the completion before token t, then GAE (Schulman et al. 2016) over the
    token rewards (the outcome reward on the last completion token, minus the KL
    penalty with `kl_in_reward`), optionally whitened over the update's tokens; the
    returns A + V are the value targets and V the clipping anchor.
  * `_learner`, `_with_learner`, `_optimizer_step`: the trained pytree is
    `{"policy", "critic"}`, each with its own AdamW (`lr`, `critic_lr`).
  * `_normaliser`, `_loss`: the policy loss plus `vf_coef` times the clipped value loss
    (`jaxrl.algorithms.ppo.losses.value_error`, the control PPO's), aggregated like
    the policy loss (`loss_agg`) but over every completion token.

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

from jaxrl.algorithms.grpo import losses
from jaxrl.algorithms.grpo.train import GRPO, GRPOState
from jaxrl.algorithms.lm_common import TokenMean
from jaxrl.algorithms.ppo.losses import value_error
from jaxrl.algorithms.sft.losses import masked_token_mean
from jaxrl.lm import Transformer, apply_lora, init_lora

from .config import SWEEPABLE, PPOLMConfig


@struct.dataclass
class PPOLMState(GRPOState):
    critic_params: Any = None  # the value model's trained parameters (LoRA: adapters + head)
    critic_opt_state: Any = None


class PPOLM(GRPO):
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
        """GRPO's policy (and reference) from the same key, so a GRPO and a PPO-LM run
        of one seed sample the same first completions, and the critic beside it."""
        policy = super().init(key, hparams, params)
        critic = self.init_critic(jax.random.fold_in(key, 1), policy)
        fields = {f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)}
        return PPOLMState(
            **fields,
            critic_params=critic,
            critic_opt_state=self._critic_optimizer(hparams, 1.0).init(critic),
        )

    def init_critic(self, key: jax.Array, state: GRPOState) -> Any:
        """The critic's trained parameters at the start: the policy's starting weights
        with a zero value head, or with LoRA, fresh adapters (from `key`) on the
        policy's frozen base and a zero head. Call it on a state that has not trained."""
        hidden = self.model.config.hidden_size
        dtype = self.model.config.params_dtype
        # Dense(1) of jaxrl/lm/model.py, zero-initialised there too: V = 0 everywhere.
        head = {"kernel": jnp.zeros((hidden, 1), dtype), "bias": jnp.zeros((1,), dtype)}
        if self.lora is None:
            body = jax.tree.map(jnp.copy, state.params["params"])
            return {"params": {**body, "value_head": head}}
        adapters = init_lora(key, self.model.config, self.lora, state.base_params)
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

    # ------------------------------------------------------------------ GRPO's learning hooks
    def _advantages(self, state: PPOLMState, batch, token_rewards, cmask):
        """GAE on the critic's values; the returns and values as the value loss's data."""
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

    def _learner(self, state: PPOLMState) -> tuple[Any, Any]:
        learner = {"policy": state.params, "critic": state.critic_params}
        return learner, {"policy": state.opt_state, "critic": state.critic_opt_state}

    def _with_learner(self, state: PPOLMState, learner: Any, opt_state: Any) -> PPOLMState:
        return state.replace(
            params=learner["policy"],
            opt_state=opt_state["policy"],
            critic_params=learner["critic"],
            critic_opt_state=opt_state["critic"],
        )

    def _optimizer_step(self, learner, opt_state, grads, hp, lr_scale):
        """The policy's and the critic's AdamW steps, each clipped on its own norm."""
        step = super()._optimizer_step
        policy, policy_opt, policy_stats = step(
            learner["policy"], opt_state["policy"], grads["policy"], hp, lr_scale
        )
        critic_hp = hp.replace(lr=hp.critic_lr)
        critic, critic_opt, critic_stats = step(
            learner["critic"], opt_state["critic"], grads["critic"], critic_hp, lr_scale
        )
        return (
            {"policy": policy, "critic": critic},
            {"policy": policy_opt, "critic": critic_opt},
            {"grad_norm": policy_stats["grad_norm"], "critic_grad_norm": critic_stats["grad_norm"]},
        )

    def _normaliser(self, minibatch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The policy loss's (over `loss_mask`) and the value loss's (over every
        completion token: `entropy_top_fraction` selects tokens for the policy only)."""
        value = losses.loss_normaliser(minibatch["completion_mask"], self.config.loss_agg)
        return {"policy": super()._normaliser(minibatch), "value": value}

    def _loss(self, learner, state: PPOLMState, batch: dict[str, jax.Array], normaliser):
        """Policy loss (GRPO's, with its KL and entropy terms) + vf_coef x value loss.

        The value loss is PPO2's clipped squared error (Schulman et al. 2017, eq. 9, with
        the clipping of OpenAI baselines), per completion token, aggregated by `loss_agg`."""
        c, hp = self.config, state.hparams
        policy_loss, stats = super()._loss(learner["policy"], state, batch, normaliser["policy"])
        model_params = self.critic_model_params(learner["critic"], state.base_params)
        values = self.completion_values(model_params, batch["tokens"], batch["mask"])
        per_token, clipped = value_error(
            values, batch["old_values"], batch["returns"], hp.vf_clip_eps, c.clip_value
        )
        cmask = batch["completion_mask"]
        value_loss = losses.aggregate_loss(
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


def make(config: PPOLMConfig) -> PPOLM:
    """PPO with a critic for `config` (validated; bad input raises `ConfigError`)."""
    return PPOLM(config)


def gae_advantages(
    token_rewards: jax.Array,
    values: jax.Array,
    mask: jax.Array,
    gamma: jax.Array | float,
    gae_lambda: jax.Array | float,
    whiten: bool,
) -> tuple[jax.Array, jax.Array]:
    """`(advantages, returns)` of PPO-LM, (batch, length), 0 off-mask.

    GAE over the completion tokens (`losses.masked_gae`, Schulman et al. 2016, eq. 16),
    V = 0 after the last token (the episode ends with the completion). With `whiten`,
    the advantages are whitened over all mask tokens of the batch (the `gae` estimator of
    `losses.compute_advantages`, as verl and Tunix); the returns A + V, the value
    targets, always use the raw advantages.
    """
    if whiten:
        return losses.compute_advantages(
            "gae",
            token_rewards,
            mask,
            group_size=1,
            values=values,
            gamma=gamma,
            gae_lambda=gae_lambda,
        )
    return losses.masked_gae(token_rewards, values, mask, gamma, gae_lambda)


def explained_variance(values: jax.Array, returns: jax.Array, mask: jax.Array) -> jax.Array:
    """1 - Var[R - V] / Var[R] over the mask tokens (population variances): 1 when the
    critic predicts the returns exactly, 0 when it does no better than their mean,
    negative when worse. 0 when the returns do not vary (nothing to explain)."""
    m = jnp.asarray(mask, jnp.float32)
    count = jnp.maximum(jnp.sum(m), 1.0)

    def variance(x):
        mean = jnp.sum(x * m) / count
        return jnp.sum(((x - mean) * m) ** 2) / count

    var_returns = variance(returns)
    ratio = variance(returns - values) / jnp.maximum(var_returns, 1e-12)
    return jnp.where(var_returns > 1e-12, 1.0 - ratio, 0.0)
