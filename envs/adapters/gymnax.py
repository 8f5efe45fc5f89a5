"""Any gymnax environment through jaxrl's API: `envs.make("gymnax:Breakout-MinAtar")`.

gymnax 1.x already splits `terminated` from `truncated` and shares our
step/reset structure, so the adapter only delegates `reset_env`, `step_env`
and `is_truncated` to the gymnax environment and converts its spaces.
`Environment.step` then performs the same key split, auto-reset and
`final_observation` as gymnax's own `step`, so trajectories are identical to
gymnax's under the same keys (tested). Params are gymnax's own params
dataclass (a pytree), so `vmap` over params works as for native environments.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from .. import spaces
from ..core import Environment

__all__ = ["GymnaxEnvironment", "make", "convert_space"]

_INSTALL_HINT = (
    "the gymnax adapter needs gymnax: install the extra with `pip install 'jaxrl[test]'` "
    "(or `pip install gymnax`)"
)


def _import_gymnax() -> Any:
    try:
        import gymnax
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(_INSTALL_HINT) from err
    return gymnax


def convert_space(space: Any, dtype: Any = None) -> spaces.Space:
    """Converts a gymnax space to a jaxrl space (`dtype` overrides a Box's dtype)."""
    kind = type(space).__name__
    if kind == "Discrete":
        return spaces.Discrete(space.n, getattr(space, "dtype", np.int32))
    if kind == "Box":
        box_dtype = dtype if dtype is not None else space.dtype
        return spaces.Box(np.asarray(space.low), np.asarray(space.high), space.shape, box_dtype)
    if kind == "Dict":
        return spaces.Dict({k: convert_space(v) for k, v in space.spaces.items()})
    if kind == "Tuple":
        return spaces.Tuple([convert_space(s) for s in space.spaces])
    raise TypeError(f"cannot convert gymnax space {space!r}")


class GymnaxEnvironment(Environment):
    """Wraps a gymnax environment instance (`gymnax.make(id)[0]`).

    The wrapped environment is `.gymnax_env`. Observation Box dtypes follow
    the observations gymnax actually returns (e.g. bool for MinAtar, whose
    gymnax space declares float32).
    """

    def __init__(self, gymnax_env: Any, env_id: str | None = None):
        self.gymnax_env = gymnax_env
        self._name = env_id or gymnax_env.name
        self._obs_dtype = _observation_dtype(gymnax_env)

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> Any:
        return self.gymnax_env.default_params

    def reset_env(self, key: jax.Array, params: Any) -> tuple[Any, Any]:
        return self.gymnax_env.reset_env(key, params)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> Any:
        return self.gymnax_env.step_env(key, state, action, params)

    def is_truncated(self, state: Any, params: Any) -> jax.Array:
        return self.gymnax_env.is_truncated(state, params)

    def observation_space(self, params: Any) -> spaces.Space:
        return convert_space(self.gymnax_env.observation_space(params), self._obs_dtype)

    def action_space(self, params: Any) -> spaces.Space:
        return convert_space(self.gymnax_env.action_space(params))


def _observation_dtype(gymnax_env: Any) -> Any:
    """The dtype of the observation gymnax's `reset_env` returns (None if not an array)."""
    shapes = jax.eval_shape(gymnax_env.reset_env, jax.random.key(0), gymnax_env.default_params)
    obs = shapes[0]
    return getattr(obs, "dtype", None)


def make(env_id: str, **overrides: Any) -> tuple[GymnaxEnvironment, Any]:
    """Builds `gymnax.make(env_id)` as a jaxrl environment: returns `(env, params)`.

    Each override sets a field of gymnax's params (e.g. `max_steps_in_episode`)
    or, if it is not one, is passed to the gymnax constructor
    (e.g. `use_minimal_action_set`).
    """
    gymnax = _import_gymnax()
    if env_id not in gymnax.registered_envs:
        raise ValueError(
            f"Unknown gymnax environment {env_id!r}; "
            f"gymnax has: {', '.join(gymnax.registered_envs)}"
        )
    _, probe_params = gymnax.make(env_id)
    fields = {f.name for f in dataclasses.fields(probe_params)}
    ctor = {k: v for k, v in overrides.items() if k not in fields}
    try:
        gym_env, params = gymnax.make(env_id, **ctor)
    except TypeError as err:
        raise ValueError(
            f"make('gymnax:{env_id}'): unknown override(s) {sorted(ctor)}; "
            f"param fields: {sorted(fields)}; constructor error: {err}"
        ) from err
    param_overrides = {k: v for k, v in overrides.items() if k in fields}
    if param_overrides:
        params = params.replace(**param_overrides)
    return GymnaxEnvironment(gym_env, f"gymnax:{env_id}"), params
