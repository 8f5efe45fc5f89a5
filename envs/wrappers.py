"""Composable environment wrappers (pure JAX; safe under `jit`, `vmap`, `lax.scan`).

Each wrapper is an `Environment` wrapping another one. It forwards the spaces,
params and `name`, and any attribute it does not define (`__getattr__`), so
`wrapper.num_actions` or `wrapper.get_obs` reach the wrapped environment;
`wrapper.unwrapped` is the innermost environment.

State. A wrapper that needs state keeps it in its own `flax.struct` dataclass
(a `WrapperState`) whose `inner_state` field holds the wrapped environment's
state. Reach the state of the environment one level down with
`state.inner_state`, the innermost (base) environment's state with
`unwrap_state(state)`, and the state of a particular wrapper with
`find_state(state, LogState)`. `state.time` forwards to the base state's step
count. Stateless wrappers (`ClipAction`, `FlattenObservation`) return the
wrapped state unchanged.

Auto-reset. Only the base environment resets (in `Environment.step`); wrappers
never call `reset` while stepping. Every wrapper sees the step's `terminated`
and `truncated` flags and treats `done = terminated | truncated` as "the
observation returned belongs to the next episode; the last one of the finished
episode is `info["final_observation"]`". So:

* wrappers transforming observations also transform `info["final_observation"]`
  (`FlattenObservation`, `FrameStack`, `NormalizeObservation`);
* wrappers with running statistics update them on the pre-reset observation
  (`info["final_observation"]`), never on a reset observation.

Truncation protocol. A wrapper that ends episodes early (`TimeLimit`) cannot
reset the environment itself without discarding the other wrappers' running
state. Instead, every wrapper implements
`wrapped_step(key, state, action, params, truncate)`, where `truncate` is
`None` or a boolean array "also truncate on this step": it is passed down the
stack, the base environment ORs it into its own time limit (via its
`is_truncated`) and auto-resets once, and every wrapper in between sees the
same `truncated` flag. This is why wrappers compose in any order.

Resetting with options. `reset(key, params, options)` passes `options` down the
stack; `NormalizeObservation` reads `options["obs_stats"]` and `ScaleReward`
reads `options["reward_stats"]` to start from given statistics (for example,
the frozen training statistics during evaluation).

Shared pieces. The running statistics are `jaxrl.running_stats`'s, and the episode
and reward-scaling arithmetic is `jaxrl.acting`'s (`track_episodes`, `scale_reward`),
the same functions agents call in their own rollouts.

Recommended order (innermost first), as in PureJaxRL:
`LogWrapper(TimeLimit(env))` then observation/reward normalisation outside,
so the logged returns are those of the raw rewards.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.acting import EpisodeStats, scale_reward, track_episodes
from jaxrl.running_stats import RunningStats, init_stats, normalize, update_stats

from . import spaces
from .core import Environment, StepResult

__all__ = [
    "Wrapper",
    "WrapperState",
    "unwrap_state",
    "find_state",
    "step_with_truncation",
    "LogWrapper",
    "LogState",
    "NormalizeObservation",
    "NormalizeObservationState",
    "ScaleReward",
    "ScaleRewardState",
    "CheckAction",
    "ClipAction",
    "FlattenObservation",
    "FrameStack",
    "FrameStackState",
    "TimeLimit",
    "TimeLimitState",
]

Options = Mapping[str, Any] | None


# --------------------------------------------------------------------------- base


@struct.dataclass
class WrapperState:
    """Base state of a stateful wrapper: the wrapped environment's state plus own fields."""

    inner_state: Any

    @property
    def time(self) -> jax.Array:
        """Step count of the current episode (from the base environment's state)."""
        return self.inner_state.time


def unwrap_state(state: Any) -> Any:
    """The base environment's state inside any stack of wrapper states."""
    while isinstance(state, WrapperState):
        state = state.inner_state
    return state


def find_state(state: Any, state_type: type) -> Any:
    """The outermost state of type `state_type` in a stack of wrapper states."""
    while True:
        if isinstance(state, state_type):
            return state
        if not isinstance(state, WrapperState):
            raise ValueError(f"no {state_type.__name__} in this state stack")
        state = state.inner_state


def step_with_truncation(
    env: Environment,
    key: jax.Array,
    state: Any,
    action: Any,
    params: Any,
    truncate: jax.Array | None,
) -> StepResult:
    """Steps `env`, additionally truncating the episode where `truncate` is true.

    Wrappers receive `truncate` through `wrapped_step`. A base environment gets
    a shallow copy whose `is_truncated` also returns `truncate`, and runs its
    own `step`: the auto-reset logic stays that of `Environment.step` (or the
    environment's override, which must take its time limit from
    `self.is_truncated`).
    """
    if isinstance(env, Wrapper):
        return env.wrapped_step(key, state, action, params, truncate)
    if truncate is None:
        return env.step(key, state, action, params)
    forced = copy.copy(env)
    own_limit = env.is_truncated
    forced.is_truncated = lambda s, p: jnp.logical_or(own_limit(s, p), truncate)
    return forced.step(key, state, action, params)


def _reset_with_options(
    env: Environment, key: jax.Array, params: Any, options: Options
) -> tuple[Any, Any]:
    if isinstance(env, Wrapper):
        return env.wrapped_reset(key, params, options)
    return env.reset(key, params)


class Wrapper(Environment):
    """Base wrapper: forwards everything to the wrapped environment.

    Subclasses override `wrapped_reset` and/or `wrapped_step` (see the module
    docstring for the truncation protocol), and the spaces they change.
    """

    def __init__(self, env: Environment):
        self._env = env

    # Forwarding ---------------------------------------------------------------
    @property
    def env(self) -> Environment:
        """The wrapped environment (one level down)."""
        return self._env

    @property
    def unwrapped(self) -> Environment:
        """The innermost, unwrapped environment."""
        env = self._env
        while isinstance(env, Wrapper):
            env = env.env
        return env

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def default_params(self) -> Any:
        return self._env.default_params

    def observation_space(self, params: Any) -> spaces.Space:
        return self._env.observation_space(params)

    def action_space(self, params: Any) -> spaces.Space:
        return self._env.action_space(params)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found normally; guard against recursion
        # before `_env` exists (copy/pickle).
        if name.startswith("__") or name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._env!r})"

    # Public API -----------------------------------------------------------------
    def reset(self, key: jax.Array, params: Any = None, options: Options = None) -> tuple[Any, Any]:
        """Starts a new episode: `(obs, state)`; `options` are passed down the stack."""
        params = self.default_params if params is None else params
        return self.wrapped_reset(key, params, options)

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        """Steps with auto-reset, as `Environment.step`."""
        params = self.default_params if params is None else params
        return self.wrapped_step(key, state, action, params, None)

    # Overridden by subclasses -----------------------------------------------------
    def wrapped_reset(self, key: jax.Array, params: Any, options: Options) -> tuple[Any, Any]:
        """Resets the wrapped environment (forwarding `options`)."""
        return _reset_with_options(self._env, key, params, options)

    def wrapped_step(
        self, key: jax.Array, state: Any, action: Any, params: Any, truncate: jax.Array | None
    ) -> StepResult:
        """Steps the wrapped environment, also truncating where `truncate` is true."""
        return step_with_truncation(self._env, key, state, action, params, truncate)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        raise NotImplementedError("wrappers reset through `reset` / `wrapped_reset`")

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> Any:
        raise NotImplementedError("wrappers step through `step` / `wrapped_step`")


def _done(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    return jnp.logical_or(terminated, truncated)


# --------------------------------------------------------------------------- logging


@struct.dataclass
class LogState(WrapperState):
    """Episode accumulators (current episode) and the last finished episode's totals."""

    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    timestep: jax.Array


class LogWrapper(Wrapper):
    """Records episode returns and lengths (PureJaxRL's names) in `info`.

    Adds to `info` on every step:

    * `returned_episode`: bool, an episode ended on this step (same as `done`);
    * `done`: `terminated | truncated`;
    * `episode_return` / `episode_length`: return (float32) and length of the
      episode that just ended, valid where `returned_episode` (0 elsewhere);
    * `returned_episode_returns` / `returned_episode_lengths`: those of the last
      finished episode, carried forward until the next one ends;
    * `timestep`: total steps taken by this copy since `reset`.

    Logs the reward it sees, so place it inside reward-transforming wrappers.
    """

    def wrapped_reset(self, key: jax.Array, params: Any, options: Options) -> tuple[Any, LogState]:
        obs, inner = super().wrapped_reset(key, params, options)
        zero_f, zero_i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
        return obs, LogState(inner, zero_f, zero_i, zero_f, zero_i, zero_i)

    def wrapped_step(
        self, key: jax.Array, state: LogState, action: Any, params: Any, truncate: Any
    ) -> StepResult:
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        done = _done(terminated, truncated)
        running = EpisodeStats(state.episode_returns, state.episode_lengths)
        running, ended = track_episodes(running, jnp.asarray(reward, jnp.float32), done)
        ret, length = ended.episode_return, ended.episode_length
        new_state = LogState(
            inner_state=inner,
            episode_returns=running.episode_return,
            episode_lengths=running.episode_length,
            returned_episode_returns=jnp.where(done, ret, state.returned_episode_returns),
            returned_episode_lengths=jnp.where(done, length, state.returned_episode_lengths),
            timestep=state.timestep + 1,
        )
        info = {
            **info,
            "done": done,
            "returned_episode": done,
            "episode_return": jnp.where(done, ret, 0.0),
            "episode_length": jnp.where(done, length, 0),
            "returned_episode_returns": new_state.returned_episode_returns,
            "returned_episode_lengths": new_state.returned_episode_lengths,
            "timestep": new_state.timestep,
        }
        return obs, new_state, reward, terminated, truncated, info


def _box_or_raise(space: spaces.Space, wrapper: str, what: str) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"{wrapper} needs a Box {what} space, got {space!r}")
    return space


# --------------------------------------------------------------------- observation normalisation


@struct.dataclass
class NormalizeObservationState(WrapperState):
    stats: RunningStats


class NormalizeObservation(Wrapper):
    """Normalises observations by running mean and variance (per copy by default).

    Statistics are updated (unless `update_stats=False`) with the reset
    observation and then with every step's pre-reset observation
    (`info["final_observation"]`, which is normalised with the same statistics
    as `obs`). Observations become float32 `(obs - mean) / sqrt(var + epsilon)`,
    clipped to `[-clip, clip]` when `clip` is set.

    Each `vmap`ped copy keeps its own statistics. To share them across a batch,
    pass `axis_name` and vmap the environment with the same `axis_name` (both
    `reset` and `step`): every update then merges the batch's samples. To
    combine independent statistics after the fact, use `jaxrl.running_stats.merge_stats`.
    Start from given statistics with `reset(key, params, {"obs_stats": stats})`.
    """

    def __init__(
        self,
        env: Environment,
        epsilon: float = 1e-8,
        clip: float | None = None,
        update_stats: bool = True,
        axis_name: str | None = None,
    ):
        super().__init__(env)
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        self.update_stats = bool(update_stats)
        self.axis_name = axis_name
        obs_space = env.observation_space(env.default_params)
        _box_or_raise(obs_space, "NormalizeObservation", "observation")

    def observation_space(self, params: Any) -> spaces.Box:
        shape = self._env.observation_space(params).shape
        bound = np.inf if self.clip is None else self.clip
        return spaces.Box(-bound, bound, shape, jnp.float32)

    def _normalize(self, obs: jax.Array, stats: RunningStats) -> jax.Array:
        return normalize(stats, obs, self.clip, self.epsilon)

    def _update(self, stats: RunningStats, obs: jax.Array) -> RunningStats:
        return update_stats(stats, obs, self.axis_name) if self.update_stats else stats

    def wrapped_reset(
        self, key: jax.Array, params: Any, options: Options
    ) -> tuple[jax.Array, NormalizeObservationState]:
        obs, inner = super().wrapped_reset(key, params, options)
        stats = (options or {}).get("obs_stats")
        stats = init_stats(jnp.shape(obs)) if stats is None else stats
        stats = self._update(stats, obs)
        return self._normalize(obs, stats), NormalizeObservationState(inner, stats)

    def wrapped_step(
        self,
        key: jax.Array,
        state: NormalizeObservationState,
        action: Any,
        params: Any,
        truncate: Any,
    ) -> StepResult:
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        final = info["final_observation"]
        stats = self._update(state.stats, final)
        info = {**info, "final_observation": self._normalize(final, stats)}
        new_state = NormalizeObservationState(inner, stats)
        return self._normalize(obs, stats), new_state, reward, terminated, truncated, info


# --------------------------------------------------------------------------- reward scaling


@struct.dataclass
class ScaleRewardState(WrapperState):
    discounted_return: jax.Array
    stats: RunningStats


class ScaleReward(Wrapper):
    """Divides rewards by the running std of the discounted return (Engstrom et al. 2020).

    Keeps `G = gamma * G + reward`, reset to 0 after every episode end
    (terminated or truncated), updates running statistics of `G` and returns
    `reward / sqrt(var(G) + epsilon)` (no mean subtraction, as gymnasium's
    `NormalizeReward`). Unlike gymnasium, `G` restarts at the start of each
    episode rather than being zeroed on the terminal step itself, so the
    terminal reward is accumulated like any other. Statistics are per copy
    unless `axis_name` is given (see `NormalizeObservation`); start from given
    statistics with `reset(key, params, {"reward_stats": stats})`.
    """

    def __init__(
        self,
        env: Environment,
        gamma: float = 0.99,
        epsilon: float = 1e-8,
        update_stats: bool = True,
        axis_name: str | None = None,
    ):
        super().__init__(env)
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.update_stats = bool(update_stats)
        self.axis_name = axis_name

    def wrapped_reset(
        self, key: jax.Array, params: Any, options: Options
    ) -> tuple[Any, ScaleRewardState]:
        obs, inner = super().wrapped_reset(key, params, options)
        stats = (options or {}).get("reward_stats")
        stats = init_stats(()) if stats is None else stats
        return obs, ScaleRewardState(inner, jnp.zeros((), jnp.float32), stats)

    def wrapped_step(
        self, key: jax.Array, state: ScaleRewardState, action: Any, params: Any, truncate: Any
    ) -> StepResult:
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        stats, discounted_return, scaled = scale_reward(
            state.stats,
            state.discounted_return,
            jnp.asarray(reward, jnp.float32),
            _done(terminated, truncated),
            self.gamma,
            epsilon=self.epsilon,
            update=self.update_stats,
            axis_name=self.axis_name,
        )
        new_state = ScaleRewardState(inner, discounted_return, stats)
        return obs, new_state, scaled, terminated, truncated, info


# --------------------------------------------------------------------------- actions


class ClipAction(Wrapper):
    """Clips continuous actions to the wrapped Box action space's bounds.

    The outer action space reports the same bounds (it is what the policy
    should aim for); any real-valued action of the right shape is accepted and
    clipped before it reaches the environment. The bounds are those of
    `action_space(params)` for the params passed to `step`; when the params
    are traced (e.g. `vmap`ped for domain randomisation) they cannot be read
    while tracing, and the bounds of `default_params` are used instead.
    """

    def __init__(self, env: Environment):
        super().__init__(env)
        self._default_space = _box_or_raise(
            env.action_space(env.default_params), "ClipAction", "action"
        )

    def wrapped_step(
        self, key: jax.Array, state: Any, action: jax.Array, params: Any, truncate: Any
    ) -> StepResult:
        space = _space_at(self._env.action_space, params, self._default_space)
        clipped = jnp.clip(action, space.low, space.high).astype(space.dtype)
        return super().wrapped_step(key, state, clipped, params, truncate)


class CheckAction(Wrapper):
    """Raises when an action's value lies outside the action space: a debugging aid.

    `Environment.step` checks an action's shape and dtype while tracing, for free; its
    value cannot be checked without the host, so an out-of-range action does what the
    reference implementation does with it (CartPole, like Gymnax and Gymnasium's
    arithmetic: any action but 1 pushes left). Wrapped in `CheckAction`, every step
    calls back to the host (`jax.debug.callback`), which raises a `ValueError` naming
    the action and the space, and the computation fails with it. That costs a host
    round trip per step: use it while debugging a policy, not for training.
    """

    def __init__(self, env: Environment):
        super().__init__(env)
        self._default_space = env.action_space(env.default_params)

    def wrapped_step(
        self, key: jax.Array, state: Any, action: jax.Array, params: Any, truncate: Any
    ) -> StepResult:
        space = _space_at(self._env.action_space, params, self._default_space)
        jax.debug.callback(
            functools.partial(_raise_unless_contained, name=self.name, space=repr(space)),
            space.contains(action),
            action,
        )
        return super().wrapped_step(key, state, action, params, truncate)


def _raise_unless_contained(contained: Any, action: Any, *, name: str, space: str) -> None:
    """`CheckAction`'s host side: `contained` and `action` carry any vmapped axes."""
    contained, action = np.asarray(contained), np.asarray(action)
    if not contained.all():
        bad = action[~contained] if contained.ndim else action  # the offending ones
        raise ValueError(f"{name}: action {bad.reshape(-1)[:8].tolist()} is not in {space}")


def _space_at(space_fn: Any, params: Any, fallback: spaces.Space) -> spaces.Space:
    """`space_fn(params)` evaluated eagerly while tracing, or `fallback` if params are traced."""
    try:
        with jax.ensure_compile_time_eval():
            return space_fn(params)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return fallback


# --------------------------------------------------------------------------- observation shape


def _flat_size(space: spaces.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return space.n
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape, dtype=np.int64))
    if isinstance(space, spaces.Dict):
        return sum(_flat_size(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return sum(_flat_size(s) for s in space.spaces)
    raise TypeError(f"FlattenObservation: unsupported space {space!r}")


def _flat_bounds(space: spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(space, spaces.Discrete):
        return np.zeros(space.n), np.ones(space.n)
    if isinstance(space, spaces.Box):
        return space.low.astype(np.float64).ravel(), space.high.astype(np.float64).ravel()
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
    lows, highs = zip(*(_flat_bounds(s) for s in subs), strict=True)
    return np.concatenate(lows), np.concatenate(highs)


def _flat_dtype(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Box):
        return space.dtype
    if isinstance(space, spaces.Discrete):
        return jnp.dtype(jnp.float32)
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
    return jnp.result_type(*(_flat_dtype(s) for s in subs))


def _flatten(space: spaces.Space, x: Any, dtype: Any) -> jax.Array:
    if isinstance(space, spaces.Discrete):
        return jax.nn.one_hot(x, space.n, dtype=dtype)
    if isinstance(space, spaces.Box):
        return jnp.ravel(x).astype(dtype)
    if isinstance(space, spaces.Dict):
        parts = [_flatten(s, x[name], dtype) for name, s in space.spaces.items()]
    else:
        parts = [_flatten(s, v, dtype) for s, v in zip(space.spaces, x, strict=True)]
    return jnp.concatenate(parts)


class FlattenObservation(Wrapper):
    """Flattens observations into one vector (Discrete parts one-hot, as gymnasium).

    Dict sub-observations are concatenated in the space's key order.
    `info["final_observation"]` is flattened too. The layout comes from the
    observation space at `default_params` (shapes are static structure).
    """

    def __init__(self, env: Environment):
        super().__init__(env)
        self._inner_space = env.observation_space(env.default_params)
        self._dtype = _flat_dtype(self._inner_space)
        _flat_size(self._inner_space)  # fails early on unsupported spaces

    def observation_space(self, params: Any) -> spaces.Box:
        inner = self._env.observation_space(params)
        low, high = _flat_bounds(inner)
        return spaces.Box(low, high, (_flat_size(inner),), _flat_dtype(inner))

    def _flat(self, obs: Any, params: Any) -> jax.Array:
        return _flatten(self._inner_space, obs, self._dtype)

    def wrapped_reset(self, key: jax.Array, params: Any, options: Options) -> tuple[Any, Any]:
        obs, state = super().wrapped_reset(key, params, options)
        return self._flat(obs, params), state

    def wrapped_step(
        self, key: jax.Array, state: Any, action: Any, params: Any, truncate: Any
    ) -> StepResult:
        obs, state, reward, terminated, truncated, info = super().wrapped_step(
            key, state, action, params, truncate
        )
        info = {**info, "final_observation": self._flat(info["final_observation"], params)}
        return self._flat(obs, params), state, reward, terminated, truncated, info


@struct.dataclass
class FrameStackState(WrapperState):
    frames: jax.Array  # the stacked observation, oldest frame first


class FrameStack(Wrapper):
    """Concatenates the last `num_frames` observations along the last axis.

    An observation of shape `(..., C)` becomes `(..., C * num_frames)`, oldest
    frame first (scalar observations become vectors of `num_frames`). After a
    reset (explicit or automatic) the stack is filled with the first frame;
    `info["final_observation"]` is the stack ending at the finished episode's
    last frame.
    """

    def __init__(self, env: Environment, num_frames: int):
        super().__init__(env)
        if int(num_frames) < 1:
            raise ValueError(f"FrameStack: num_frames must be >= 1, got {num_frames}")
        self.num_frames = int(num_frames)
        _box_or_raise(env.observation_space(env.default_params), "FrameStack", "observation")

    def observation_space(self, params: Any) -> spaces.Box:
        inner = self._env.observation_space(params)
        low, high = np.atleast_1d(inner.low), np.atleast_1d(inner.high)
        reps = (1,) * (low.ndim - 1) + (self.num_frames,)
        low, high = np.tile(low, reps), np.tile(high, reps)
        return spaces.Box(low, high, low.shape, inner.dtype)

    def _fill(self, obs: jax.Array) -> jax.Array:
        frame = jnp.atleast_1d(obs)
        return jnp.concatenate([frame] * self.num_frames, axis=-1)

    def _push(self, frames: jax.Array, obs: jax.Array) -> jax.Array:
        frame = jnp.atleast_1d(obs)
        return jnp.concatenate([frames[..., frame.shape[-1] :], frame], axis=-1)

    def wrapped_reset(
        self, key: jax.Array, params: Any, options: Options
    ) -> tuple[jax.Array, FrameStackState]:
        obs, inner = super().wrapped_reset(key, params, options)
        frames = self._fill(obs)
        return frames, FrameStackState(inner, frames)

    def wrapped_step(
        self, key: jax.Array, state: FrameStackState, action: Any, params: Any, truncate: Any
    ) -> StepResult:
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        final = self._push(state.frames, info["final_observation"])
        frames = jnp.where(_done(terminated, truncated), self._fill(obs), final)
        info = {**info, "final_observation": final}
        return frames, FrameStackState(inner, frames), reward, terminated, truncated, info


# --------------------------------------------------------------------------- time limit


@struct.dataclass
class TimeLimitState(WrapperState):
    steps: jax.Array  # steps taken in the current episode, counted by this wrapper

    @property
    def time(self) -> jax.Array:
        return self.steps


class TimeLimit(Wrapper):
    """Truncates episodes after `max_steps` steps, counted by its own step counter.

    The truncation is passed down the stack (see the module docstring), so the
    base environment auto-resets and every inner wrapper sees `truncated`. The
    wrapped environment's own limit (`params.max_steps_in_episode`) still
    applies when it is shorter: the effective limit is the smaller of the two.
    To make episodes longer than the environment's default, raise
    `max_steps_in_episode` instead (e.g. `envs.make(id, max_steps_in_episode=n)`).
    """

    def __init__(self, env: Environment, max_steps: int):
        super().__init__(env)
        if int(max_steps) < 1:
            raise ValueError(f"TimeLimit: max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)

    def wrapped_reset(
        self, key: jax.Array, params: Any, options: Options
    ) -> tuple[Any, TimeLimitState]:
        obs, inner = super().wrapped_reset(key, params, options)
        return obs, TimeLimitState(inner, jnp.zeros((), jnp.int32))

    def wrapped_step(
        self, key: jax.Array, state: TimeLimitState, action: Any, params: Any, truncate: Any
    ) -> StepResult:
        steps = state.steps + 1
        limit = steps >= self.max_steps
        truncate = limit if truncate is None else jnp.logical_or(truncate, limit)
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        steps = jnp.where(_done(terminated, truncated), 0, steps)
        return obs, TimeLimitState(inner, steps), reward, terminated, truncated, info
