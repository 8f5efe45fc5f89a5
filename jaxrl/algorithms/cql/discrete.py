"""Discrete CQL on the shared offline base (`jaxrl/algorithms/offline.py`), for
DQN-style tasks (CartPole, MinAtar): the DQN family's `QNetwork`
(`jaxrl/algorithms/qlearning.py`), a Double-Q target from a Polyak-averaged target
network, and `losses.discrete_cql_penalty` added to the squared TD error (Kumar et al.
2020). `act` is greedy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import adam, adam_update
from jaxrl.algorithms.offline import OfflineAgent
from jaxrl.algorithms.qlearning import QNetwork, bootstrap_value, resolve_torso, take_action
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import DISCRETE_PRESETS, DISCRETE_SWEEPABLE, DiscreteCQLConfig

__all__ = ["DiscreteCQL", "DiscreteCQLLearner"]


@struct.dataclass
class DiscreteCQLLearner:
    target: Any  # Polyak average of params["q"]
    opt: Any  # Adam's moments


class DiscreteCQL(OfflineAgent):
    """CQL with a finite action set. `params` is `{"q": ...}`."""

    name = "cql-discrete"
    Config: ClassVar[type] = DiscreteCQLConfig
    presets = DISCRETE_PRESETS
    sweepable = DISCRETE_SWEEPABLE
    action_kind = "discrete"

    def __init__(self, config: DiscreteCQLConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        self.q_network = QNetwork(
            self.action_dim,
            tuple(config.hidden_sizes),
            config.activation,
            resolve_torso(config.network, self.obs_shape),
            config.conv_channels,
        )

    def init_learner(
        self, key: jax.Array, hparams: Any, params: Any
    ) -> tuple[Any, DiscreteCQLLearner]:
        params = self.init_networks(key, {"q": (self.q_network, "obs")}, params)
        return params, DiscreteCQLLearner(target=params["q"], opt=adam(1.0).init(params["q"]))

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The greedy action (offline policies are evaluated as they are)."""
        return jnp.argmax(self.q_network.apply(params["q"], obs), axis=-1).astype(jnp.int32)

    def learn_step(
        self,
        params: Any,
        learner: DiscreteCQLLearner,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, DiscreteCQLLearner, Mapping[str, jax.Array]]:
        """`0.5 (Q(s, a) - y)^2 + cql_alpha * penalty`, one Adam step, the target update."""
        hp = hparams
        next_target = self.q_network.apply(learner.target, batch.next_observation)
        next_online = (
            self.q_network.apply(params["q"], batch.next_observation)
            if self.config.double_q
            else None
        )
        target = offpolicy.td_target(batch, bootstrap_value(next_target, next_online))

        def loss_fn(p):
            q = self.q_network.apply(p, batch.observation)
            q_data = take_action(q, batch.action)
            td = 0.5 * jnp.mean((q_data - target) ** 2)
            penalty = losses.discrete_cql_penalty(q, batch.action)
            return td + hp.cql_alpha * penalty, (td, penalty, q_data)

        (loss, (td, penalty, q_data)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params["q"]
        )
        q, opt = adam_update(grads, learner.opt, params["q"], hp.critic_lr)
        target_net = offpolicy.update_target(learner.target, q, hp.tau, grad_step, 1)
        metrics = {"loss": loss, "td_loss": td, "cql_penalty": penalty, "q_mean": q_data.mean()}
        return {"q": q}, DiscreteCQLLearner(target=target_net, opt=opt), metrics
