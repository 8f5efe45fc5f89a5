"""IQL on the shared offline base (`jaxrl/algorithms/offline.py`).

The base samples dataset batches and evaluates; this module adds what makes it IQL
(Kostrikov, Nair & Levine 2021), in the order of the authors' update:

1. the value network takes an Adam step on the expectile loss against the target
   critics' clipped double-Q at the dataset's action;
2. the actor takes a step of advantage-weighted regression, weights from the updated
   value and the target critics;
3. the twin critics regress on `r + gamma V(s')` with the updated value;
4. the target critics follow by Polyak averaging.

`act` is the Gaussian's mean (deterministic) or a sample clipped into the box.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import TwinQ, adam, adam_update, clipped_double_q, critic_update
from jaxrl.algorithms.offline import OfflineAgent
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, IQLConfig
from .networks import GaussianActor, ValueNetwork

__all__ = ["IQL", "IQLLearner"]


@struct.dataclass
class IQLLearner:
    """What IQL keeps besides its online parameters (`OfflineState.learner`)."""

    target_critic: Any  # Polyak average of params["critic"]
    actor_opt: Any  # Adam's moments, per network
    critic_opt: Any
    value_opt: Any


class IQL(OfflineAgent):
    """IQL for one environment, dataset and static config: a fused-step algorithm.

    `params` is `{"actor", "critic", "value"}`."""

    name = "iql"
    Config: ClassVar[type] = IQLConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: IQLConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = GaussianActor(self.action_dim, sizes, activation)
        self.critic = TwinQ(sizes, activation, layer_norm=config.layer_norm)
        self.value = ValueNetwork(sizes, activation)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, IQLLearner]:
        """Fresh networks (or the given ones), the target critics as a copy, Adam states."""
        networks = {
            "actor": (self.actor, "obs"),
            "critic": (self.critic, "obs_action"),
            "value": (self.value, "obs"),
        }
        params = self.init_networks(key, networks, params)
        return params, IQLLearner(
            target_critic=params["critic"],
            actor_opt=adam(1.0).init(params["actor"]),
            critic_opt=adam(1.0).init(params["critic"]),
            value_opt=adam(1.0).init(params["value"]),
        )

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The Gaussian's mean (or a sample clipped into [-1, 1]^d)."""
        dist = self.actor.apply(params["actor"], obs)
        return dist.mode() if deterministic else jnp.clip(dist.sample(key), -1.0, 1.0)

    def learn_step(
        self,
        params: Any,
        learner: IQLLearner,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, IQLLearner, Mapping[str, jax.Array]]:
        """Value, actor, critics, targets (see the module docstring)."""
        c, hp = self.config, hparams
        obs, action = batch.observation, batch.action
        q_target = clipped_double_q(self.critic.apply(learner.target_critic, obs, action))

        def value_loss_fn(p):
            v = self.value.apply(p, obs)
            return losses.value_loss(q_target, v, hp.expectile), v

        (value_loss, v), grads = jax.value_and_grad(value_loss_fn, has_aux=True)(params["value"])
        value, value_opt = adam_update(grads, learner.value_opt, params["value"], hp.critic_lr)

        v_new = self.value.apply(value, obs)
        weights = losses.advantage_weights(q_target, v_new, hp.temperature, c.max_weight)

        def actor_loss_fn(p):
            log_prob = self.actor.apply(p, obs).log_prob(action)
            return losses.awr_actor_loss(log_prob, weights)

        actor_loss, grads = jax.value_and_grad(actor_loss_fn)(params["actor"])
        actor, actor_opt = adam_update(grads, learner.actor_opt, params["actor"], hp.actor_lr)

        target = losses.iql_target(batch, self.value.apply(value, batch.next_observation))
        critic, critic_opt, critic_loss, q = critic_update(
            self.critic, params["critic"], learner.critic_opt, batch, target, hp.critic_lr
        )
        target_critic = offpolicy.update_target(learner.target_critic, critic, hp.tau, grad_step, 1)
        params = {"actor": actor, "critic": critic, "value": value}
        learner = IQLLearner(
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            value_opt=value_opt,
        )
        metrics = {
            "loss": critic_loss,
            "value_loss": value_loss,
            "actor_loss": actor_loss,
            "q_mean": q.mean(),
            "v_mean": v.mean(),
            "weight_mean": weights.mean(),
        }
        return params, learner, metrics
