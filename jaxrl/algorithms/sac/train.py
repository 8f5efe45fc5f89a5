"""SAC: the maximum-entropy actor-critic on the shared replay base
(`jaxrl/algorithms/offpolicy.py`).

The base steps the environments into the replay buffer (uniformly random actions in
[-1, 1]^d until `learning_starts`), samples batches with their n-step targets'
inputs and counts gradient steps; this module adds what makes it SAC (Haarnoja et
al. 2018, "Soft Actor-Critic Algorithms and Applications"):

* `explore`: `tanh` of a sample of the squashed Gaussian policy;
* `learn_step`: the twin critics regress on the clipped double-Q soft target from
  the target critics; then the actor (reparameterised, against the updated critics)
  and, with `autotune`, the temperature's logarithm take their Adam steps; the target
  critics follow by Polyak averaging every `target_update_interval` steps;
* `act`: `tanh` of the Gaussian's mean for evaluation (or a sample).

Agents act in the normalised box [-1, 1]^d; `to_env_action` maps it affinely onto the
environment's bounds. What TD3 shares (the twin critics, Adam with a traced learning
rate, the critic step, the box mapping, delayed updates) is in
`jaxrl/algorithms/actor_critic.py`. The losses are in `losses.py`, the actor in
`networks.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config as cfg
from jaxrl import envs, prng
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import (
    ActorCriticAgent,
    TwinQ,
    adam,
    adam_update,
    critic_update,
    init_actor_critic,
    soft_actor_update,
    where_due,
)
from jaxrl.algorithms.offpolicy import OffPolicyState
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import SWEEPABLE, SACConfig
from .networks import SquashedGaussianActor

__all__ = ["SAC", "SACHyperParams", "SACLearner", "make", "repeat"]

SACHyperParams = cfg.make_hyperparams_class("SACHyperParams", SWEEPABLE)


@struct.dataclass
class SACLearner:
    """What SAC keeps besides its online parameters (`OffPolicyState.learner`)."""

    target_critic: Any  # Polyak average of params["critic"]
    actor_opt: Any  # Adam's moments, per network
    critic_opt: Any
    log_alpha: jax.Array  # log of the entropy temperature (fixed without autotune)
    alpha_opt: Any


class SAC(ActorCriticAgent):
    """SAC for one environment and one static config: a fused-step algorithm.

    `params` is `{"actor": ..., "critic": ...}`; static structure lives on this object,
    everything numeric that changes or may be swept in `OffPolicyState` (`hparams`:
    `SACHyperParams`).
    """

    name = "sac"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE

    def __init__(self, config: SACConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = SquashedGaussianActor(self.action_dim, sizes, activation)
        self.critic = TwinQ(sizes, activation)

    # ------------------------------------------------------------------ construction
    def hyperparams(self, **overrides: float) -> Any:
        """Sweepable hyperparameters of this config, with optional overrides; a
        `target_entropy` of None becomes -action_dim (Haarnoja et al. 2018, sec. 5)."""
        config = cfg.replace(self.config, **overrides).validate() if overrides else self.config
        if config.target_entropy is None:
            config = dataclasses.replace(config, target_entropy=-float(self.action_dim))
        return cfg.hyperparams_from(config, SACHyperParams, SWEEPABLE)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, SACLearner]:
        """Fresh actor and critics (or the given ones), the target critics as a copy,
        Adam states, and log(alpha) at its initial value."""
        params = init_actor_critic(self, key, params)
        log_alpha = jnp.log(hparams.alpha)
        return params, SACLearner(
            target_critic=params["critic"],
            actor_opt=adam(1.0).init(params["actor"]),
            critic_opt=adam(1.0).init(params["critic"]),
            log_alpha=log_alpha,
            alpha_opt=adam(1.0).init(log_alpha),
        )

    # ------------------------------------------------------------------ acting
    def explore(self, params, learner, hparams, obs, key, update_step) -> jax.Array:
        """`tanh(u)`, u sampled from the policy (after learning_starts; the base takes
        uniformly random actions before)."""
        return jnp.tanh(self.actor.apply(params["actor"], obs).sample(key))

    def act(self, state: OffPolicyState, obs, carry, reset, key, deterministic: bool = True):
        """Evaluation policy: `(env_action, carry)`, `tanh` of the Gaussian's mean (or of
        a sample when not `deterministic`). SAC is feed-forward: `carry` passes through."""
        dist = self.actor.apply(state.params["actor"], obs)
        u = dist.mode() if deterministic else dist.sample(key)
        return self.to_env_action(jnp.tanh(u)), carry

    # ------------------------------------------------------------------ learning
    def learn_step(
        self,
        params: Any,
        learner: SACLearner,
        batch: NStepBatch,
        weights: jax.Array,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, SACLearner, None, Mapping[str, jax.Array]]:
        """One critic step, the actor and temperature steps, the target update.

        `weights` are all ones: the config refuses prioritised replay.
        """
        c, hp = self.config, hparams
        k_next, k_actor = prng.split(key)
        alpha = jnp.exp(learner.log_alpha)

        # Critics: the soft target with a' ~ pi(s') and the target critics.
        next_dist = self.actor.apply(params["actor"], batch.next_observation)
        next_u = next_dist.sample(k_next)
        next_q = self.critic.apply(learner.target_critic, batch.next_observation, jnp.tanh(next_u))
        target = losses.soft_td_target(batch, next_q, next_dist.log_prob(next_u), alpha)
        critic, critic_opt, critic_loss, q = critic_update(
            self.critic, params["critic"], learner.critic_opt, batch, target, hp.critic_lr
        )
        target_critic = offpolicy.update_target(
            learner.target_critic, critic, hp.tau, grad_step, c.target_update_interval
        )

        # Actor and temperature, against the updated critics.
        def actor_phase(carry, k):
            actor, actor_opt, log_alpha, alpha_opt = carry
            actor, actor_opt, actor_loss, log_prob = self._actor_update(
                actor, actor_opt, critic, batch.observation, jnp.exp(log_alpha), hp, k
            )
            if c.autotune:
                grad = jax.grad(losses.temperature_loss)(log_alpha, log_prob, hp.target_entropy)
                log_alpha, alpha_opt = adam_update(grad, alpha_opt, log_alpha, hp.alpha_lr)
            stats = {"actor_loss": actor_loss, "entropy": -jnp.mean(log_prob)}
            return (actor, actor_opt, log_alpha, alpha_opt), stats

        before = (params["actor"], learner.actor_opt, learner.log_alpha, learner.alpha_opt)
        after, stats = repeat(actor_phase, before, k_actor, c.policy_frequency)
        # CleanRL's delayed policy updates: policy_frequency steps every policy_frequency-th
        # gradient step, so the actor still gets one update per critic update on average.
        actor, actor_opt, log_alpha, alpha_opt = where_due(
            grad_step, c.policy_frequency, after, before
        )

        params = {"actor": actor, "critic": critic}
        learner = SACLearner(
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            log_alpha=log_alpha,
            alpha_opt=alpha_opt,
        )
        metrics = {"loss": critic_loss, "q_mean": q.mean(), "alpha": alpha, **stats}
        return params, learner, None, metrics

    def _actor_update(self, actor, actor_opt, critic, obs, alpha, hp, key):
        """One Adam step on `losses.actor_loss`: `(actor, actor_opt, loss, log_prob)`."""
        return soft_actor_update(
            self.actor, self.critic, actor, actor_opt, critic, obs, alpha, hp.actor_lr, key
        )


def repeat(
    step: Callable[[Any, jax.Array], tuple[Any, Mapping[str, jax.Array]]],
    carry: Any,
    key: jax.Array,
    times: int,
) -> tuple[Any, dict[str, jax.Array]]:
    """`step` applied `times` times with fresh keys: `(carry, metrics averaged)`."""
    if times == 1:
        return step(carry, key)
    carry, stats = jax.lax.scan(step, carry, prng.split(key, times))
    return carry, {name: value.mean() for name, value in stats.items()}


def make(config: SACConfig, env: envs.Environment | None = None, env_params: Any = None) -> SAC:
    """Builds SAC for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return SAC(config, env, env_params if env_params is not None else env.default_params)
