"""The environment API every jaxrl algorithm trains on (gymnax 1.0 compatible).

An environment is a stateless Python object holding static structure (shapes,
sizes); everything that changes lives in two pytrees:

* `EnvParams`: constants of the task (physics, time limit). A pytree, so a batch
  of params can be `vmap`ped for domain randomisation.
* `EnvState`: a `flax.struct` dataclass holding the dynamic state, always with
  an integer `time` field (steps taken in the current episode).

Subclasses implement `reset_env` and `step_env` (one transition, no reset, no
time limit) plus the two spaces. `Environment.step` adds what every algorithm
needs and no environment should re-implement: action validation at trace time,
time-limit truncation kept separate from termination, automatic reset, and
`info["final_observation"]`, the true last observation of an episode that just
ended (needed to bootstrap truncated episodes and to train world models).

Everything here is pure JAX: no Python control flow on traced values, so
`jit`, `vmap` and `lax.scan` apply to any environment.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import prng

from . import spaces

__all__ = ["EnvState", "EnvParams", "Environment", "StepResult", "require"]


def _is_concrete(value: Any) -> bool:
    """True for values whose content can be inspected without tracing."""
    if isinstance(value, jax.core.Tracer):
        return False
    return isinstance(value, (bool, int, float, np.ndarray, np.generic, jax.Array))


def require(params: Any, field: str, ok: Any, allowed: str) -> None:
    """Raises `ValueError` naming `field` when the concrete check `ok` fails.

    Skipped silently when the field is traced (inside `jit`/`vmap`), because a
    traced value cannot be inspected without a host sync; params are validated
    when they are built on the host (`make`, `replace`).
    """
    value = getattr(params, field)
    if not _is_concrete(value):
        return
    if not bool(np.all(np.asarray(ok(np.asarray(value))))):
        raise ValueError(
            f"{type(params).__name__}.{field} = {value!r} is invalid: must be {allowed}"
        )


@struct.dataclass
class EnvState:
    """Base environment state. Every state carries the step count of its episode."""

    time: jax.Array


@struct.dataclass
class EnvParams:
    """Base environment parameters.

    Attributes:
        max_steps_in_episode: Episodes are truncated (not terminated) after this
            many steps.
    """

    max_steps_in_episode: int = 1000

    def validate(self) -> None:
        """Checks concrete field values. Subclasses extend it and call `super()`.

        Called by `make` and by `reset`/`step` (where it costs nothing: traced
        fields are skipped). Not called on construction, because JAX rebuilds
        params with placeholder leaves (e.g. `vmap` `in_axes` trees).
        """
        require(self, "max_steps_in_episode", lambda v: v > 0, "a positive integer")


TState = TypeVar("TState", bound=EnvState)
TParams = TypeVar("TParams", bound=EnvParams)

# (obs, state, reward, terminated, truncated, info)
StepResult = tuple[Any, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]


class Environment(Generic[TState, TParams]):
    """Abstract JAX environment. See the module docstring for the contract.

    Class attributes a subclass may set (all only change how `step` computes
    its result, never the dynamics):

    * `stochastic_step` / `stochastic_reset`: whether `step_env` / `reset_env`
      draw from their key (see `step_is_stochastic` for params-dependent
      cases). `step` splits its key into a step key and a reset key only when
      both draw; otherwise the one that draws gets the whole key, which saves
      a Threefry hash per step. Set to `False` only when the key is unused.
    * `obs_from_state`: `reset_env` and `step_env` return
      `self.get_obs(state, params)` (a method the subclass then defines).
      `step` then builds the auto-reset observation from the selected state
      instead of selecting between two observations, so when the caller
      ignores `info["final_observation"]` the compiled step computes one
      observation rather than two.
    """

    stochastic_step: bool = True
    stochastic_reset: bool = True
    obs_from_state: bool = False

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self) -> TParams:
        return EnvParams()  # type: ignore[return-value]

    # ------------------------------------------------------------------ public API
    def reset(self, key: jax.Array, params: TParams | None = None) -> tuple[Any, TState]:
        """Starts a new episode: returns `(obs, state)`."""
        params = self.default_params if params is None else params
        _validate(params)
        return self.reset_env(key, params)

    def step(
        self,
        key: jax.Array,
        state: TState,
        action: Any,
        params: TParams | None = None,
    ) -> StepResult:
        """Advances one step, resetting automatically when the episode ends.

        Returns `(obs, state, reward, terminated, truncated, info)`. When the
        episode ended on this step, `obs` and `state` already belong to the
        next episode and `info["final_observation"]` holds the last observation
        of the finished one (otherwise it equals `obs`). `terminated` means the
        MDP reached a terminal state (do not bootstrap); `truncated` means the
        time limit cut the episode (bootstrap from `final_observation`). Both
        can be true at once, as in gymnasium; `terminated` takes precedence.
        """
        params = self.default_params if params is None else params
        _validate(params)
        spaces.check_action(self.action_space(params), action, self.name)
        key_step, key_reset = self.step_keys(key, params)
        obs_step, state_step, reward, terminated, info = self.step_env(
            key_step, state, action, params
        )
        truncated = self.is_truncated(state_step, params)
        done = jnp.logical_or(terminated, truncated)
        obs_reset, state_reset = self.next_episode(key_reset, params, state_step, done)
        state_next = _select(done, state_reset, state_step)
        if self.obs_from_state:
            obs_next = self.get_obs(state_next, params)
        else:
            obs_next = _select(done, obs_reset, obs_step)
        info = {**info, "final_observation": obs_step}
        return (
            obs_next,
            state_next,
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, jnp.bool_),
            jnp.asarray(truncated, jnp.bool_),
            info,
        )

    def step_batch(
        self, keys: jax.Array, state: TState, action: Any, params: TParams | None = None
    ) -> StepResult:
        """Steps a batch of copies (every leaf with a leading copy axis), one key each.

        `step` `vmap`ped over the copies (params shared). What `jaxrl.acting.step_envs`
        calls, so a wrapper that works across the batch (`OptimisticResets`, which
        shares fresh episode starts between copies) can override it; the outermost
        environment's `step_batch` is the one that runs.
        """
        params = self.default_params if params is None else params
        return jax.vmap(self.step, in_axes=(0, 0, 0, None))(keys, state, action, params)

    def step_keys(self, key: jax.Array, params: TParams) -> tuple[jax.Array, jax.Array]:
        """`step`'s key split: `(key for step_env, key for the auto-reset)`.

        Split in two only when both the step and the reset draw; otherwise the one
        that draws gets the whole key (see the class docstring).
        """
        if self.step_is_stochastic(params) and self.stochastic_reset:
            key_step, key_reset = prng.split(key)  # == jax.random.split(key)
            return key_step, key_reset
        return key, key  # at most one of the two draws from it

    def next_episode(
        self, key: jax.Array, params: TParams, state: TState, done: jax.Array
    ) -> tuple[Any, TState]:
        """The `(obs, state)` an episode ending on this step restarts from.

        `state` is the state the step reached and `done` whether its episode ended.
        Default: a fresh start, `reset_env(key, params)`, whatever `done` (`step`
        computes it on every step and selects it where `done`). Overridden where a
        restart is cheaper than a reset: MuJoCo Playground restarts from the copy's
        first state, which `state` keeps (as Playground's own training wrapper does),
        and a batched auto-reset drawing fewer fresh starts than copies
        (`OptimisticResets`) hands out one of its own, chosen from `done`.
        """
        del state, done
        return self.reset_env(key, params)

    def step_is_stochastic(self, params: TParams) -> bool:
        """Whether `step_env` draws from its key under `params` (a static Python bool).

        Defaults to `stochastic_step`; override when it depends on static params
        (e.g. Acrobot's torque noise).
        """
        return self.stochastic_step

    def is_truncated(self, state: TState, params: TParams) -> jax.Array:
        """Time limit: the episode has run `max_steps_in_episode` steps."""
        return state.time >= params.max_steps_in_episode

    # ------------------------------------------------------- implemented by subclasses
    def reset_env(self, key: jax.Array, params: TParams) -> tuple[Any, TState]:
        """Samples an initial state; returns `(obs, state)` with `state.time == 0`."""
        raise NotImplementedError

    def step_env(
        self, key: jax.Array, state: TState, action: Any, params: TParams
    ) -> tuple[Any, TState, jax.Array, jax.Array, dict[str, Any]]:
        """One transition without reset or time limit; must increment `state.time`.

        Returns `(obs, state, reward, terminated, info)`.
        """
        raise NotImplementedError

    def observation_space(self, params: TParams) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, params: TParams) -> spaces.Space:
        raise NotImplementedError

    @property
    def num_actions(self) -> int:
        """Number of discrete actions (gymnax compatibility)."""
        space = self.action_space(self.default_params)
        if not isinstance(space, spaces.Discrete):
            raise AttributeError(f"{self.name} has a continuous action space")
        return space.n

    def __repr__(self) -> str:
        return f"{self.name}()"


def _validate(params: Any) -> None:
    """Runs `params.validate()` when the params define it (adapted envs may not)."""
    validate = getattr(params, "validate", None)
    if callable(validate):
        validate()


def _select(pred: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Leaf-wise `where` over two pytrees of the same structure."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def params_fields(params: EnvParams) -> list[str]:
    """Names of the fields of a params dataclass."""
    return [f.name for f in dataclasses.fields(params)]
