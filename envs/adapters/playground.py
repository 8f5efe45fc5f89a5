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

Overrides: `max_steps_in_episode`; every other keyword overrides a field of the
task's Playground config (e.g. `ctrl_dt=0.02`, `impl="warp"`).
"""

from __future__ import annotations

from typing import Any

from ._suite import import_suite, unknown_id
from .brax import BraxEnvironment, BraxParams

__all__ = ["PACKAGE", "ids", "make"]

PACKAGE = "mujoco_playground"


def _registry() -> Any:
    """Playground's registry (an attribute of the package, not a module of its own)."""
    return import_suite("mujoco_playground", "MuJoCo Playground", "playground").registry


def ids() -> list[str]:
    """Playground's task ids (without the `playground:` prefix)."""
    return sorted(_registry().ALL_ENVS)


def make(env_id: str, **overrides: Any) -> tuple[BraxEnvironment, BraxParams]:
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
    unknown = sorted(k for k in overrides if k not in config)
    if unknown:
        raise ValueError(
            f"make('playground:{env_id}'): unknown override(s) {unknown}; allowed: "
            f"{sorted(['max_steps_in_episode', *config.keys()])}"
        )
    raw = registry.load(env_id, config_overrides=overrides or None)
    params = BraxParams(max_steps_in_episode=limit)
    params.validate()
    return BraxEnvironment(raw, f"playground:{env_id}"), params
