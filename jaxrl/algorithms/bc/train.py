"""Behaviour cloning on the shared offline base (`jaxrl/algorithms/offline.py`).

The base samples dataset batches and evaluates; this module adds the policy and one
Adam step per gradient step on the shared behaviour-cloning losses
(`jaxrl/algorithms/behaviour_cloning.py`):

* a Box action space: TD3's `DeterministicActor` (`actor_critic.py`, the actor TD3+BC
  trains) on `mse_bc_loss`; TD3+BC with alpha = 0 minimises the same actor loss, but
  also trains critics it never uses and steps the actor every `policy_delay` steps;
* a Discrete one: the DQN family's `QNetwork` (`qlearning.py`: MLP, or MinAtar's
  convolution; the same network as cql-discrete's, so the two compare on equal terms)
  whose outputs are the categorical policy's logits, on `cross_entropy_bc_loss`.

`act` is the greedy policy (the deterministic actor's action, or the most likely
discrete action); `policy(..., deterministic=False)` samples the categorical one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import behaviour_cloning
from jaxrl.algorithms.actor_critic import DeterministicActor, adam, adam_update
from jaxrl.algorithms.offline import OfflineAgent
from jaxrl.algorithms.qlearning import QNetwork, resolve_torso
from jaxrl.replay.nstep import NStepBatch

from .config import PRESETS, SWEEPABLE, BCConfig

__all__ = ["BC", "BCLearner"]


@struct.dataclass
class BCLearner:
    """What behaviour cloning keeps besides its policy: Adam's moments."""

    opt: Any


class BC(OfflineAgent):
    """Behaviour cloning for one environment, dataset and static config, continuous or
    discrete by the environment's action space. `params` is `{"actor"}`."""

    name = "bc"
    Config: ClassVar[type] = BCConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: BCConfig, env: envs.Environment, env_params: Any):
        # The base checks the action space against `action_kind`: this learner takes both.
        discrete = isinstance(env.action_space(env_params), envs.spaces.Discrete)
        self.action_kind = "discrete" if discrete else "continuous"
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        if discrete:
            torso = resolve_torso(config.network, self.obs_shape)
            self.actor = QNetwork(self.action_dim, sizes, activation, torso, config.conv_channels)
        else:
            cfg.check(
                config.network in ("auto", "mlp"),
                "network",
                config.network,
                '"auto" or "mlp" for a continuous action space (the deterministic actor is an MLP)',
            )
            self.actor = DeterministicActor(self.action_dim, sizes, activation)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, BCLearner]:
        """A fresh policy (or the given one) and Adam's state."""
        params = self.init_networks(key, {"actor": (self.actor, "obs")}, params)
        return params, BCLearner(opt=adam(1.0).init(params["actor"]))

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The deterministic actor's action; for discrete actions the most likely one
        (or, not `deterministic`, a sample of the categorical policy)."""
        out = self.actor.apply(params["actor"], obs)
        if self.action_kind == "continuous":
            return out
        if deterministic:
            return jnp.argmax(out, axis=-1).astype(jnp.int32)
        return jax.random.categorical(key, out, axis=-1).astype(jnp.int32)

    def learn_step(
        self,
        params: Any,
        learner: BCLearner,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, BCLearner, Mapping[str, jax.Array]]:
        """One Adam step on the behaviour-cloning loss of the batch's (s, a) pairs."""
        discrete = self.action_kind == "discrete"

        def loss_fn(p):
            out = self.actor.apply(p, batch.observation)
            if discrete:
                return behaviour_cloning.cross_entropy_bc_loss(out, batch.action), out
            return behaviour_cloning.mse_bc_loss(out, batch.action), out

        (loss, out), grads = jax.value_and_grad(loss_fn, has_aux=True)(params["actor"])
        actor, opt = adam_update(grads, learner.opt, params["actor"], hparams.actor_lr)
        metrics = {"loss": loss}
        if discrete:
            metrics["action_accuracy"] = behaviour_cloning.action_accuracy(out, batch.action)
        return {"actor": actor}, BCLearner(opt=opt), metrics
