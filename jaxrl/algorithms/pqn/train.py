"""PQN: `init(key, hparams) -> PQNState` and the pure `update(state) -> (state, metrics)`.

Parallel Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning") is Q-learning with the data pipeline of PPO: one `update` steps
`num_envs` vmapped environments `num_steps` times with an epsilon-greedy policy,
computes Peng's Q(lambda) targets backward over that rollout, and runs `num_epochs`
epochs of `num_minibatches` minibatch gradient steps on the squared TD error. No
replay buffer, no target network: the many parallel environments decorrelate the
data, LayerNorm in the Q-network keeps bootstrapping stable.

The Q(lambda) targets are `jaxrl.returns.q_lambda_targets`, the loss is in
`losses.py`, the Q-network in `networks.py`; stepping the environments and the
episode statistics come from `jaxrl/acting.py`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import acting, envs, prng
from jaxrl import config as cfg
from jaxrl.algorithms.pqn_common import (
    ParallelQLearner,
    next_max_q,
    td_epochs,
    time_limits_as_terminal,
)
from jaxrl.algorithms.qlearning import epsilon_greedy, resolve_torso
from jaxrl.nn.qnetwork import QNetwork
from jaxrl.returns import q_lambda_targets
from jaxrl.training.contract import EnvironmentAlgorithm
from jaxrl.updates import annealed_lr_scale

from . import losses
from .config import SWEEPABLE, PQNConfig


@struct.dataclass
class PQNState:
    """Everything a PQN run needs to continue exactly where it stopped."""

    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array  # last observation, (num_envs, ...)
    episodes: acting.EpisodeStats  # return and length of the running episodes, (num_envs,)
    key: jax.Array
    update_step: jax.Array  # int32: completed updates
    hparams: Any  # PQNHyperParams: sweepable hyperparameters as float32 leaves


@struct.dataclass
class Transition:
    obs: jax.Array  # observation the action was chosen in
    action: jax.Array
    reward: jax.Array  # scaled by reward_scale
    terminated: jax.Array  # as the targets see it (a time limit too, without the bootstrap)
    truncated: jax.Array  # a time limit to bootstrap through (all False without the bootstrap)
    max_q: jax.Array  # max_a Q(obs, a) under the rollout's parameters


class PQN(ParallelQLearner, EnvironmentAlgorithm):
    """PQN for one environment and one static config: a fused-step algorithm
    (`jaxrl/training/contract.py`).

    Static structure (shapes, network sizes, flags) lives on this object; everything
    numeric that changes or may be swept lives in `PQNState`.
    """

    name = "pqn"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE
    progress_unit = "env_steps"
    # State fields with a per-environment leading axis (sharded over devices when the
    # agents alone do not divide evenly; see training/mesh.py).
    ENV_FIELDS = ("env_state", "obs", "episodes")

    def __init__(self, config: PQNConfig, env: envs.Environment, env_params: Any):
        self.config = config.validate()
        self.steps_per_update = config.batch_size
        self.num_updates = config.num_updates
        self.env = env
        self.env_params = env_params
        action_space = env.action_space(env_params)
        if not isinstance(action_space, envs.spaces.Discrete):
            raise cfg.ConfigError(
                f"invalid env={config.env!r}: pqn needs a Discrete action space, got "
                f"{action_space!r}; for continuous actions use sac or td3 (or ppo)"
            )
        self.obs_shape = tuple(env.observation_space(env_params).shape)
        self.num_actions = int(action_space.n)
        self.network = QNetwork(
            action_dim=self.num_actions,
            hidden_sizes=tuple(config.hidden_sizes),
            norm=config.norm,
            torso=resolve_torso(config.network, self.obs_shape),
            conv_channels=config.conv_channels,
        )

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PQNState:
        """The initial state; `params` (same tree as the network's) warm-starts the
        Q-network. The key is split the same way either way."""
        c = self.config
        key, k_params, k_env = jax.random.split(key, 3)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_env, c.num_envs)
        fresh = lambda: self.network.init(k_params, obs)  # noqa: E731
        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        return PQNState(
            params=params,
            opt_state=self._optimizer(hparams, 1.0).init(params),
            env_state=env_state,
            obs=obs,
            episodes=acting.EpisodeStats.zeros(c.num_envs),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    # ------------------------------------------------------------------ acting
    def act(self, state: PQNState, obs, carry, reset, key, deterministic: bool = True):
        """Evaluation policy: `(action, carry)`; greedy, or epsilon-greedy with
        `eps_end` when not `deterministic`. PQN is feed-forward: `carry` passes through."""
        q_values = self.network.apply(state.params, obs)
        if deterministic:
            return jnp.argmax(q_values, axis=-1).astype(jnp.int32), carry
        return epsilon_greedy(key, q_values, state.hparams.eps_end), carry

    def _rollout(self, state: PQNState, epsilon: jax.Array):
        """`num_steps` epsilon-greedy steps of every environment:
        `(state, trajectory (T, B), next_q (T, B), finished episodes)`.

        `next_q[t]` is `max_a Q(s', a)` for the observation s' after step t. The acting
        pass computes Q of every observation anyway, so it is the next step's max-Q,
        and after the loop one batched pass gives the last observation's and, with
        `bootstrap_truncation`, the final observations' (the parameters do not change
        during the rollout, so the values are the same).
        """
        c, hp = self.config, state.hparams

        def step(state: PQNState, _):
            key, k_act, k_env = prng.split(state.key, 3)
            q_values = self.network.apply(state.params, state.obs)
            action = epsilon_greedy(k_act, q_values, epsilon)
            next_obs, env_state, reward, terminated, truncated, info = acting.step_envs(
                self.env, self.env_params, k_env, state.env_state, action
            )
            done = jnp.logical_or(terminated, truncated)
            episodes, finished = acting.track_episodes(state.episodes, reward, done)
            terminated, truncated = time_limits_as_terminal(
                terminated, truncated, c.bootstrap_truncation
            )
            transition = Transition(
                obs=state.obs,
                action=action,
                reward=reward.astype(jnp.float32) * hp.reward_scale,
                terminated=terminated,
                truncated=truncated,
                max_q=q_values.max(axis=-1),
            )
            final_obs = info["final_observation"] if c.bootstrap_truncation else None
            new_state = state.replace(key=key, env_state=env_state, obs=next_obs, episodes=episodes)
            return new_state, (transition, final_obs, finished)

        state, (traj, final_obs, finished) = jax.lax.scan(step, state, None, length=c.num_steps)
        # One Q pass over [final observations (with the bootstrap); last observation].
        parts = [] if final_obs is None else [final_obs.reshape((-1,) + final_obs.shape[2:])]
        after = self.network.apply(state.params, jnp.concatenate([*parts, state.obs])).max(-1)
        final_q = None
        if final_obs is not None:
            final_q = after[: -c.num_envs].reshape(c.num_steps, c.num_envs)
        next_q = next_max_q(
            traj.max_q, after[-c.num_envs :], final_q, traj.terminated, traj.truncated
        )
        return state, traj, next_q, finished

    # ------------------------------------------------------------------ learning
    def _loss(self, params, obs, action, targets):
        q_values = self.network.apply(params, obs)
        q_taken = jnp.take_along_axis(q_values, action[:, None], axis=-1)[:, 0]
        return losses.td_loss(q_taken, targets), q_taken.mean()

    def update(self, state: PQNState) -> tuple[PQNState, dict[str, jax.Array]]:
        """One PQN iteration: epsilon-greedy rollout, Q(lambda) targets, `num_epochs` of
        minibatch gradient steps on the TD error (`pqn_common`)."""
        c, hp = self.config, state.hparams
        epsilon = self.epsilon(state)
        state, traj, next_q, finished = self._rollout(state, epsilon)
        targets = q_lambda_targets(
            traj.reward, traj.terminated, traj.truncated, next_q, hp.gamma, hp.q_lambda
        )
        lr_scale = annealed_lr_scale(state.update_step, c.num_updates, c.anneal_lr)
        flat = lambda x: x.reshape((c.batch_size,) + x.shape[2:])  # noqa: E731
        key, k_epochs = prng.split(state.key)
        params, opt_state, metrics = td_epochs(
            self._loss,
            self._optimizer(hp, lr_scale),
            state.params,
            state.opt_state,
            (flat(traj.obs), flat(traj.action), flat(targets)),
            k_epochs,
            num_epochs=c.num_epochs,
            num_minibatches=c.num_minibatches,
        )
        state = state.replace(
            params=params, opt_state=opt_state, key=key, update_step=state.update_step + 1
        )
        return state, {
            **metrics,
            "epsilon": epsilon,
            "lr": hp.lr * lr_scale,
            **acting.episode_metrics(finished),
        }


def make(config: PQNConfig, env: envs.Environment | None = None, env_params: Any = None) -> PQN:
    """Builds PQN for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return PQN(config, env, env_params if env_params is not None else env.default_params)
