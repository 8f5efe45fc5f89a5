"""TD3+BC on the shared offline base (`jaxrl/algorithms/offline.py`).

The base samples dataset batches and evaluates; this module adds what makes it TD3+BC
(Fujimoto & Gu 2021): TD3's critic step (clipped double-Q target at the target actor's
smoothed action), and every `policy_delay`-th step an actor step on
`losses.td3_bc_actor_loss` and Polyak updates of the target actor and critics. The
actor, the twin critics and the update plumbing are the shared ones
(`jaxrl/algorithms/actor_critic.py`). `act` is the deterministic actor's action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax

from jaxrl import envs, prng
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import (
    DelayedLearner,
    DeterministicActor,
    TwinQ,
    clipped_double_q,
    critic_update,
    delayed_policy_step,
    smoothed_target_action,
)
from jaxrl.algorithms.offline import OfflineAgent
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, TD3BCConfig

__all__ = ["TD3BC", "TD3BCLearner"]


# What it keeps besides its online parameters (`OfflineState.learner`).
TD3BCLearner = DelayedLearner


class TD3BC(OfflineAgent):
    """TD3+BC for one environment, dataset and static config: a fused-step algorithm.

    `params` is `{"actor", "critic"}`."""

    name = "td3-bc"
    Config: ClassVar[type] = TD3BCConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: TD3BCConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = DeterministicActor(self.action_dim, sizes, activation)
        self.critic = TwinQ(sizes, activation)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, TD3BCLearner]:
        """Fresh actor and critics (or the given ones), their copies as targets, Adam."""
        networks = {"actor": (self.actor, "obs"), "critic": (self.critic, "obs_action")}
        params = self.init_networks(key, networks, params)
        return params, DelayedLearner.create(params)

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The actor's action (no exploration noise: an offline policy is evaluated as
        it is)."""
        return self.actor.apply(params["actor"], obs)

    def learn_step(
        self,
        params: Any,
        learner: TD3BCLearner,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, TD3BCLearner, Mapping[str, jax.Array]]:
        """One critic step; every `policy_delay`-th step the actor's and the targets'."""
        c, hp = self.config, hparams
        next_action = self.actor.apply(learner.target_actor, batch.next_observation)
        noise = prng.normal(key, next_action.shape)
        next_action = smoothed_target_action(next_action, noise, hp.policy_noise, hp.noise_clip)
        next_q = self.critic.apply(learner.target_critic, batch.next_observation, next_action)
        target = offpolicy.td_target(batch, clipped_double_q(next_q))
        critic, critic_opt, critic_loss, q = critic_update(
            self.critic, params["critic"], learner.critic_opt, batch, target, hp.critic_lr
        )

        def actor_loss_fn(p):
            pi = self.actor.apply(p, batch.observation)
            q1 = self.critic.apply(critic, batch.observation, pi)[0]
            return losses.td3_bc_actor_loss(q1, pi, batch.action, hp.alpha)

        params, learner, actor_loss = delayed_policy_step(
            actor_loss_fn, params["actor"], critic, learner, critic_opt, hp, grad_step,
            c.policy_delay,
        )  # fmt: skip
        metrics = {"loss": critic_loss, "actor_loss": actor_loss, "q_mean": q.mean()}
        return params, learner, metrics
