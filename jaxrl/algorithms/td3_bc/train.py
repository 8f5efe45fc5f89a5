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
from flax import struct

from jaxrl import envs, prng
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import (
    DeterministicActor,
    TwinQ,
    adam,
    adam_update,
    clipped_double_q,
    critic_update,
    smoothed_target_action,
    where_due,
)
from jaxrl.algorithms.offline import OfflineAgent, OfflineState
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, TD3BCConfig

__all__ = ["TD3BC", "TD3BCLearner"]


@struct.dataclass
class TD3BCLearner:
    """What TD3+BC keeps besides its online parameters (`OfflineState.learner`)."""

    target_actor: Any  # Polyak averages of params["actor"] and params["critic"]
    target_critic: Any
    actor_opt: Any
    critic_opt: Any


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
        return params, TD3BCLearner(
            target_actor=params["actor"],
            target_critic=params["critic"],
            actor_opt=adam(1.0).init(params["actor"]),
            critic_opt=adam(1.0).init(params["critic"]),
        )

    def act(self, state: OfflineState, obs, carry, reset, key, deterministic: bool = True):
        """The actor's action on the environment's bounds (no exploration noise: an
        offline policy is evaluated as it is)."""
        return self.to_env_action(self.actor.apply(state.params["actor"], obs)), carry

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

        actor_loss, grads = jax.value_and_grad(actor_loss_fn)(params["actor"])
        updated = adam_update(grads, learner.actor_opt, params["actor"], hp.actor_lr)
        actor, actor_opt = where_due(
            grad_step, c.policy_delay, updated, (params["actor"], learner.actor_opt)
        )
        target_actor, target_critic = offpolicy.update_target(
            (learner.target_actor, learner.target_critic),
            (actor, critic),
            hp.tau,
            grad_step,
            c.policy_delay,
        )
        learner = TD3BCLearner(
            target_actor=target_actor,
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
        )
        params = {"actor": actor, "critic": critic}
        metrics = {"loss": critic_loss, "actor_loss": actor_loss, "q_mean": q.mean()}
        return params, learner, metrics
