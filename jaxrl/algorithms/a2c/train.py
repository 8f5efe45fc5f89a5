"""A2C on the lighter contract: the class declares its config, presets and sweepable
hyperparameters once, and the registry derives `default_config` and `make` from them.

One `update` runs the shared on-policy rollout (`jaxrl.rollout`: `num_envs`
environments, `num_steps` steps), computes n-step (GAE) advantages
(`jaxrl.returns.gae`) and takes one RMSProp step on the whole rollout. The network is
the shared feed-forward `jaxrl.nn.ActorCritic`. The driver jits, scans, vmaps and
shards `update` like every fused algorithm.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, envs, rollout
from jaxrl import config as cfg
from jaxrl.nn import ActorCritic
from jaxrl.returns import gae
from jaxrl.training.contract import EnvironmentAlgorithm

from .config import PRESETS, A2CConfig
from .losses import a2c_loss


@struct.dataclass
class A2CState:
    params: Any
    opt_state: Any
    envs: rollout.EnvLoop  # the environments, their next observations, running episodes
    key: jax.Array
    update_step: jax.Array
    hparams: Any


class A2C(EnvironmentAlgorithm):
    name = "a2c"
    Config = A2CConfig
    presets = PRESETS
    sweepable = ("lr", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm")
    trains_on = "env"
    headline_metric = "episode_return"
    ENV_FIELDS = ("envs",)

    def __init__(self, config: A2CConfig, env: envs.Environment, env_params: Any):
        self.config, self.env, self.env_params = config.validate(), env, env_params
        self.steps_per_update = config.num_envs * config.num_steps
        self.num_updates = config.num_updates
        space = env.action_space(env_params)
        discrete = isinstance(space, envs.spaces.Discrete)
        cfg.check(discrete, "env", config.env, "an environment with Discrete actions")
        self.network = ActorCritic(
            int(space.n),
            discrete=True,
            hidden_sizes=tuple(config.hidden_sizes),
            activation=config.activation,
        )

    def _optimizer(self, hp: Any) -> optax.GradientTransformation:
        return optax.chain(
            optax.clip_by_global_norm(hp.max_grad_norm),
            optax.scale_by_rms(decay=self.config.rms_decay, eps=self.config.rms_eps),
            optax.scale(-hp.lr),
        )

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> A2CState:
        key, k_params, k_env = jax.random.split(key, 3)
        loop = rollout.EnvLoop.reset(self.env, self.env_params, k_env, self.config.num_envs)
        params = self.network.init(k_params, loop.obs) if params is None else params
        opt_state = self._optimizer(hparams).init(params)
        return A2CState(params, opt_state, loop, key, jnp.zeros((), jnp.int32), hparams)

    def act(self, state: A2CState, obs, carry, reset, key, deterministic: bool = True):
        dist = self.network.apply(state.params, obs, method="policy")
        return (dist.mode() if deterministic else dist.sample(key)), carry

    def update(self, state: A2CState) -> tuple[A2CState, dict[str, jax.Array]]:
        """One A2C iteration: a `num_steps` rollout, then one gradient step on it.

        A time limit ends the n-step return like a termination (`traj.done`), as in
        Mnih et al. 2016; there is no truncation bootstrap.
        """
        hp = state.hparams

        def policy(_, obs, reset, key):
            dist = self.network.apply(state.params, obs, method="policy")
            return None, rollout.PolicyStep(action=dist.sample(key))

        loop, _, key, traj = rollout.rollout(
            self.env, self.env_params, policy, state.envs, None, state.key, self.config.num_steps
        )
        last_value = self.network.apply(state.params, loop.obs, method="value")

        def loss_fn(params):
            dist, value = jax.vmap(self.network.apply, in_axes=(None, 0))(params, traj.obs)
            target = jax.lax.stop_gradient(value)
            adv, returns = gae(traj.reward, target, traj.done, last_value, hp.gamma, hp.gae_lambda)
            log_prob, entropy = dist.log_prob(traj.action), dist.entropy()
            return a2c_loss(log_prob, entropy, value, adv, returns, hp.vf_coef, hp.ent_coef)

        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = self._optimizer(hp).update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        state = A2CState(params, opt_state, loop, key, state.update_step + 1, hp)
        return state, {**metrics, **acting.episode_metrics(traj.finished)}
