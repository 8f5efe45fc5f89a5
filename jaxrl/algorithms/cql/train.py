"""CQL on the offline SAC backbone (`jaxrl/algorithms/offline.py`, `SoftOfflineAgent`):
twin critics, and the conservative penalty (`losses.cql_penalty`) as the critics'
regulariser, estimated from `num_sampled_actions` actions of each proposal (uniform,
the policy at s, the policy at s'; Kumar et al. 2020, app. F)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from jaxrl import envs, prng
from jaxrl.algorithms.actor_critic import TwinQ
from jaxrl.algorithms.offline import SoftOfflineAgent
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, CQLConfig

__all__ = ["CQL"]


class CQL(SoftOfflineAgent):
    """CQL(H), continuous actions. `params` is `{"actor", "critic"}`."""

    name = "cql"
    Config: ClassVar[type] = CQLConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: CQLConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.critic = TwinQ(sizes, activation, layer_norm=config.layer_norm)

    def critic_regulariser(
        self, critic_params: Any, actor_params: Any, batch: NStepBatch, q: jax.Array,
        hparams: Any, key: jax.Array,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:  # fmt: skip
        """`cql_alpha * cql_penalty` from K uniform, K pi(s) and K pi(s') actions at s."""
        k = self.config.num_sampled_actions
        k_uniform, k_now, k_next = prng.split(key, 3)
        obs = batch.observation
        batch_size = q.shape[1]
        repeat = lambda x: jnp.repeat(x, k, axis=0)  # noqa: E731 - (B, ...) -> (B * K, ...)

        uniform = prng.uniform(
            k_uniform, (batch_size * k, self.action_dim), minval=-1.0, maxval=1.0, layout="jax"
        )
        log_uniform = -self.action_dim * math.log(2.0)  # density 2^-d on [-1, 1]^d

        def policy_actions(observations, key):
            dist = self.actor.apply(actor_params, repeat(observations))
            u = dist.sample(key)
            return jax.lax.stop_gradient((jnp.tanh(u), dist.log_prob(u)))

        now, log_now = policy_actions(obs, k_now)
        later, log_later = policy_actions(batch.next_observation, k_next)

        def q_at(actions):  # the critics at s and sampled actions: (N, B, K)
            return self.critic.apply(critic_params, repeat(obs), actions).reshape(-1, batch_size, k)

        sampled = jnp.concatenate(
            [
                losses.importance_weighted(q_at(uniform), log_uniform),
                losses.importance_weighted(q_at(now), log_now.reshape(batch_size, k)),
                losses.importance_weighted(q_at(later), log_later.reshape(batch_size, k)),
            ],
            axis=-1,
        )
        penalty = losses.cql_penalty(q, sampled, hparams.cql_temperature)
        return hparams.cql_alpha * penalty, {"cql_penalty": penalty}
