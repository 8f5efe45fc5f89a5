"""MuJoCo Playground (Zakka et al. 2025) through jaxrl's API: `make("playground:CartpoleBalance")`.

Any id of `mujoco_playground.registry.ALL_ENVS`: the DeepMind Control Suite ports
(shipped with the package) and the locomotion and manipulation tasks (those load
robot models from MuJoCo Menagerie, which Playground fetches with git on first use:
no network, no such task). Needs the `playground` extra
(`pip install 'jaxrl[playground]'`).

Playground's environments have Brax's interface (`reset(rng) -> State`,
`step(state, action) -> State` with `obs`, `reward`, `done`, `metrics`), so the
adapter is the Brax one (`brax.BraxEnvironment`): Playground's `done` is a
termination, the time limit is ours (`max_steps_in_episode`, default the task's
`episode_length` from Playground's default config), a truncation; actions a Box in
[-1, 1]. No Playground wrapper is used (its `wrap_for_brax_training` adds its own
auto-reset and episode limit: ours replace both). The physics run on MJX (JAX).

Physics: Playground's tasks default to MJX-Warp (`impl="warp"`, NVIDIA's Warp kernels
called from XLA); the adapter defaults to `impl="jax"`, MJX written in JAX, so the
physics compile into the training step like any jaxrl environment, on any backend
(`impl="warp"` selects Warp again).

Auto-reset: an episode restarts from the copy's *first state* (the one its `reset`
drew, kept in `PlaygroundState`), as Playground's own training wrapper does by default
(`BraxAutoResetWrapper`: only the physics `data` and the observation restart; the
task's `info`, e.g. its random stream, carries on). A fresh MJX reset on every step
(which `Environment.step`'s auto-reset computes for every copy, keeping it only where
an episode ended) costs more than the step itself. So each copy replays one initial
state; `full_reset=True` (Playground's name) draws a fresh one per episode instead.

Overrides: `max_steps_in_episode`, `full_reset`; every other keyword overrides a field
of the task's Playground config (e.g. `ctrl_dt=0.02`, `impl="warp"`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ._suite import import_suite, unknown_id
from .brax import BraxEnvironment, BraxParams, BraxState

__all__ = ["PACKAGE", "PlaygroundEnvironment", "PlaygroundState", "ids", "make"]

PACKAGE = "mujoco_playground"


def _registry() -> Any:
    """Playground's registry (an attribute of the package, not a module of its own)."""
    return import_suite("mujoco_playground", "MuJoCo Playground", "playground").registry


def ids() -> list[str]:
    """Playground's task ids (without the `playground:` prefix)."""
    return sorted(_registry().ALL_ENVS)


@struct.dataclass
class PlaygroundState(BraxState):
    """Playground's state, the step count, and the copy's first physics data and
    observation (what an episode restarts from)."""

    first_data: Any
    first_obs: Any


class PlaygroundEnvironment(BraxEnvironment):
    """A Playground task restarting from the copy's first state; see the module docstring."""

    def __init__(self, playground_env: Any, name: str, full_reset: bool = False):
        super().__init__(playground_env, name)
        self.full_reset = full_reset

    def reset_env(self, key: jax.Array, params: BraxParams) -> tuple[Any, PlaygroundState]:
        obs, state = super().reset_env(key, params)
        first = state.brax_state
        return obs, PlaygroundState(
            brax_state=first, time=state.time, first_data=first.data, first_obs=first.obs
        )

    def step_env(
        self, key: jax.Array, state: PlaygroundState, action: jax.Array, params: BraxParams
    ) -> tuple[Any, PlaygroundState, jax.Array, jax.Array, dict[str, Any]]:
        obs, stepped, reward, terminated, info = super().step_env(key, state, action, params)
        new_state = state.replace(brax_state=stepped.brax_state, time=stepped.time)
        return obs, new_state, reward, terminated, info

    def next_episode(
        self, key: jax.Array, params: BraxParams, state: PlaygroundState, done: jax.Array
    ) -> tuple[Any, PlaygroundState]:
        """The copy's first state again (`full_reset=False`), or a fresh reset."""
        if self.full_reset:
            return super().next_episode(key, params, state, done)
        stepped = state.brax_state
        restart = stepped.replace(
            data=state.first_data, obs=state.first_obs, done=jnp.zeros_like(stepped.done)
        )
        return state.first_obs, state.replace(brax_state=restart, time=jnp.zeros_like(state.time))


def make(env_id: str, **overrides: Any) -> tuple[PlaygroundEnvironment, BraxParams]:
    """Builds Playground task `env_id`: returns `(env, params)`."""
    registry = _registry()
    known = sorted(registry.ALL_ENVS)
    if env_id not in known:
        raise unknown_id("MuJoCo Playground", env_id, known)
    overrides = dict(overrides)
    config = registry.get_default_config(env_id)
    if "impl" in config and "impl" not in overrides:
        overrides["impl"] = "jax"  # MJX in JAX (module docstring)
    limit = overrides.pop("max_steps_in_episode", int(config.episode_length))
    full_reset = overrides.pop("full_reset", False)
    if not isinstance(full_reset, bool):
        raise ValueError(
            f"make('playground:{env_id}'): full_reset must be True or False, got {full_reset!r}"
        )
    unknown = sorted(k for k in overrides if k not in config)
    if unknown:
        raise ValueError(
            f"make('playground:{env_id}'): unknown override(s) {unknown}; allowed: "
            f"{sorted(['max_steps_in_episode', 'full_reset', *config.keys()])}"
        )
    raw = registry.load(env_id, config_overrides=overrides or None)
    params = BraxParams(max_steps_in_episode=limit)
    params.validate()
    return PlaygroundEnvironment(raw, f"playground:{env_id}", full_reset), params
