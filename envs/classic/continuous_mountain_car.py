"""MountainCarContinuous-v0, matching gymnasium's dynamics and reward.

The mountain car of `mountain_car.py` driven by a continuous force. Reward
+100 on reaching the goal (which terminates) minus `0.1 * action**2` every
step; truncated after 999 steps. State field names follow gymnax.

Actions outside `[min_action, max_action]` are accepted: as in gymnasium, the
force applied to the car is the action clipped to that range, while the
energy penalty `0.1 * action**2` is computed from the action as given
(gymnasium's `step` penalises `action[0]`, not the clipped force).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from .. import spaces
from ..core import Environment, EnvParams, EnvState, require
from .mountain_car import validate_valley, valley_obs_space, valley_reset, valley_step


@struct.dataclass
class ContinuousMountainCarState(EnvState):
    position: jax.Array
    velocity: jax.Array
    time: jax.Array


@struct.dataclass
class ContinuousMountainCarParams(EnvParams):
    """Physics of the valley (gymnasium's attributes).

    Fields that bound a space (track, speed limit, action range) are static
    (not pytree leaves): spaces are read at trace time.
    """

    min_action: float = struct.field(pytree_node=False, default=-1.0)
    max_action: float = struct.field(pytree_node=False, default=1.0)
    min_position: float = struct.field(pytree_node=False, default=-1.2)
    max_position: float = struct.field(pytree_node=False, default=0.6)
    max_speed: float = struct.field(pytree_node=False, default=0.07)
    goal_position: float = 0.45  # 0.5 in the discrete version
    goal_velocity: float = 0.0
    power: float = 0.0015
    gravity: float = 0.0025
    goal_reward: float = 100.0
    action_cost: float = 0.1
    max_steps_in_episode: int = 999

    def validate(self) -> None:
        super().validate()
        validate_valley(self)
        require(
            self,
            "max_action",
            lambda v: v > self.min_action,
            f"greater than min_action ({self.min_action})",
        )
        for name in ("power", "gravity", "action_cost"):
            require(self, name, lambda v: v >= 0, "non-negative")


class ContinuousMountainCar(Environment[ContinuousMountainCarState, ContinuousMountainCarParams]):
    """MountainCarContinuous-v0. Observation `[position, velocity]`; action `[force]` in [-1, 1]."""

    # Deterministic dynamics: `step` hands its whole key to `reset_env` (no split),
    # and builds the auto-reset observation from the selected state.
    stochastic_step = False
    obs_from_state = True

    @property
    def name(self) -> str:
        return "MountainCarContinuous-v0"

    @property
    def default_params(self) -> ContinuousMountainCarParams:
        return ContinuousMountainCarParams()

    def reset_env(
        self, key: jax.Array, params: ContinuousMountainCarParams
    ) -> tuple[jax.Array, ContinuousMountainCarState]:
        position, velocity = valley_reset(key)
        state = ContinuousMountainCarState(
            position=position, velocity=velocity, time=jnp.zeros((), jnp.int32)
        )
        return self.get_obs(state), state

    def step_env(
        self,
        key: jax.Array,
        state: ContinuousMountainCarState,
        action: jax.Array,
        params: ContinuousMountainCarParams,
    ) -> tuple[jax.Array, ContinuousMountainCarState, jax.Array, jax.Array, dict[str, Any]]:
        del key
        action = jnp.asarray(action, jnp.float32)[0]
        force = jnp.clip(action, params.min_action, params.max_action)
        position, velocity = valley_step(
            state.position, state.velocity, force * params.power, params
        )
        state = ContinuousMountainCarState(
            position=position, velocity=velocity, time=state.time + 1
        )
        terminated = self.is_terminated(state, params)
        # gymnasium: reward = 100 * reached_goal - 0.1 * action**2 (unclipped action).
        reward = jnp.where(terminated, params.goal_reward, 0.0) - params.action_cost * action**2
        return self.get_obs(state), state, reward.astype(jnp.float32), terminated, {}

    def is_terminated(
        self, state: ContinuousMountainCarState, params: ContinuousMountainCarParams
    ) -> jax.Array:
        return (state.position >= params.goal_position) & (state.velocity >= params.goal_velocity)

    def get_obs(
        self, state: ContinuousMountainCarState, params: ContinuousMountainCarParams | None = None
    ) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def observation_space(self, params: ContinuousMountainCarParams) -> spaces.Box:
        return valley_obs_space(params)

    def action_space(self, params: ContinuousMountainCarParams) -> spaces.Box:
        return spaces.Box(params.min_action, params.max_action, (1,), jnp.float32)
