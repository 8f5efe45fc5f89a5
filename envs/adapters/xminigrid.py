"""XLand-MiniGrid (Nikulin et al. 2024) through jaxrl's API: `make("xminigrid:MiniGrid-Empty-8x8")`.

Any id of `xminigrid.registered_environments()` (the MiniGrid ports and the XLand
meta-RL grids, e.g. `XLand-MiniGrid-R1-9x9`). Needs the `xminigrid` extra
(`pip install 'jaxrl[xminigrid]'`).

What the adapter changes (see `_suite.py`):

* **API**: XLand-MiniGrid's `reset(params, key) -> timestep` and
  `step(params, timestep, action) -> timestep` (its timestep is its state) are
  delegated from `reset_env`/`step_env`; no XLand-MiniGrid wrapper is used, so the
  only auto-reset is ours. The step is deterministic (only the reset draws).
* **Endings**: a `LAST` step with discount 0 (the goal reached) is a termination.
  XLand-MiniGrid's time limit is not set out of reach here, because its reward
  depends on it (`1 - 0.9 * steps / limit` at the goal); instead our
  `max_steps_in_episode` *is* its limit (`params.max_steps`, default the
  task's own), so it truncates on the same step XLand-MiniGrid does, and
  rewards are XLand-MiniGrid's own.
* **Spaces**: the observation is the agent's symbolic view, `(view, view, 2)` uint8
  (tile id, colour); 6 discrete actions.

Overrides: `max_steps_in_episode`, and any field of XLand-MiniGrid's params (e.g.
`view_size`; for the meta-RL grids, `ruleset` from one of its benchmarks).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import spaces
from ..core import Environment
from ._suite import SuiteParams, SuiteState, import_suite, split_overrides, unknown_id

__all__ = ["PACKAGE", "XLandMiniGridEnvironment", "ids", "make"]

PACKAGE = "xminigrid"


def ids() -> list[str]:
    """XLand-MiniGrid's registered ids (without the `xminigrid:` prefix)."""
    xminigrid = import_suite("xminigrid", "XLand-MiniGrid", "xminigrid")
    return sorted(xminigrid.registered_environments())


class XLandMiniGridEnvironment(Environment[SuiteState, SuiteParams]):
    """An XLand-MiniGrid environment without its wrappers; see the module docstring.

    `SuiteState.inner` is XLand-MiniGrid's timestep (its state, observation, reward,
    step type and discount), `SuiteParams.inner` its params.
    """

    stochastic_step = False  # the step is deterministic; the reset draws the grid

    def __init__(self, xminigrid_env: Any, inner_params: Any, name: str, bounds: tuple):
        self.xminigrid_env = xminigrid_env
        self._inner_params = inner_params
        self._name = name
        self._bounds = bounds

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> SuiteParams:
        limit = int(self._inner_params.max_steps)  # set by XLand-MiniGrid's make
        return SuiteParams(max_steps_in_episode=limit, inner=self._inner_params)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, SuiteState]:
        timestep = self.xminigrid_env.reset(params.inner, key)
        return timestep.observation, SuiteState(inner=timestep, time=jnp.zeros((), jnp.int32))

    def step_env(
        self, key: jax.Array, state: SuiteState, action: jax.Array, params: SuiteParams
    ) -> tuple[jax.Array, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        del key  # see stochastic_step
        timestep = self.xminigrid_env.step(params.inner, state.inner, action)
        terminated = jnp.logical_and(timestep.last(), timestep.discount == 0)
        new_state = SuiteState(inner=timestep, time=state.time + 1)
        return timestep.observation, new_state, timestep.reward, terminated, {}

    def observation_space(self, params: SuiteParams) -> spaces.Box:
        shape = tuple(self.xminigrid_env.observation_shape(params.inner))
        low, high = self._bounds
        return spaces.Box(low, high, shape, jnp.uint8)

    def action_space(self, params: SuiteParams) -> spaces.Discrete:
        return spaces.Discrete(int(self.xminigrid_env.num_actions(params.inner)))


def _observation_bounds() -> tuple[Any, Any]:
    """Per-channel bounds of the symbolic view: tile ids, then colour ids."""
    constants = import_suite("xminigrid.core.constants", "XLand-MiniGrid", "xminigrid")
    return 0, np.array([constants.NUM_TILES - 1, constants.NUM_COLORS - 1], np.uint8)


def make(env_id: str, **overrides: Any) -> tuple[XLandMiniGridEnvironment, SuiteParams]:
    """Builds XLand-MiniGrid environment `env_id`: returns `(env, params)`."""
    xminigrid = import_suite("xminigrid", "XLand-MiniGrid", "xminigrid")
    known = sorted(xminigrid.registered_environments())
    if env_id not in known:
        raise unknown_id("XLand-MiniGrid", env_id, known)
    raw, inner = xminigrid.make(env_id)
    fields = {f.name for f in dataclasses.fields(inner)} - {"max_steps"}
    ours, theirs = split_overrides("xminigrid", env_id, overrides, ["max_steps_in_episode"], fields)
    inner = inner.replace(**theirs)
    if "max_steps_in_episode" in ours:
        # Static in XLand-MiniGrid (its reward and truncation read it): set at make.
        inner = inner.replace(max_steps=int(ours["max_steps_in_episode"]))
    low, high = _observation_bounds()
    env = XLandMiniGridEnvironment(raw, inner, f"xminigrid:{env_id}", (low, high))
    params = env.default_params
    params.validate()
    return env, params
