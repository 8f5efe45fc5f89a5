"""MountainCar-v0 (Moore 1990; Sutton & Barto 2018), matching gymnasium's dynamics.

An under-powered car in a valley must rock back and forth to reach the flag on
the right hill. Reward -1 per step; terminates when the car reaches
`goal_position` with velocity at least `goal_velocity`; truncated after 200
steps. State field names follow gymnax.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

from .. import spaces
from ..core import Environment, EnvParams, EnvState, require


@struct.dataclass
class MountainCarState(EnvState):
    position: jax.Array
    velocity: jax.Array
    time: jax.Array


@struct.dataclass
class MountainCarParams(EnvParams):
    """Physics of the valley (gymnasium's attributes).

    `min_position`, `max_position` and `max_speed` bound the observation space,
    so they are static (not pytree leaves): spaces are read at trace time.
    """

    min_position: float = struct.field(pytree_node=False, default=-1.2)
    max_position: float = struct.field(pytree_node=False, default=0.6)
    max_speed: float = struct.field(pytree_node=False, default=0.07)
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025
    max_steps_in_episode: int = 200

    def validate(self) -> None:
        super().validate()
        validate_valley(self)
        for name in ("force", "gravity"):
            require(self, name, lambda v: v >= 0, "non-negative")


def validate_valley(params: Any) -> None:
    """Checks the track and speed limit shared by both mountain-car variants."""
    require(params, "max_speed", lambda v: v > 0, "positive")
    require(
        params,
        "max_position",
        lambda v: v > params.min_position,
        f"greater than min_position ({params.min_position})",
    )


def valley_step(
    position: jax.Array, velocity: jax.Array, acceleration: jax.Array, params: Any
) -> tuple[jax.Array, jax.Array]:
    """Advances the car one step given the engine's velocity change.

    gymnasium's update for both variants: v += a - gravity * cos(3 x), clipped
    to +-max_speed; x += v, clipped to the track; hitting the left wall while
    moving left stops the car (inelastic collision).
    """
    velocity = velocity + acceleration - params.gravity * jnp.cos(3 * position)
    velocity = jnp.clip(velocity, -params.max_speed, params.max_speed)
    position = jnp.clip(position + velocity, params.min_position, params.max_position)
    at_left_wall = (position == params.min_position) & (velocity < 0)
    velocity = jnp.where(at_left_wall, 0.0, velocity)
    return position, velocity


def valley_obs_space(params: Any) -> spaces.Box:
    """`[position, velocity]` bounds shared by both mountain-car variants."""
    return spaces.Box(
        [params.min_position, -params.max_speed],
        [params.max_position, params.max_speed],
        (2,),
        jnp.float32,
    )


def valley_reset(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """gymnasium's start: position ~ U(-0.6, -0.4), at rest."""
    position = prng.uniform(key, (), minval=-0.6, maxval=-0.4)
    return position, jnp.zeros((), jnp.float32)


class MountainCar(Environment[MountainCarState, MountainCarParams]):
    """MountainCar-v0. Observation `[position, velocity]`; actions {0: left, 1: coast, 2: right}.

    Actions outside {0, 1, 2} are clipped to that range (gymnasium would raise).
    """

    # Deterministic dynamics: `step` hands its whole key to `reset_env` (no split),
    # and builds the auto-reset observation from the selected state.
    stochastic_step = False
    obs_from_state = True

    @property
    def name(self) -> str:
        return "MountainCar-v0"

    @property
    def default_params(self) -> MountainCarParams:
        return MountainCarParams()

    def reset_env(
        self, key: jax.Array, params: MountainCarParams
    ) -> tuple[jax.Array, MountainCarState]:
        position, velocity = valley_reset(key)
        state = MountainCarState(
            position=position, velocity=velocity, time=jnp.zeros((), jnp.int32)
        )
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: MountainCarState, action: jax.Array, params: MountainCarParams
    ) -> tuple[jax.Array, MountainCarState, jax.Array, jax.Array, dict[str, Any]]:
        del key
        push = (jnp.clip(action, 0, 2) - 1).astype(jnp.float32) * params.force
        position, velocity = valley_step(state.position, state.velocity, push, params)
        state = MountainCarState(position=position, velocity=velocity, time=state.time + 1)
        terminated = self.is_terminated(state, params)
        return self.get_obs(state), state, -jnp.ones((), jnp.float32), terminated, {}

    def is_terminated(self, state: MountainCarState, params: MountainCarParams) -> jax.Array:
        return (state.position >= params.goal_position) & (state.velocity >= params.goal_velocity)

    def get_obs(
        self, state: MountainCarState, params: MountainCarParams | None = None
    ) -> jax.Array:
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def observation_space(self, params: MountainCarParams) -> spaces.Box:
        return valley_obs_space(params)

    def action_space(self, params: MountainCarParams) -> spaces.Discrete:
        return spaces.Discrete(3)
