"""TD3: the deterministic actor-critic on the shared replay base
(`jaxrl/algorithms/offpolicy.py`).

The base steps the environments into the replay buffer (uniformly random actions in
[-1, 1]^d until `learning_starts`) and samples batches; this module adds what makes
it TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods"):

* `explore`: the actor's action plus clipped Gaussian noise;
* `learn_step`: the twin critics regress on the clipped double-Q target of the target
  critics at the target actor's smoothed action; every `policy_delay`-th step the
  actor ascends Q_1 and the target actor and critics follow by Polyak averaging;
* `act`: the actor's action for evaluation (with exploration noise if sampled).

The twin critics, the Adam steps and the box mapping are shared with SAC
(`jaxrl/algorithms/actor_critic.py`); the losses are in `losses.py`, the actor in
`networks.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl import envs, prng
from jaxrl.algorithms.actor_critic import (
    ActorCriticAgent,
    DelayedLearner,
    TwinQ,
    critic_update,
    delayed_policy_step,
    init_actor_critic,
)
from jaxrl.algorithms.offpolicy import OffPolicyState
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import SWEEPABLE, TD3Config
from .networks import DeterministicActor

# What TD3 keeps besides its online parameters (`OffPolicyState.learner`).
TD3Learner = DelayedLearner


class TD3(ActorCriticAgent):
    """TD3 for one environment and one static config: a fused-step algorithm.

    `params` is `{"actor": ..., "critic": ...}`; static structure lives on this object,
    everything numeric that changes or may be swept in `OffPolicyState` (`hparams`:
    `TD3HyperParams`).
    """

    name = "td3"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE

    def __init__(self, config: TD3Config, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = DeterministicActor(self.action_dim, sizes, activation)
        self.critic = TwinQ(sizes, activation)

    # ------------------------------------------------------------------ construction
    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, TD3Learner]:
        """Fresh actor and critics (or the given ones), their copies as targets, and
        Adam states."""
        params = init_actor_critic(self, key, params)
        return params, DelayedLearner.create(params)

    # ------------------------------------------------------------------ acting
    def explore(self, params, learner, hparams, obs, key, update_step) -> jax.Array:
        """The actor's action plus Gaussian noise, clipped to the box (after
        learning_starts; the base takes uniformly random actions before)."""
        action = self.actor.apply(params["actor"], obs)
        return exploration_action(action, prng.normal(key, action.shape), hparams.exploration_noise)

    def act(self, state: OffPolicyState, obs, carry, reset, key, deterministic: bool = True):
        """Evaluation policy: `(env_action, carry)`, the actor's action (with exploration
        noise when not `deterministic`). TD3 is feed-forward: `carry` passes through."""
        action = self.actor.apply(state.params["actor"], obs)
        if not deterministic:
            noise = prng.normal(key, action.shape)
            action = exploration_action(action, noise, state.hparams.exploration_noise)
        return self.to_env_action(action), carry

    # ------------------------------------------------------------------ learning
    def learn_step(
        self,
        params: Any,
        learner: TD3Learner,
        batch: NStepBatch,
        weights: jax.Array,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, TD3Learner, None, Mapping[str, jax.Array]]:
        """One critic step; every `policy_delay`-th step also the actor's and the targets'.

        `weights` are all ones: the config refuses prioritised replay.
        """
        c, hp = self.config, hparams

        # Critics: the clipped double-Q target at the smoothed target action.
        next_action = self.actor.apply(learner.target_actor, batch.next_observation)
        noise = prng.normal(key, next_action.shape)
        next_action = losses.smoothed_target_action(
            next_action, noise, hp.policy_noise, hp.noise_clip
        )
        next_q = self.critic.apply(learner.target_critic, batch.next_observation, next_action)
        target = losses.td3_target(batch, next_q)
        critic, critic_opt, critic_loss, q = critic_update(
            self.critic, params["critic"], learner.critic_opt, batch, target, hp.critic_lr
        )

        # Actor: ascend Q_1 of the updated critics.
        def actor_loss_fn(p):
            action = self.actor.apply(p, batch.observation)
            return losses.deterministic_actor_loss(
                self.critic.apply(critic, batch.observation, action)[0]
            )

        # Actor and targets (they move with the actor, Fujimoto et al. 2018, alg. 1),
        # applied only on delayed steps.
        params, learner, actor_loss = delayed_policy_step(
            actor_loss_fn, params["actor"], critic, learner, critic_opt, hp, grad_step,
            c.policy_delay,
        )  # fmt: skip
        metrics = {"loss": critic_loss, "actor_loss": actor_loss, "q_mean": q.mean()}
        return params, learner, None, metrics


def exploration_action(
    action: jax.Array, noise: jax.Array, exploration_noise: jax.Array
) -> jax.Array:
    """`clip(mu(s) + exploration_noise * eps, -1, 1)`, eps ~ N(0, 1): Gaussian
    exploration (Fujimoto et al. 2018, sec. 6.1), kept inside the action box."""
    return jnp.clip(action + exploration_noise * noise, -1.0, 1.0)


def make(config: TD3Config, env: envs.Environment | None = None, env_params: Any = None) -> TD3:
    """Builds TD3 for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return TD3(config, env, env_params if env_params is not None else env.default_params)
