"""ReBRAC on the shared offline base (`jaxrl/algorithms/offline.py`).

TD3+BC's structure (Fujimoto & Gu 2021) with ReBRAC's changes (Tarasov et al. 2023):
LayerNorm actor and critics, the dataset's next action in every batch (`sample_batch`)
for the critic's behaviour-cloning penalty (`losses.rebrac_target`), and the actor's
loss `losses.rebrac_actor_loss` on the minimum of both critics, every `policy_delay`-th
step, with Polyak updates of the target actor and critics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
from flax import struct

from jaxrl import envs, prng
from jaxrl.algorithms.actor_critic import (
    DelayedLearner,
    DeterministicActor,
    TwinQ,
    critic_update,
    delayed_policy_step,
    smoothed_target_action,
)
from jaxrl.algorithms.offline import OfflineAgent
from jaxrl.replay import buffer, nstep
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, ReBRACConfig

__all__ = ["ReBRAC", "ReBRACBatch", "ReBRACLearner"]


# What it keeps besides its online parameters (`OfflineState.learner`).
ReBRACLearner = DelayedLearner


@struct.dataclass
class ReBRACBatch:
    """A one-step batch and the dataset's next actions (valid where the episode goes on)."""

    transitions: NStepBatch
    next_action: jax.Array  # (B, d): the action the dataset took at s'
    next_valid: jax.Array  # (B,) bool: False where the step ended its episode


class ReBRAC(OfflineAgent):
    """ReBRAC for one environment, dataset and static config. `params` is
    `{"actor", "critic"}`."""

    name = "rebrac"
    Config: ClassVar[type] = ReBRACConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: ReBRACConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation, norm = tuple(config.hidden_sizes), config.activation, config.layer_norm
        self.actor = DeterministicActor(self.action_dim, sizes, activation, norm)
        self.critic = TwinQ(sizes, activation, layer_norm=norm)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, ReBRACLearner]:
        networks = {"actor": (self.actor, "obs"), "critic": (self.critic, "obs_action")}
        params = self.init_networks(key, networks, params)
        return params, DelayedLearner.create(params)

    def sample_batch(
        self, dataset: buffer.ReplayState, key: jax.Array, hparams: Any
    ) -> ReBRACBatch:
        """The one-step batch plus the dataset's action at each s' (the next row of the
        ring, valid unless the sampled step ended its episode)."""
        drawn = buffer.sample(dataset, key, self.config.batch_size)
        after = buffer.gather(dataset, buffer.shift(dataset, drawn.indices, 1))
        now = buffer.gather(dataset, drawn.indices)
        return ReBRACBatch(
            transitions=nstep.nstep_batch(dataset, drawn.indices, 1, hparams.gamma),
            next_action=after.action,
            next_valid=~(now.terminated | now.truncated),
        )

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The actor's action."""
        return self.actor.apply(params["actor"], obs)

    def learn_step(
        self,
        params: Any,
        learner: ReBRACLearner,
        batch: ReBRACBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, ReBRACLearner, Mapping[str, jax.Array]]:
        """One critic step; every `policy_delay`-th step the actor's and the targets'."""
        c, hp, data = self.config, hparams, batch.transitions
        next_action = self.actor.apply(learner.target_actor, data.next_observation)
        noise = prng.normal(key, next_action.shape)
        next_action = smoothed_target_action(next_action, noise, hp.policy_noise, hp.noise_clip)
        next_q = self.critic.apply(learner.target_critic, data.next_observation, next_action)
        target = losses.rebrac_target(
            data, next_q, next_action, batch.next_action, batch.next_valid, hp.critic_bc
        )
        critic, critic_opt, critic_loss, q = critic_update(
            self.critic, params["critic"], learner.critic_opt, data, target, hp.critic_lr
        )

        def actor_loss_fn(p):
            pi = self.actor.apply(p, data.observation)
            q_pi = self.critic.apply(critic, data.observation, pi)
            return losses.rebrac_actor_loss(q_pi, pi, data.action, hp.actor_bc, c.normalize_q)

        params, learner, actor_loss = delayed_policy_step(
            actor_loss_fn, params["actor"], critic, learner, critic_opt, hp, grad_step,
            c.policy_delay,
        )  # fmt: skip
        metrics = {"loss": critic_loss, "actor_loss": actor_loss, "q_mean": q.mean()}
        return params, learner, metrics
