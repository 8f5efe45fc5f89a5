"""PPO: `init(key, hparams) -> PPOState` and the pure `update(state) -> (state, metrics)`.

One `update` collects `num_steps` transitions from `num_envs` vmapped
environments with the shared on-policy rollout (`jaxrl.rollout`, one `lax.scan`),
computes GAE, and runs `update_epochs` epochs of minibatch gradient steps, all inside
one traced function: the driver (`jaxrl.training.driver`) jits it, scans it over many
updates, vmaps it over seeds and sweeps, and shards it over devices.

The loss itself is in `losses.py`; the networks are `jaxrl.nn.ActorCritic` and
`jaxrl.nn.RecurrentActorCritic`; PPO's policy for the rollout (observation
normalisation, the actor, sampling) and its reward scaling are composed here from the
shared pieces of `jaxrl/rollout.py` and `jaxrl/acting.py`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, envs, prng, rollout
from jaxrl import config as cfg
from jaxrl.algorithms.ppo_common import (
    clip_gradients,
    learning_rows,
    ppo_epochs,
    ppo_optimizer,
)
from jaxrl.envs.optimistic_resets import OptimisticResets
from jaxrl.nn import ActorCritic, RecurrentActorCritic
from jaxrl.returns import bootstrap_truncated_rewards, gae
from jaxrl.running_stats import RunningStats, init_stats, normalize
from jaxrl.training.contract import EnvironmentAlgorithm
from jaxrl.updates import annealed_lr_scale

from . import losses
from .config import SWEEPABLE, PPOConfig

# `clip_gradients` moved to `ppo_common.py` (shared with IPPO and MAPPO); kept importable here.
__all__ = ["PPO", "PPOState", "Transition", "clip_gradients", "make"]


@struct.dataclass
class PPOState:
    """Everything a PPO run needs to continue exactly where it stopped."""

    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array  # last raw observation, (num_envs, ...)
    done: jax.Array  # whether the last step ended an episode, (num_envs,)
    rnn_carry: jax.Array | None  # (num_envs, rnn_hidden_size); None when feed-forward
    obs_stats: RunningStats
    return_stats: RunningStats  # statistics of the discounted return, for reward scaling
    discounted_return: jax.Array  # (num_envs,), with normalize_reward
    episodes: acting.EpisodeStats  # return and length of the running episodes, (num_envs,)
    key: jax.Array
    update_step: jax.Array  # number of completed updates
    hparams: Any  # PPOHyperParams: sweepable hyperparameters as float32 leaves


@struct.dataclass
class Transition:
    obs: jax.Array  # normalised observation the policy saw
    action: jax.Array  # raw sample (pre-squash / pre-clip for continuous actions)
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array  # scaled reward with the truncation bootstrap added
    done: jax.Array
    reset: jax.Array  # this step starts a new episode (recurrent carry reset)


class PPO(EnvironmentAlgorithm):
    """PPO for one environment and one static config: a fused-step algorithm
    (`jaxrl/training/contract.py`).

    Static structure (shapes, network sizes, flags) lives on this object;
    everything numeric that changes or may be swept lives in `PPOState`.
    """

    name = "ppo"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE
    progress_unit = "env_steps"
    # State fields with a per-environment leading axis (sharded over devices
    # when the agents alone do not divide evenly; see training/mesh.py).
    ENV_FIELDS = (
        "env_state",
        "obs",
        "done",
        "rnn_carry",
        "discounted_return",
        "episodes",
    )

    def __init__(self, config: PPOConfig, env: envs.Environment, env_params: Any):
        self.config = config.validate()
        self.steps_per_update = config.num_envs * config.num_steps
        self.num_updates = config.num_updates
        if config.reset_ratio > 1:  # shares fresh episode starts across the batch
            env = OptimisticResets(env, config.reset_ratio)
        self.env = env
        self.env_params = env_params
        action_space = env.action_space(env_params)
        self.discrete = isinstance(action_space, envs.spaces.Discrete)
        if not self.discrete and not isinstance(action_space, envs.spaces.Box):
            raise cfg.ConfigError(
                f"env={config.env!r}: PPO supports Discrete or Box action spaces, "
                f"got {action_space!r}"
            )
        if self.discrete and config.tanh_squash:
            raise cfg.ConfigError(
                f"invalid tanh_squash=True: env={config.env!r} has a discrete action space "
                f"{action_space!r}; tanh squashing applies only to continuous (Box) actions"
            )
        if not self.discrete and len(action_space.shape) != 1:
            raise cfg.ConfigError(
                f"env={config.env!r}: Box actions must be 1-D, got {action_space.shape}"
            )
        self.action_space = action_space
        self.action_dim = action_space.n if self.discrete else action_space.shape[0]
        obs_space = env.observation_space(env_params)
        if not isinstance(obs_space, envs.spaces.Box):
            # A structured observation (e.g. a Jumanji dict) has no array for the network.
            raise cfg.ConfigError(
                f"env={config.env!r}: PPO needs an array (Box) observation, got "
                f"{obs_space!r}; wrap the environment in "
                "jaxrl.envs.wrappers.FlattenObservation (one flat vector)"
            )
        self.obs_shape = tuple(obs_space.shape)
        common = dict(
            action_dim=self.action_dim,
            discrete=self.discrete,
            hidden_sizes=tuple(config.hidden_sizes),
            activation=config.activation,
            tanh_squash=config.tanh_squash,
            init_log_std=config.init_log_std,
        )
        if config.recurrent:
            self.network = RecurrentActorCritic(
                rnn_hidden_size=config.rnn_hidden_size,
                head_sizes=None if config.rnn_head_sizes is None else tuple(config.rnn_head_sizes),
                **common,
            )
        else:
            self.network = ActorCritic(**common)

    @property
    def schedule_follows_total(self) -> bool:
        """`anneal_lr` decays the learning rate to 0 at the last update of `total_steps`."""
        return self.config.anneal_lr

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PPOState:
        """The initial state; `params` (same tree as the network's) warm-starts the policy.
        The key is split the same way either way, so the rollout's stream is unchanged."""
        c = self.config
        key, k_params, k_env = jax.random.split(key, 3)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_env, c.num_envs)
        done = jnp.zeros((c.num_envs,), jnp.bool_)
        if c.recurrent:
            carry = jnp.zeros((c.num_envs, c.rnn_hidden_size), jnp.float32)
            fresh = lambda: self.network.init(k_params, carry, obs[None], done[None])  # noqa: E731
        else:
            carry = None
            fresh = lambda: self.network.init(k_params, obs)  # noqa: E731
        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        return PPOState(
            params=params,
            opt_state=self._optimizer(hparams, 1.0).init(params),
            env_state=env_state,
            obs=obs,
            done=jnp.ones((c.num_envs,), jnp.bool_),  # first step starts an episode
            rnn_carry=carry,
            obs_stats=init_stats(self.obs_shape),
            return_stats=init_stats(),
            discounted_return=jnp.zeros((c.num_envs,), jnp.float32),
            episodes=acting.EpisodeStats.zeros(c.num_envs),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def _optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
        """Clipping (`grad_clip`), then Adam, on one flat vector (`ppo_common.ppo_optimizer`),
        built from the (possibly traced, per-seed) hyperparameters each update."""
        c = self.config
        return ppo_optimizer(hp, lr_scale, c.adam_eps, c.grad_clip)

    # ------------------------------------------------------------------ acting
    def _policy(self, params, obs, carry, reset):
        """Runs the network on one step: `obs (B, ...)` -> `(carry, dist, value (B,))`."""
        if self.config.recurrent:
            carry, dist, value = self.network.apply(params, carry, obs[None], reset[None])
            return carry, jax.tree.map(lambda x: x[0], dist), value[0]
        dist, value = self.network.apply(params, obs)
        return carry, dist, value

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """Maps a raw policy sample to the environment's action space.

        Gaussian samples are clipped to the Box bounds (stored actions stay
        unclipped so log-probabilities are exact, as in SB3/CleanRL); tanh-
        squashed samples are rescaled from [-1, 1] to the bounds.
        """
        if self.discrete:
            return action
        low = jnp.asarray(self.action_space.low, jnp.float32)
        high = jnp.asarray(self.action_space.high, jnp.float32)
        if self.config.tanh_squash:
            return low + 0.5 * (jnp.tanh(action) + 1.0) * (high - low)
        return jnp.clip(action, low, high)

    def _normalize_obs(self, stats: RunningStats, obs: jax.Array) -> jax.Array:
        if not self.config.normalize_obs:
            return obs.astype(jnp.float32)
        return normalize(stats, obs, self.config.obs_clip)

    def eval_carry(self, num_episodes: int) -> jax.Array | None:
        """The recurrent carry evaluation episodes start from (None: feed-forward)."""
        if not self.config.recurrent:
            return None
        return jnp.zeros((num_episodes, self.config.rnn_hidden_size), jnp.float32)

    def act(self, state: PPOState, obs, carry, reset, key, deterministic: bool = True):
        """Evaluation policy: `(env_action, carry)` for a batch of observations."""
        obs_in = self._normalize_obs(state.obs_stats, obs)
        carry, dist, _ = self._policy(state.params, obs_in, carry, reset)
        action = dist.mode() if deterministic else dist.sample(key)
        return self.to_env_action(action), carry

    # ------------------------------------------------------------------ rollout
    def _rollout(self, state: PPOState) -> tuple[PPOState, Transition, dict[str, jax.Array]]:
        """Collects `num_steps` transitions from every environment (`jaxrl.rollout`).

        The policy normalises each observation (updating the running statistics), runs
        the network and samples; the shared rollout steps the environments and tracks
        the episodes; the rewards are then scaled (`rollout.scale_rewards`).
        Feed-forward networks run only the actor inside the sequential loop; the
        critic is evaluated afterwards, in one large batch, on every observation of the
        rollout, every `final_observation` (for the truncation bootstrap) and the last
        observation (for GAE). The parameters do not change during the rollout, so the
        values are the same, and one big matrix product is much cheaper than 128 small
        ones. A recurrent network's value is a head on the GRU state it computes
        anyway, so only its final-observation values are deferred.
        """
        c = self.config

        def policy(policy_state, obs, reset, key):
            obs_stats, carry = policy_state
            obs_stats, obs_in = self._observe(obs_stats, obs)
            carry, dist, value = self._rollout_policy(state.params, obs_in, carry, reset)
            action = dist.sample(key)
            extras = {"obs": obs_in, "log_prob": dist.log_prob(action), "value": value}
            return (obs_stats, carry), rollout.PolicyStep(
                action, extras, self.to_env_action(action)
            )

        def truncation_bootstrap_inputs(policy_state, final_observation):
            obs_stats, carry = policy_state
            return {"obs": self._normalize_obs(obs_stats, final_observation), "carry": carry}

        loop = rollout.EnvLoop(state.env_state, state.obs, state.done, state.episodes)
        loop, (obs_stats, rnn_carry), key, steps = rollout.rollout(
            self.env,
            self.env_params,
            policy,
            loop,
            (state.obs_stats, state.rnn_carry),
            state.key,
            c.num_steps,
            record_final=truncation_bootstrap_inputs if c.bootstrap_truncation else None,
        )
        return_stats, discounted_return, reward = self._scale_rewards(state, steps)
        traj = Transition(
            obs=steps.extras["obs"],
            action=steps.action,
            log_prob=steps.extras["log_prob"],
            value=steps.extras["value"],
            reward=reward,
            done=steps.done,
            reset=steps.reset,
        )
        start_carry = state.rnn_carry
        state = state.replace(
            key=key,
            env_state=loop.env_state,
            obs=loop.obs,
            done=loop.done,
            rnn_carry=rnn_carry,
            obs_stats=obs_stats,
            return_stats=return_stats,
            discounted_return=discounted_return,
            episodes=loop.episodes,
        )
        final = None
        if c.bootstrap_truncation:
            final = {**steps.final, "terminated": steps.terminated, "truncated": steps.truncated}
        traj, last_value = self._critic_after_rollout(state, traj, final)
        metrics = acting.episode_metrics(steps.finished)
        return state, traj, {**metrics, "_start_carry": start_carry, "_last_value": last_value}

    def _observe(self, stats: RunningStats, obs: jax.Array) -> tuple[RunningStats, jax.Array]:
        """The policy's input for `obs`, after adding `obs` to the running statistics."""
        if not self.config.normalize_obs:
            return stats, obs.astype(jnp.float32)
        return acting.normalize_obs(stats, obs, self.config.obs_clip)

    def _rollout_policy(self, params, obs_in: jax.Array, carry, reset: jax.Array):
        """`(carry, dist, value)` for one rollout step; the feed-forward value is deferred
        to `_critic_after_rollout` (None here)."""
        if self.config.recurrent:
            return self._policy(params, obs_in, carry, reset)
        return None, self.network.apply(params, obs_in, method="policy"), None

    def _scale_rewards(
        self, state: PPOState, steps: rollout.Trajectory
    ) -> tuple[RunningStats, jax.Array, jax.Array]:
        """`(return_stats, discounted_return, rewards for learning)`: scaled by the running
        std of the discounted return with normalize_reward, else the raw rewards."""
        c = self.config
        if not c.normalize_reward:
            return state.return_stats, state.discounted_return, steps.reward
        return rollout.scale_rewards(
            state.return_stats,
            state.discounted_return,
            steps.reward,
            steps.done,
            state.hparams.gamma,
            c.reward_clip,
        )

    def _critic_after_rollout(
        self, state: PPOState, traj: Transition, final: dict[str, jax.Array] | None
    ) -> tuple[Transition, jax.Array]:
        """Values the rollout in one batched critic pass: `(traj, V(last observation))`.

        Fills in feed-forward `traj.value` and, with `bootstrap_truncation`, adds
        `gamma * V(final_observation)` to the reward of every truncated step (`final`
        holds what the steps recorded for it; None without the bootstrap).
        """
        c = self.config
        last_obs_in = self._normalize_obs(state.obs_stats, state.obs)
        if c.recurrent:
            _, _, last_value = self._policy(state.params, last_obs_in, state.rnn_carry, state.done)
            if final is None:
                return traj, last_value
            final_value = self._values_after_step(state.params, final["carry"], final["obs"])
        else:
            # One critic pass over [rollout obs; final obs (with the bootstrap); last obs].
            t, b = c.num_steps, c.num_envs
            flat = lambda x: x.reshape((t * b,) + x.shape[2:])  # noqa: E731
            parts = [flat(traj.obs)] + ([] if final is None else [flat(final["obs"])])
            values = self.network.apply(
                state.params, jnp.concatenate([*parts, last_obs_in]), method="value"
            )
            traj = traj.replace(value=values[: t * b].reshape(t, b))
            last_value = values[len(parts) * t * b :]
            if final is None:
                return traj, last_value
            final_value = values[t * b : 2 * t * b].reshape(t, b)
        # Truncated episodes bootstrap from the value of their true last observation.
        reward = bootstrap_truncated_rewards(
            traj.reward, final["terminated"], final["truncated"], final_value, state.hparams.gamma
        )
        return traj.replace(reward=reward), last_value

    def _values_after_step(self, params, carry: jax.Array, obs: jax.Array) -> jax.Array:
        """Recurrent values of `obs (T, B, ...)` read from the GRU states `carry (T, B, H)`
        the rollout reached there (no reset: a final observation ends its episode)."""
        t, b = obs.shape[:2]
        _, _, value = self.network.apply(
            params,
            carry.reshape(t * b, -1),
            obs.reshape((1, t * b) + obs.shape[2:]),
            jnp.zeros((1, t * b), jnp.bool_),
        )
        return value.reshape(t, b)

    # ------------------------------------------------------------------ learning
    def _loss(self, params, hp, batch: Transition, advantages, returns, start_carry):
        c = self.config
        if c.recurrent:  # batch is (T, B_mb, ...), re-run the GRU over the sequence
            _, dist, value = self.network.apply(params, start_carry, batch.obs, batch.reset)
        else:
            dist, value = self.network.apply(params, batch.obs)
        return losses.ppo_loss(
            dist.log_prob(batch.action),
            dist.entropy(),
            value,
            batch.log_prob,
            batch.value,
            advantages,
            returns,
            clip_eps=hp.clip_eps,
            vf_clip_eps=hp.vf_clip_eps,
            vf_coef=hp.vf_coef,
            ent_coef=hp.ent_coef,
            clip_value=c.clip_value,
            normalize_advantages_=c.normalize_advantages,
            diagnostics=c.diagnostics,
        )

    def update(self, state: PPOState) -> tuple[PPOState, dict[str, jax.Array]]:
        """One PPO iteration: rollout, advantages, `update_epochs` of minibatch SGD
        (`ppo_common.ppo_epochs`)."""
        c, hp = self.config, state.hparams
        state, traj, rollout_metrics = self._rollout(state)
        start_carry = rollout_metrics.pop("_start_carry")
        last_value = rollout_metrics.pop("_last_value")
        advantages, returns = gae(
            traj.reward, traj.value, traj.done, last_value, hp.gamma, hp.gae_lambda
        )
        lr_scale = annealed_lr_scale(state.update_step, c.num_updates, c.anneal_lr)
        key, k_epochs = prng.split(state.key)
        params, opt_state, metrics = ppo_epochs(
            lambda params, *minibatch: self._loss(params, hp, *minibatch),
            self._optimizer(hp, lr_scale),
            state.params,
            state.opt_state,
            learning_rows(traj, advantages, returns, start_carry, sequences=c.recurrent),
            k_epochs,
            num_epochs=c.update_epochs,
            num_minibatches=c.num_minibatches,
            sequences=c.recurrent,
        )
        state = state.replace(
            params=params, opt_state=opt_state, key=key, update_step=state.update_step + 1
        )
        metrics.update(rollout_metrics)
        metrics["lr"] = hp.lr * lr_scale
        return state, metrics


def make(config: PPOConfig, env: envs.Environment | None = None, env_params: Any = None) -> PPO:
    """Builds PPO for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return PPO(config, env, env_params if env_params is not None else env.default_params)
