"""A2C on the lighter contract: the class declares its config, presets and sweepable
hyperparameters once, and the registry derives `default_config` and `make` from them.

One `update` steps `num_envs` environments `num_steps` times (`jaxrl.acting`), computes
n-step (GAE) advantages (`jaxrl.returns.gae`) and takes one RMSProp step on the whole
rollout. The driver jits, scans, vmaps and shards it like every fused algorithm.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, envs, prng
from jaxrl import config as cfg
from jaxrl import nn as jnn
from jaxrl.returns import gae
from jaxrl.training.contract import EnvironmentAlgorithm

from .config import PRESETS, A2CConfig
from .losses import a2c_loss


class ActorCritic(nn.Module):
    """Separate MLPs for the policy's logits and the value (orthogonal init)."""

    num_actions: int
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jnn.Categorical, jax.Array]:
        x = jnn.flatten_obs(obs, 1)
        actor = jnn.MLP(self.hidden_sizes, self.activation)(x)
        logits = jnn.Dense(self.num_actions, kernel_init=jnn.orthogonal(0.01))(actor)
        critic = jnn.MLP(self.hidden_sizes, self.activation)(x)
        return jnn.Categorical(logits), jnn.Dense(1, kernel_init=jnn.orthogonal(1.0))(critic)[:, 0]


@struct.dataclass
class A2CState:
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array  # (num_envs, ...)
    episodes: acting.EpisodeStats
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
    ENV_FIELDS = ("env_state", "obs", "episodes")

    def __init__(self, config: A2CConfig, env: envs.Environment, env_params: Any):
        self.config, self.env, self.env_params = config.validate(), env, env_params
        self.steps_per_update = config.num_envs * config.num_steps
        self.num_updates = config.num_updates
        space = env.action_space(env_params)
        discrete = isinstance(space, envs.spaces.Discrete)
        cfg.check(discrete, "env", config.env, "an environment with Discrete actions")
        self.network = ActorCritic(int(space.n), tuple(config.hidden_sizes), config.activation)

    def _optimizer(self, hp: Any) -> optax.GradientTransformation:
        c = self.config
        return optax.chain(
            optax.clip_by_global_norm(hp.max_grad_norm),
            optax.scale_by_rms(decay=c.rms_decay, eps=c.rms_eps),
            optax.scale(-hp.lr),
        )

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> A2CState:
        key, k_params, k_env = jax.random.split(key, 3)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_env, self.config.num_envs)
        params = self.network.init(k_params, obs) if params is None else params
        episodes = acting.EpisodeStats.zeros(self.config.num_envs)
        opt_state = self._optimizer(hparams).init(params)
        step = jnp.zeros((), jnp.int32)
        return A2CState(params, opt_state, env_state, obs, episodes, key, step, hparams)

    def act(self, state: A2CState, obs, carry, reset, key, deterministic: bool = True):
        dist, _ = self.network.apply(state.params, obs)
        return (dist.mode() if deterministic else dist.sample(key)), carry

    def update(self, state: A2CState) -> tuple[A2CState, dict[str, jax.Array]]:
        """One A2C iteration: a `num_steps` rollout, then one gradient step on it."""
        hp = state.hparams

        def step(state: A2CState, _):
            key, k_act, k_env = prng.split(state.key, 3)
            action = self.network.apply(state.params, state.obs)[0].sample(k_act)
            obs, env_state, reward, term, trunc, _ = acting.step_envs(
                self.env, self.env_params, k_env, state.env_state, action
            )
            done = jnp.logical_or(term, trunc)  # a time limit ends the return too
            episodes, finished = acting.track_episodes(state.episodes, reward, done)
            transition = (state.obs, action, reward, done)
            state = state.replace(key=key, env_state=env_state, obs=obs, episodes=episodes)
            return state, (transition, finished)

        n = self.config.num_steps
        state, ((obs, action, reward, done), finished) = jax.lax.scan(step, state, None, n)
        last_value = self.network.apply(state.params, state.obs)[1]

        def loss_fn(params):
            dist, value = jax.vmap(self.network.apply, in_axes=(None, 0))(params, obs)
            target = jax.lax.stop_gradient(value)
            adv, returns = gae(reward, target, done, last_value, hp.gamma, hp.gae_lambda)
            log_prob, entropy = dist.log_prob(action), dist.entropy()
            return a2c_loss(log_prob, entropy, value, adv, returns, hp.vf_coef, hp.ent_coef)

        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = self._optimizer(hp).update(grads, state.opt_state, state.params)
        state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            update_step=state.update_step + 1,
        )
        return state, {**metrics, **acting.episode_metrics(finished)}
