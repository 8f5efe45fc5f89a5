"""Brax environments through jaxrl's API: `envs.make("brax:ant", backend="positional")`,
or with the physics backend in the id, `envs.make("brax:hopper@positional")`, so that a
config's `env` string (what `jaxrl train --env` takes) can choose it.

Wraps the raw environment from `brax.envs.get_environment` (no Brax wrappers).
Brax's own episode wrapper folds the time limit into `done` and reports it as
`info["truncation"]`; here the time limit is ours instead
(`params.max_steps_in_episode`, default 1000, a truncation), so Brax's `done`
is always a true termination. Actions are a Box in [-1, 1] of
`env.action_size`; observations a float32 Box (or a Dict of Boxes when the
Brax environment returns a dict). Brax steps are deterministic: the step key
is unused; resets use the key. The Brax state is `state.brax_state` and its
`metrics` come back as `info["metrics"]`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from .. import spaces
from ..core import Environment, EnvParams, EnvState

__all__ = ["BACKENDS", "BraxEnvironment", "BraxParams", "BraxState", "make", "split_backend"]

BACKENDS = ("generalized", "positional", "spring", "mjx")
"""Brax's physics pipelines (`brax.envs.base.PipelineEnv`); without one in the id or the
overrides, the environment's own default (`generalized` for Brax's locomotion tasks)."""

_INSTALL_HINT = (
    "the Brax adapter needs brax, which is not a jaxrl dependency: `pip install brax` "
    "(it pulls in mujoco; check it keeps your jax version)"
)


def _import_brax_envs() -> Any:
    try:
        from brax import envs as brax_envs
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(_INSTALL_HINT) from err
    return brax_envs


@struct.dataclass
class BraxState(EnvState):
    brax_state: Any
    time: jax.Array


@struct.dataclass
class BraxParams(EnvParams):
    max_steps_in_episode: int = 1000


class BraxEnvironment(Environment[BraxState, BraxParams]):
    """A Brax `Env` (the raw one, without Brax's training wrappers); see the module docstring."""

    stochastic_step = False  # only the reset draws: `step` hands it the whole key

    def __init__(self, brax_env: Any, name: str):
        self.brax_env = brax_env
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def reset_env(self, key: jax.Array, params: BraxParams) -> tuple[Any, BraxState]:
        brax_state = self.brax_env.reset(key)
        return brax_state.obs, BraxState(brax_state=brax_state, time=jnp.zeros((), jnp.int32))

    def step_env(
        self, key: jax.Array, state: BraxState, action: jax.Array, params: BraxParams
    ) -> tuple[Any, BraxState, jax.Array, jax.Array, dict[str, Any]]:
        del key  # Brax dynamics are deterministic (hence `stochastic_step = False`).
        brax_state = self.brax_env.step(state.brax_state, action)
        terminated = brax_state.done > 0.5
        new_state = BraxState(brax_state=brax_state, time=state.time + 1)
        return (
            brax_state.obs,
            new_state,
            brax_state.reward,
            terminated,
            {"metrics": brax_state.metrics},
        )

    def observation_space(self, params: BraxParams) -> spaces.Space:
        size = self.brax_env.observation_size
        if isinstance(size, dict):
            return spaces.Dict({k: _unbounded(v) for k, v in size.items()})
        return _unbounded(size)

    def action_space(self, params: BraxParams) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.brax_env.action_size,), jnp.float32)


def _unbounded(size: int | tuple[int, ...]) -> spaces.Box:
    shape = (size,) if isinstance(size, int) else tuple(size)
    return spaces.Box(-jnp.inf, jnp.inf, shape, jnp.float32)


def make(name: str, **overrides: Any) -> tuple[BraxEnvironment, BraxParams]:
    """Builds Brax environment `name`: returns `(env, params)`.

    `name` may end in `@<backend>` (one of `BACKENDS`: `"hopper@positional"`), the same
    as the override `backend=`. `max_steps_in_episode` sets our time limit; every other
    override goes to `brax.envs.get_environment` (e.g. `backend="positional"`).
    """
    env_id = f"brax:{name}"
    name, backend = split_backend(name)
    if backend is not None:
        if "backend" in overrides:
            raise ValueError(
                f"brax:{name}@{backend}: the backend is given twice (in the id and as "
                f"backend={overrides['backend']!r}); give it once"
            )
        overrides = {**overrides, "backend": backend}
    brax_envs = _import_brax_envs()
    fields = {f.name for f in dataclasses.fields(BraxParams)}
    param_overrides = {k: v for k, v in overrides.items() if k in fields}
    ctor = {k: v for k, v in overrides.items() if k not in fields}
    try:
        brax_env = brax_envs.get_environment(name, **ctor)
    except KeyError as err:
        known = ", ".join(sorted(getattr(brax_envs, "_envs", {})))
        raise ValueError(f"Unknown Brax environment {name!r}; Brax has: {known}") from err
    return BraxEnvironment(brax_env, env_id), BraxParams(**param_overrides)


def split_backend(name: str) -> tuple[str, str | None]:
    """`"hopper@positional"` -> `("hopper", "positional")`; `"hopper"` -> `("hopper", None)`.
    Checked before brax is imported: an unknown backend names the allowed ones."""
    base, sep, backend = name.partition("@")
    if not sep:
        return name, None
    if backend not in BACKENDS:
        raise ValueError(
            f"invalid Brax backend {backend!r} in 'brax:{name}': one of {', '.join(BACKENDS)} "
            "(brax:<name>@<backend>)"
        )
    return base, backend
