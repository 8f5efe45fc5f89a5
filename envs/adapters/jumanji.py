"""Jumanji (Bonnet et al. 2024) through jaxrl's API: `envs.make("jumanji:Snake-v1")`.

Any single-agent environment of `jumanji.registered_environments()`. Needs the
`jumanji` extra (`pip install 'jaxrl[jumanji]'`).

What the adapter changes (see `_suite.py`):

* **API**: Jumanji's `reset(key) -> (state, timestep)` and `step(state, action)` are
  delegated from `reset_env`/`step_env` on the raw environment (no Jumanji wrapper,
  so no Jumanji auto-reset); `Environment.step` auto-resets once. Jumanji's step is
  deterministic given its state (the state carries its own key), so only the reset
  draws from our key (`stochastic_step = False`).
* **Endings**: a `LAST` timestep with discount 0 is a termination; a `LAST` with a
  non-zero discount (Jumanji's own time limits) is a truncation, as is our
  `max_steps_in_episode` (default: out of reach, so Jumanji's own limits decide,
  exactly where Jumanji ends episodes).
* **Spaces**: Jumanji specs become ours: an action `DiscreteArray` -> `Discrete`; an
  action `MultiDiscreteArray` (several sub-actions, e.g. Minesweeper's row and column)
  -> one `Discrete` over all their combinations, unravelled in row-major order before
  Jumanji's step (so every discrete-action algorithm applies); in observations both are
  integer `Box`es; `BoundedArray` ->
  `Box` with its bounds; `Array` -> an unbounded `Box` (or the dtype's range); a
  structured observation (a NamedTuple such as Snake's grid, step count and action
  mask) -> a `Dict` of those, the observation a dict of arrays. Wrap it with
  `wrappers.FlattenObservation` for an MLP policy (see docs/envs.md).
* Multi-agent environments (a reward per agent) are refused with a clear error.

Overrides: `max_steps_in_episode`; every other keyword goes to the Jumanji
environment's constructor through `jumanji.make` (e.g. `num_rows=8` for Snake).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .. import spaces
from ..core import Environment
from ._suite import OUT_OF_REACH, SuiteParams, SuiteState, import_suite, unknown_id

__all__ = ["JumanjiEnvironment", "JumanjiState", "PACKAGE", "convert_spec", "ids", "make"]

PACKAGE = "jumanji"


def ids() -> list[str]:
    """Jumanji's registered ids (without the `jumanji:` prefix)."""
    jumanji = import_suite("jumanji", "Jumanji", "jumanji")
    return sorted(jumanji.registered_environments())


@struct.dataclass
class JumanjiState(SuiteState):
    """Jumanji's state, and whether Jumanji's own time limit ended the last step."""

    suite_truncated: jax.Array


def _spec_kind(spec: Any) -> str:
    return type(spec).__name__


def _sub_specs(spec: Any) -> dict[str, Any] | None:
    """The named sub-specs of a structured Jumanji spec, or None for an array spec."""
    # Array specs are `Spec`s too, with no children (an empty `_specs`).
    specs = getattr(spec, "_specs", None)
    return dict(specs) if isinstance(specs, dict) and specs else None


def convert_spec(spec: Any, action: bool = False) -> spaces.Space:
    """A Jumanji spec as a jaxrl space.

    For an action, `DiscreteArray` is a `Discrete` and `MultiDiscreteArray` one flattened
    `Discrete`; in an observation both are integer `Box`es with their bounds (a counter such
    as Snake's step count stays one number: `FlattenObservation` would one-hot a `Discrete`).
    """
    sub = _sub_specs(spec)
    if sub is not None:
        return spaces.Dict({name: convert_spec(s, action) for name, s in sub.items()})
    kind = _spec_kind(spec)
    if kind == "DiscreteArray" and action:
        return spaces.Discrete(int(spec.num_values), spec.dtype)
    if kind == "MultiDiscreteArray" and action:
        return spaces.Discrete(_num_combinations(spec), spec.dtype)
    dtype = np.dtype(spec.dtype)
    if kind in ("BoundedArray", "DiscreteArray", "MultiDiscreteArray"):
        return spaces.Box(np.asarray(spec.minimum), np.asarray(spec.maximum), spec.shape, dtype)
    if kind == "Array":
        if dtype == np.bool_:
            return spaces.Box(False, True, spec.shape, dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return spaces.Box(info.min, info.max, spec.shape, dtype)
        return spaces.Box(-np.inf, np.inf, spec.shape, dtype)
    raise TypeError(f"cannot convert Jumanji spec {spec!r}")


def _num_combinations(spec: Any) -> int:
    total = math.prod(int(n) for n in np.asarray(spec.num_values).reshape(-1))
    if total >= 2**31:
        raise ValueError(
            f"Jumanji action spec {spec!r} has {total} combinations, too many for one "
            "Discrete action (at most 2**31 - 1)"
        )
    return total


def _as_dict(obs: Any) -> Any:
    """A NamedTuple observation (possibly nested) as a dict; arrays unchanged."""
    if hasattr(obs, "_asdict"):
        return {k: _as_dict(v) for k, v in obs._asdict().items()}
    return obs


class JumanjiEnvironment(Environment[JumanjiState, SuiteParams]):
    """A raw Jumanji environment (no Jumanji wrappers); see the module docstring."""

    stochastic_step = False  # Jumanji's step draws from the key inside its own state

    def __init__(self, jumanji_env: Any, name: str):
        self.jumanji_env = jumanji_env
        self._name = name
        action_spec = jumanji_env.action_spec
        self._action_space = convert_spec(action_spec, action=True)
        self._obs_space = convert_spec(jumanji_env.observation_spec)
        # Row-major radices of a MultiDiscrete action (None for a plain one).
        self._radices = (
            np.asarray(action_spec.num_values).reshape(-1)
            if _spec_kind(action_spec) == "MultiDiscreteArray"
            else None
        )
        self._action_shape = tuple(getattr(action_spec, "shape", ()))

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> SuiteParams:
        return SuiteParams(max_steps_in_episode=OUT_OF_REACH)

    def _to_jumanji_action(self, action: jax.Array) -> jax.Array:
        if self._radices is None:
            return action
        digits = jnp.unravel_index(action, tuple(int(n) for n in self._radices))
        return jnp.stack(digits).reshape(self._action_shape).astype(self._action_space.dtype)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[Any, JumanjiState]:
        inner, timestep = self.jumanji_env.reset(key)
        state = JumanjiState(
            inner=inner, time=jnp.zeros((), jnp.int32), suite_truncated=jnp.zeros((), jnp.bool_)
        )
        return _as_dict(timestep.observation), state

    def step_env(
        self, key: jax.Array, state: JumanjiState, action: jax.Array, params: SuiteParams
    ) -> tuple[Any, JumanjiState, jax.Array, jax.Array, dict[str, Any]]:
        del key  # see stochastic_step
        inner, timestep = self.jumanji_env.step(state.inner, self._to_jumanji_action(action))
        last = timestep.last()
        terminated = jnp.logical_and(last, timestep.discount == 0)
        new_state = JumanjiState(
            inner=inner,
            time=state.time + 1,
            suite_truncated=jnp.logical_and(last, timestep.discount != 0),
        )
        return _as_dict(timestep.observation), new_state, timestep.reward, terminated, {}

    def is_truncated(self, state: JumanjiState, params: SuiteParams) -> jax.Array:
        """Our time limit, or Jumanji's own (a `LAST` step whose discount is not 0)."""
        return jnp.logical_or(state.time >= params.max_steps_in_episode, state.suite_truncated)

    def observation_space(self, params: SuiteParams) -> spaces.Space:
        return self._obs_space

    def action_space(self, params: SuiteParams) -> spaces.Space:
        return self._action_space


def make(env_id: str, **overrides: Any) -> tuple[JumanjiEnvironment, SuiteParams]:
    """Builds Jumanji environment `env_id`: returns `(env, params)`.

    `max_steps_in_episode` sets our time limit; every other keyword goes to Jumanji's
    constructor.
    """
    jumanji = import_suite("jumanji", "Jumanji", "jumanji")
    known = sorted(jumanji.registered_environments())
    if env_id not in known:
        raise unknown_id("Jumanji", env_id, known)
    overrides = dict(overrides)
    limit = overrides.pop("max_steps_in_episode", OUT_OF_REACH)
    try:
        raw = jumanji.make(env_id, **overrides)
    except TypeError as err:
        raise ValueError(
            f"make('jumanji:{env_id}'): unknown override(s) {sorted(overrides)} "
            f"(max_steps_in_episode, or the constructor's arguments): {err}"
        ) from err
    raw = getattr(raw, "unwrapped", raw)
    reward_shape = tuple(raw.reward_spec.shape)
    if reward_shape != ():
        raise ValueError(
            f"jumanji:{env_id} is a multi-agent environment (a reward of shape "
            f"{reward_shape} per step); the Jumanji adapter takes single-agent ones"
        )
    env = JumanjiEnvironment(raw, f"jumanji:{env_id}")
    params = SuiteParams(max_steps_in_episode=limit)
    params.validate()
    return env, params
