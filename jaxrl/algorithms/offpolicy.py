"""What every replay-based agent shares: acting into a replay buffer, and the replay ratio.

DQN, C51, SAC and TD3 differ in their networks and losses, and in nothing else that
the driver sees. This module holds the rest once:

* `OffPolicyConfig`: the fields every replay-based agent has (environments, replay
  buffer, replay ratio, n-step targets, prioritised replay, target networks), their
  docstrings (the CLI's `--help`) and their validation. An algorithm's config
  subclasses it and adds its own fields.
* `OffPolicyState`: the training state: online `params`, the algorithm's `learner`
  pytree (target parameters, optimiser states, a temperature...), the `replay`
  buffer (on device, one per agent under `vmap`, saved in checkpoints so a resumed
  run continues with the same data), and the environments.
* `OffPolicy`: an `Algorithm` with a fused step. One `update` is

      train_frequency steps of num_envs environments, each transition added to replay
      then, once learning_starts environment steps are done, gradient_steps times:
          sample batch_size transitions (uniformly or by priority) -> n-step targets
          -> the algorithm's `learn_step` -> new priorities (prioritised replay)

  so the replay ratio (gradient steps x batch per environment step) is
  `gradient_steps * batch_size / (num_envs * train_frequency)`. Before
  `learning_starts`, actions are uniformly random (as SB3 and CleanRL do), which
  fills the buffer with unbiased data.

A subclass provides `action_kind`, `init_learner`, `explore`, `learn_step` and `act`
(see their docstrings), and a `to_env_action` if its stored actions are not the
environment's. Transitions are `jaxrl.replay.Transition`s whose `next_observation`
is the true last observation at an episode end, so n-step targets bootstrap through
time limits and stop at terminations (`jaxrl/replay/nstep.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, envs, prng
from jaxrl import config as cfg
from jaxrl.replay import buffer, nstep, prioritised
from jaxrl.replay.nstep import NStepBatch, Transition
from jaxrl.training.contract import EnvironmentAlgorithm

ACTION_KINDS = ("discrete", "continuous")


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """Fields shared by every replay-based agent (see `jaxrl/algorithms/offpolicy.py`)."""

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`)."""
    total_steps: int = 100_000
    """Environment steps per agent (whole updates: rounded down to num_envs * train_frequency)."""
    num_envs: int = 1
    """Environments stepped in parallel (vmap) per agent."""
    train_frequency: int = 1
    """Steps of every environment between two learning phases (SB3's train_freq)."""
    gradient_steps: int = 1
    """Gradient steps per learning phase."""
    batch_size: int = 128
    """Transitions per gradient step."""
    buffer_size: int = 100_000
    """Replay capacity in transitions (per agent; num_envs columns of buffer_size // num_envs)."""
    learning_starts: int = 1_000
    """Environment steps (per agent) of uniformly random actions before learning starts."""
    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 1
    """Steps of the n-step return target (1: the one-step TD target)."""
    prioritised: bool = False
    """Prioritised replay by |TD error| (Schaul et al. 2016); False: uniform."""
    priority_exponent: float = 0.6
    """Prioritised replay: alpha, how strongly priorities skew sampling (0: uniform)."""
    importance_exponent: float = 0.4
    """Prioritised replay: initial beta of the importance weights, annealed to 1 over the run."""
    priority_epsilon: float = 1e-6
    """Prioritised replay: added to |TD error| so no transition gets priority 0."""
    tau: float = 1.0
    """Target network update: target <- tau * online + (1 - tau) * target (1.0: hard copy)."""
    target_update_interval: int = 1
    """Gradient steps between two target network updates."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from the final observation; False: treat as terminal.

    True is correct (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). False
    stores a truncated step as terminal, as rejax, sbx and SB3 by default do; use it to
    match their work in a benchmark.
    """
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the MLPs."""
    activation: str = "relu"
    """Hidden activation: tanh, relu, gelu or silu."""

    @property
    def steps_per_update(self) -> int:
        """Environment steps one update makes (all environments)."""
        return self.num_envs * self.train_frequency

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.steps_per_update

    @property
    def replay_ratio(self) -> float:
        """Sampled transitions per environment step (once learning has started)."""
        return self.gradient_steps * self.batch_size / self.steps_per_update

    def validate(self) -> OffPolicyConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "train_frequency", "gradient_steps")
        cfg.check_positive(self, "batch_size", "buffer_size", "n_step", "target_update_interval")
        cfg.check_positive(self, "priority_epsilon")
        cfg.check(self.learning_starts >= 0, "learning_starts", self.learning_starts, ">= 0")
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "priority_exponent", 0.0, 1.0)
        cfg.check_range(self, "importance_exponent", 0.0, 1.0)
        cfg.check(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1] (1.0: hard target copies)")
        cfg.check_choice(self, "activation", ("tanh", "relu", "gelu", "silu"))
        cfg.check(
            len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive layer sizes",
        )
        cfg.check(
            self.total_steps >= self.steps_per_update,
            "total_steps",
            self.total_steps,
            f">= num_envs * train_frequency = {self.steps_per_update} (one update)",
        )
        cfg.check(
            self.buffer_size >= self.num_envs,
            "buffer_size",
            self.buffer_size,
            f">= num_envs = {self.num_envs} (one row of the replay ring per step)",
        )
        capacity = (self.buffer_size // self.num_envs) * self.num_envs
        cfg.check(
            self.batch_size <= capacity,
            "batch_size",
            self.batch_size,
            f"<= the replay capacity {capacity} (buffer_size={self.buffer_size} rounded down "
            f"to a multiple of num_envs): a buffer smaller than a batch",
        )
        rows = self.buffer_size // self.num_envs
        cfg.check(
            self.n_step <= rows,
            "n_step",
            self.n_step,
            f"<= steps stored per environment, buffer_size // num_envs = {rows}",
        )
        run_steps = self.num_updates * self.steps_per_update
        cfg.check(
            self.learning_starts < run_steps,
            "learning_starts",
            self.learning_starts,
            f"< total_steps={self.total_steps} (in whole updates: {run_steps}), or the agent "
            "never learns",
        )
        return self


@struct.dataclass
class OffPolicyState:
    """Everything a replay-based run needs to continue exactly where it stopped."""

    params: Any  # the online networks (what is evaluated and exported)
    learner: Any  # the algorithm's: target networks, optimiser states, temperature, ...
    replay: Any  # buffer.ReplayState, or prioritised.PrioritisedState
    env_state: Any
    obs: jax.Array  # last observation, (num_envs, ...)
    episodes: acting.EpisodeStats  # return and length of the running episodes
    key: jax.Array
    update_step: jax.Array  # int32: completed updates
    grad_steps: jax.Array  # int32: gradient steps taken (target updates count them)
    hparams: Any  # the algorithm's sweepable hyperparameters as float32 leaves


class OffPolicy(EnvironmentAlgorithm):
    """A replay-based agent with a fused step (see the module docstring).

    Subclasses set `name`, `sweepable` (it must contain `gamma`: n-step targets read
    `hparams.gamma`) and `action_kind`, and implement:

    * `init_learner(key, hparams, params)` -> `(params, learner)`: fresh parameters
      (or the given ones, a warm start) and the algorithm's learner pytree;
    * `explore(params, learner, hparams, obs, key, update_step)` -> actions to store,
      one per environment (e.g. epsilon-greedy, or a sampled squashed Gaussian);
    * `learn_step(params, learner, batch, weights, hparams, key, grad_step)` ->
      `(params, learner, priorities, metrics)`: one gradient step on an
      `NStepBatch` with importance `weights` (all ones without prioritised
      replay); `priorities` are the new priorities of the batch (e.g. |TD error|),
      or None when the algorithm has no notion of them;
    * `act(state, obs, carry, reset, key, deterministic)` -> `(env_action, carry)`
      for evaluation.
    """

    progress_unit = "env_steps"
    action_kind: ClassVar[str] = "discrete"
    ENV_FIELDS = ("env_state", "obs", "episodes")

    def __init__(self, config: OffPolicyConfig, env: envs.Environment, env_params: Any):
        self.config = config.validate()
        self.steps_per_update = config.steps_per_update
        self.num_updates = config.num_updates
        self.env = env
        self.env_params = env_params
        self.action_space = env.action_space(env_params)
        self._check_action_space()
        self.obs_shape = tuple(env.observation_space(env_params).shape)
        if "gamma" not in self.sweepable:
            raise TypeError(f"{type(self).__name__}.sweepable must contain 'gamma'")

    def _check_action_space(self) -> None:
        space, c = self.action_space, self.config
        if self.action_kind == "discrete":
            if not isinstance(space, envs.spaces.Discrete):
                raise cfg.ConfigError(
                    f"invalid env={c.env!r}: {self.name} needs a Discrete action space, got "
                    f"{space!r}; for continuous actions use sac or td3 (or ppo)"
                )
            self.action_dim = int(space.n)
        else:
            if not isinstance(space, envs.spaces.Box) or len(space.shape) != 1:
                raise cfg.ConfigError(
                    f"invalid env={c.env!r}: {self.name} needs a 1-D Box (continuous) action "
                    f"space, got {space!r}; for discrete actions use dqn, c51 or pqn (or ppo)"
                )
            self.action_dim = int(space.shape[0])

    # ------------------------------------------------------------------ subclass API
    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def explore(
        self,
        params: Any,
        learner: Any,
        hparams: Any,
        obs: jax.Array,
        key: jax.Array,
        update_step: jax.Array,
    ) -> jax.Array:
        raise NotImplementedError

    def learn_step(
        self,
        params: Any,
        learner: Any,
        batch: NStepBatch,
        weights: jax.Array,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, Any, jax.Array | None, Mapping[str, jax.Array]]:
        raise NotImplementedError

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """The environment's action for a stored action (identity by default)."""
        return action

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> OffPolicyState:
        """Fresh (or warm-started) networks, an empty replay buffer, reset environments."""
        c = self.config
        key, k_learner, k_env = jax.random.split(key, 3)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_env, c.num_envs)
        params, learner = self.init_learner(k_learner, hparams, params)
        return OffPolicyState(
            params=params,
            learner=learner,
            replay=self._init_replay(obs[0]),
            env_state=env_state,
            obs=obs,
            episodes=acting.EpisodeStats.zeros(c.num_envs),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            grad_steps=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def _init_replay(self, example_obs: jax.Array) -> Any:
        c = self.config
        example = Transition(
            observation=example_obs,
            action=self._random_actions(jax.random.key(0), 1)[0],
            reward=jnp.float32(0),
            terminated=jnp.bool_(False),
            truncated=jnp.bool_(False),
            next_observation=example_obs,
        )
        capacity = (c.buffer_size // c.num_envs) * c.num_envs
        if c.prioritised:
            return prioritised.init(example, capacity, c.num_envs)
        return buffer.init(example, capacity, c.num_envs)

    def _random_actions(self, key: jax.Array, n: int) -> jax.Array:
        """Uniform random actions to store: integers, or points of [-1, 1]^d (continuous
        agents act in a normalised box; `to_env_action` maps it to the bounds)."""
        if self.action_kind == "discrete":
            return prng.randint(key, (n,), 0, self.action_dim)
        return prng.uniform(key, (n, self.action_dim), minval=-1.0, maxval=1.0, layout="jax")

    # ------------------------------------------------------------------ the update
    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array]]:
        """`train_frequency` environment steps into replay, then a learning phase."""
        c = self.config
        state, finished = jax.lax.scan(self._env_step, state, None, length=c.train_frequency)
        learning = (state.update_step + 1) * self.steps_per_update >= c.learning_starts
        state, metrics = learn_when(learning, self._learn_phase, state)
        metrics = {**metrics, **acting.episode_metrics(finished)}
        return state.replace(update_step=state.update_step + 1), metrics

    def _env_step(self, state: OffPolicyState, _: None):
        """One step of every environment; the transitions go into replay."""
        c = self.config
        key, k_act, k_random, k_env = prng.split(state.key, 4)
        env_steps = state.update_step * self.steps_per_update
        action = jnp.where(
            _expand_like(env_steps < c.learning_starts, c.num_envs, self.action_kind),
            self._random_actions(k_random, c.num_envs),
            self.explore(
                state.params, state.learner, state.hparams, state.obs, k_act, state.update_step
            ),
        )
        next_obs, env_state, reward, terminated, truncated, info = acting.step_envs(
            self.env, self.env_params, k_env, state.env_state, self.to_env_action(action)
        )
        done = jnp.logical_or(terminated, truncated)
        episodes, finished = acting.track_episodes(state.episodes, reward, done)
        if not c.bootstrap_truncation:  # a time limit stored as a terminal state
            terminated, truncated = done, jnp.zeros_like(truncated)
        transition = Transition(
            observation=state.obs,
            action=action,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            next_observation=info["final_observation"],  # == next_obs unless done
        )
        add = prioritised.add if c.prioritised else buffer.add
        state = state.replace(
            replay=add(state.replay, transition),
            env_state=env_state,
            obs=next_obs,
            episodes=episodes,
            key=key,
        )
        return state, finished

    def _learn_phase(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array]]:
        """`gradient_steps` gradient steps on batches sampled from replay."""
        c, hp = self.config, state.hparams
        beta = self._importance_exponent(state.update_step)

        def grad_step(carry, key):
            params, learner, replay, grad_steps = carry
            k_sample, k_learn = prng.split(key)
            batch, drawn, weights = self.replay_batch(learner, replay, k_sample, hp, beta)
            params, learner, priorities, metrics = self.learn_step(
                params, learner, batch, weights, hp, k_learn, grad_steps
            )
            self._check_priorities(priorities)
            if c.prioritised:
                replay = prioritised.set_priorities(
                    replay,
                    drawn.indices,
                    jax.lax.stop_gradient(priorities) + c.priority_epsilon,
                    c.priority_exponent,
                )
            return (params, learner, replay, grad_steps + 1), metrics

        key, k_steps = prng.split(state.key)
        carry = (state.params, state.learner, state.replay, state.grad_steps)
        (params, learner, replay, grad_steps), metrics = jax.lax.scan(
            grad_step, carry, prng.split(k_steps, c.gradient_steps)
        )
        state = state.replace(
            params=params, learner=learner, replay=replay, grad_steps=grad_steps, key=key
        )
        return state, {name: value.mean() for name, value in metrics.items()}

    def replay_batch(
        self, learner: Any, replay: Any, key: jax.Array, hparams: Any, beta: jax.Array
    ) -> tuple[NStepBatch, Any, jax.Array]:
        """`(batch, drawn, weights)`: `batch_size` transitions from replay (uniformly, or by
        priority with importance exponent `beta`) as n-step targets' inputs, the draw (its
        `indices` key new priorities) and the importance weights (ones when uniform). An
        agent that mixes in other data overrides it (RLPD: half from an offline dataset
        in its `learner`)."""
        c = self.config
        if c.prioritised:
            drawn = prioritised.sample(replay, key, c.batch_size, beta)
            ring, weights = replay.buffer, drawn.weights
        else:
            drawn = buffer.sample(replay, key, c.batch_size)
            ring, weights = replay, jnp.ones((c.batch_size,), jnp.float32)
        return nstep.nstep_batch(ring, drawn.indices, c.n_step, hparams.gamma), drawn, weights

    def _importance_exponent(self, update_step: jax.Array) -> jax.Array:
        """Prioritised replay's beta, annealed linearly to 1 over the run (Schaul et al.
        2016, sec. 3.4)."""
        beta0 = self.config.importance_exponent
        progress = jnp.minimum(update_step / self.num_updates, 1.0)
        return beta0 + (1.0 - beta0) * progress

    def _check_priorities(self, priorities: jax.Array | None) -> None:
        """At trace time: prioritised replay needs a loss that gives priorities."""
        if self.config.prioritised and priorities is None:
            raise cfg.ConfigError(
                f"invalid prioritised=True: {self.name} computes no per-sample priorities; "
                "use prioritised=False"
            )


def learn_when(ready: jax.Array, learn_phase: Any, state: Any) -> tuple[Any, dict[str, jax.Array]]:
    """`learn_phase(state)` once `ready` (e.g. enough steps stored to sample from), else the
    state unchanged and zeros shaped like the phase's metrics (Dreamer uses it too)."""
    shapes = jax.eval_shape(learn_phase, state)[1]
    skip = lambda s: (s, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))  # noqa: E731
    return jax.lax.cond(ready, learn_phase, skip, state)


def _expand_like(flag: jax.Array, num_envs: int, action_kind: str) -> jax.Array:
    """`flag` broadcast against a batch of actions: (num_envs,) or (num_envs, 1)."""
    shape = (num_envs,) if action_kind == "discrete" else (num_envs, 1)
    return jnp.broadcast_to(flag, shape)


# ----------------------------------------------------------------------------- target networks


def update_target(
    target: Any, online: Any, tau: jax.Array | float, grad_step: jax.Array, interval: int
) -> Any:
    """The target network after gradient step `grad_step` (0-based).

    Every `interval` gradient steps, `target <- tau * online + (1 - tau) * target`
    (Polyak averaging, Lillicrap et al. 2016; `tau = 1` is DQN's periodic hard copy,
    Mnih et al. 2015); in between, unchanged.
    """
    blended = optax.incremental_update(online, target, tau)
    if interval == 1:
        return blended
    due = (grad_step + 1) % interval == 0
    return jax.tree.map(lambda new, old: jnp.where(due, new, old), blended, target)


def td_target(batch: NStepBatch, next_value: jax.Array) -> jax.Array:
    """`reward + discount * V(next_observation)`: the n-step target of `jaxrl.replay.nstep`
    (discount is gamma^m, or 0 after a termination), without gradient."""
    return jax.lax.stop_gradient(batch.reward + batch.discount * next_value)
