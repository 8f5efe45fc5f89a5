"""Pendulum-v1, matching gymnasium's dynamics and reward.

Swing a frictionless pendulum up and hold it upright with a bounded torque.
Reward `-(angle_normalize(th)**2 + 0.1 * thdot**2 + 0.001 * u**2)`, computed
from the state *before* the step; never terminates; truncated after 200
steps. State field names follow gymnax (`last_u` is the torque last applied).

Actions outside `[-max_torque, max_torque]` are accepted and clipped to it
before being applied and penalised, exactly as gymnasium's `step` does.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

from .. import spaces
from ..core import Environment, EnvParams, EnvState, require


@struct.dataclass
class PendulumState(EnvState):
    theta: jax.Array  # 0 = upright; not wrapped (grows as the pendulum spins)
    theta_dot: jax.Array
    last_u: jax.Array  # clipped torque applied on the previous step (0 after reset)
    time: jax.Array


@struct.dataclass
class PendulumParams(EnvParams):
    """Physics of the pendulum (gymnasium's attributes; `g`, `m`, `l` renamed).

    `max_speed` and `max_torque` bound the spaces, so they are static (not
    pytree leaves): spaces are read at trace time.
    """

    max_speed: float = struct.field(pytree_node=False, default=8.0)
    max_torque: float = struct.field(pytree_node=False, default=2.0)
    dt: float = 0.05
    gravity: float = 10.0
    mass: float = 1.0
    length: float = 1.0
    max_steps_in_episode: int = 200

    def validate(self) -> None:
        super().validate()
        for name in ("max_speed", "max_torque", "dt", "mass", "length"):
            require(self, name, lambda v: v > 0, "positive")
        require(self, "gravity", lambda v: v >= 0, "non-negative")


def angle_normalize(x: jax.Array) -> jax.Array:
    """Maps an angle to [-pi, pi), as gymnasium's `angle_normalize`."""
    return ((x + math.pi) % (2 * math.pi)) - math.pi


class Pendulum(Environment[PendulumState, PendulumParams]):
    """Pendulum-v1. Observation `[cos th, sin th, thdot]`; action `[torque]` in [-2, 2]."""

    # Deterministic dynamics: `step` hands its whole key to `reset_env` (no split),
    # and builds the auto-reset observation from the selected state.
    stochastic_step = False
    obs_from_state = True

    @property
    def name(self) -> str:
        return "Pendulum-v1"

    @property
    def default_params(self) -> PendulumParams:
        return PendulumParams()

    def reset_env(self, key: jax.Array, params: PendulumParams) -> tuple[jax.Array, PendulumState]:
        # gymnasium: theta ~ U(-pi, pi), theta_dot ~ U(-1, 1).
        high = jnp.array([math.pi, 1.0], jnp.float32)
        theta, theta_dot = prng.uniform(key, (2,), minval=-high, maxval=high)
        state = PendulumState(
            theta=theta,
            theta_dot=theta_dot,
            last_u=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: PendulumState, action: jax.Array, params: PendulumParams
    ) -> tuple[jax.Array, PendulumState, jax.Array, jax.Array, dict[str, Any]]:
        del key
        u = jnp.clip(jnp.asarray(action, jnp.float32)[0], -params.max_torque, params.max_torque)
        th, thdot = state.theta, state.theta_dot
        cost = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        # Semi-implicit Euler on  thdot' = 3g/(2l) sin(th) + 3/(m l^2) u  (uniform rod
        # pivoted at one end, th = 0 upright), as gymnasium's `step`.
        thdot_acc = (
            3 * params.gravity / (2 * params.length) * jnp.sin(th)
            + 3.0 / (params.mass * params.length**2) * u
        )
        new_thdot = jnp.clip(thdot + thdot_acc * params.dt, -params.max_speed, params.max_speed)
        new_th = th + new_thdot * params.dt
        state = PendulumState(theta=new_th, theta_dot=new_thdot, last_u=u, time=state.time + 1)
        reward = (-cost).astype(jnp.float32)
        return self.get_obs(state), state, reward, jnp.zeros((), jnp.bool_), {}

    def get_obs(self, state: PendulumState, params: PendulumParams | None = None) -> jax.Array:
        return jnp.stack([jnp.cos(state.theta), jnp.sin(state.theta), state.theta_dot]).astype(
            jnp.float32
        )

    def observation_space(self, params: PendulumParams) -> spaces.Box:
        high = [1.0, 1.0, params.max_speed]
        return spaces.Box([-h for h in high], high, (3,), jnp.float32)

    def action_space(self, params: PendulumParams) -> spaces.Box:
        return spaces.Box(-params.max_torque, params.max_torque, (1,), jnp.float32)
