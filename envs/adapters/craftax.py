"""Craftax (Matthews et al. 2024) in jaxrl: `envs.make("craftax:Craftax-Classic-Symbolic-v1")`.

Four ids: Craftax-Classic and full Craftax, each with symbolic (a flat float vector)
or pixel (an RGB image in [0, 1]) observations; 17 (Classic) or 43 (full) discrete
actions. Needs the `craftax` extra (`pip install 'jaxrl[craftax]'`).

What the adapter changes (see `_suite.py`): it wraps Craftax's environment *without*
its auto-reset (`make_craftax_env_from_name(id, auto_reset=False)`) and delegates
`reset_env` and `step_env`; `Environment.step` auto-resets once. Craftax ends an
episode on death *or* at `max_timesteps` and reports both as `done`; here Craftax's
`max_timesteps` is set out of reach, so its `done` is a true termination (death, or
full Craftax's win), and the time limit is ours, `max_steps_in_episode` (default:
Craftax's own `max_timesteps`), a truncation. With the same keys, a trajectory equals
Craftax's own auto-resetting environment's (same key split, tested), with
`terminated | truncated` equal to its `done`. The step's `info` is Craftax's
(achievements, `discount`).

Overrides: `max_steps_in_episode`, and any other field of Craftax's `EnvParams`
(e.g. `day_length`); `static_env_params` (a Craftax `StaticEnvParams`: map size and
similar shapes) goes to the constructor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .. import spaces
from ..core import Environment
from ._suite import OUT_OF_REACH, SuiteParams, SuiteState, import_suite, split_overrides, unknown_id
from .gymnax import convert_space

__all__ = ["CraftaxEnvironment", "IDS", "PACKAGE", "ids", "make"]

PACKAGE = "craftax"
IDS = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
)


def ids() -> list[str]:
    """The ids this adapter makes (without the `craftax:` prefix)."""
    return list(IDS)


class CraftaxEnvironment(Environment[SuiteState, SuiteParams]):
    """A Craftax environment without its own auto-reset; see the module docstring."""

    def __init__(self, craftax_env: Any, name: str):
        self.craftax_env = craftax_env
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> SuiteParams:
        inner = self.craftax_env.default_params
        return SuiteParams(
            max_steps_in_episode=int(inner.max_timesteps),
            inner=inner.replace(max_timesteps=OUT_OF_REACH),
        )

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, SuiteState]:
        obs, inner = self.craftax_env.reset_env(key, params.inner)
        return obs, SuiteState(inner=inner, time=jnp.zeros((), jnp.int32))

    def step_env(
        self, key: jax.Array, state: SuiteState, action: jax.Array, params: SuiteParams
    ) -> tuple[jax.Array, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        obs, inner, reward, done, info = self.craftax_env.step_env(
            key, state.inner, action, params.inner
        )
        return obs, SuiteState(inner=inner, time=state.time + 1), reward, done, info

    def observation_space(self, params: SuiteParams) -> spaces.Space:
        return convert_space(self.craftax_env.observation_space(params.inner))

    def action_space(self, params: SuiteParams) -> spaces.Space:
        return convert_space(self.craftax_env.action_space(params.inner))


def make(env_id: str, **overrides: Any) -> tuple[CraftaxEnvironment, SuiteParams]:
    """Builds Craftax environment `env_id` (one of `IDS`): returns `(env, params)`."""
    craftax_env_module = import_suite("craftax.craftax_env", "Craftax", "craftax")
    if env_id not in IDS:
        raise unknown_id("Craftax", env_id, IDS)
    ctor = {}
    if "static_env_params" in overrides:
        overrides = dict(overrides)
        ctor["static_env_params"] = overrides.pop("static_env_params")
    raw = craftax_env_module.make_craftax_env_from_name(env_id, auto_reset=False)
    if ctor:
        raw = type(raw)(**ctor)
    env = CraftaxEnvironment(raw, f"craftax:{env_id}")
    params = env.default_params
    inner_fields = {f.name for f in dataclasses.fields(params.inner)} - {"max_timesteps"}
    ours, theirs = split_overrides(
        "craftax", env_id, overrides, ["max_steps_in_episode"], inner_fields
    )
    params = params.replace(inner=params.inner.replace(**theirs), **ours)
    params.validate()
    return env, params
