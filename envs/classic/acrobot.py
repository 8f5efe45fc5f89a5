"""Acrobot-v1 (Sutton 1996; Sutton & Barto 2018), matching gymnasium's dynamics.

Two links hang from a fixed pivot; torque on the joint between them must swing
the tip above the height of one link length over the pivot. Reward -1 per step
and 0 on the step that reaches the goal, which terminates; truncated after 500
steps. As gymnasium's defaults: the "book" equations of motion, one RK4 step of
`dt` per action, torque noise 0, joint angles wrapped to [-pi, pi] and joint
velocities clipped after each step. State field names follow gymnax.
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
class AcrobotState(EnvState):
    joint_angle1: jax.Array  # theta1: angle of link 1, 0 = hanging straight down
    joint_angle2: jax.Array  # theta2: angle of link 2 relative to link 1
    velocity_1: jax.Array
    velocity_2: jax.Array
    time: jax.Array


@struct.dataclass
class AcrobotParams(EnvParams):
    """Physics of the two-link arm (gymnasium's class constants).

    `max_vel_1`/`max_vel_2` bound the observation space, so they are static
    (not pytree leaves): spaces are read at trace time. `torque_noise_max` is
    static too, so that with gymnasium's default of 0 the step draws no random
    number at all (a Python branch, decided when tracing).
    """

    dt: float = 0.2
    link_length_1: float = 1.0
    link_length_2: float = 1.0  # only sets the goal picture; dynamics use link 1's length
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5  # distance from a link's joint to its centre of mass
    link_com_pos_2: float = 0.5
    link_moi: float = 1.0  # moment of inertia of each link
    gravity: float = 9.8
    torque_noise_max: float = struct.field(pytree_node=False, default=0.0)
    max_vel_1: float = struct.field(pytree_node=False, default=4 * math.pi)
    max_vel_2: float = struct.field(pytree_node=False, default=9 * math.pi)
    max_steps_in_episode: int = 500

    def validate(self) -> None:
        super().validate()
        for name in (
            "dt",
            "link_length_1",
            "link_length_2",
            "link_mass_1",
            "link_mass_2",
            "link_moi",
            "max_vel_1",
            "max_vel_2",
        ):
            require(self, name, lambda v: v > 0, "positive")
        for name in ("link_com_pos_1", "link_com_pos_2", "gravity", "torque_noise_max"):
            require(self, name, lambda v: v >= 0, "non-negative")


class Acrobot(Environment[AcrobotState, AcrobotParams]):
    """Acrobot-v1. Observation `[cos t1, sin t1, cos t2, sin t2, dt1, dt2]`.

    Actions {0, 1, 2} apply torque {-1, 0, +1} to the middle joint; values
    outside that range are clipped to it (gymnasium would raise).
    """

    obs_from_state = True  # `step` builds the auto-reset observation from the state

    def step_is_stochastic(self, params: AcrobotParams) -> bool:
        """Only torque noise draws from the step key (none with the default noise of 0)."""
        return params.torque_noise_max != 0

    @property
    def name(self) -> str:
        return "Acrobot-v1"

    @property
    def default_params(self) -> AcrobotParams:
        return AcrobotParams()

    def reset_env(self, key: jax.Array, params: AcrobotParams) -> tuple[jax.Array, AcrobotState]:
        # gymnasium: all four state variables ~ U(-0.1, 0.1).
        th1, th2, v1, v2 = prng.uniform(key, (4,), minval=-0.1, maxval=0.1)
        state = AcrobotState(
            joint_angle1=th1,
            joint_angle2=th2,
            velocity_1=v1,
            velocity_2=v2,
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: AcrobotState, action: jax.Array, params: AcrobotParams
    ) -> tuple[jax.Array, AcrobotState, jax.Array, jax.Array, dict[str, Any]]:
        torque = (jnp.clip(action, 0, 2) - 1).astype(jnp.float32)
        if self.step_is_stochastic(params):  # static: no draw is traced without noise
            noise = prng.uniform(key, (), minval=-1.0, maxval=1.0) * params.torque_noise_max
            torque = torque + noise
        s = jnp.stack([state.joint_angle1, state.joint_angle2, state.velocity_1, state.velocity_2])
        ns = rk4_step(lambda y: _dsdt(y, torque, params), s, params.dt)
        state = AcrobotState(
            joint_angle1=wrap(ns[0], -math.pi, math.pi),
            joint_angle2=wrap(ns[1], -math.pi, math.pi),
            velocity_1=jnp.clip(ns[2], -params.max_vel_1, params.max_vel_1),
            velocity_2=jnp.clip(ns[3], -params.max_vel_2, params.max_vel_2),
            time=state.time + 1,
        )
        terminated = self.is_terminated(state, params)
        reward = jnp.where(terminated, 0.0, -1.0).astype(jnp.float32)
        return self.get_obs(state), state, reward, terminated, {}

    def is_terminated(self, state: AcrobotState, params: AcrobotParams) -> jax.Array:
        """Tip height above the pivot exceeds one link length (gymnasium's `_terminal`)."""
        th1, th2 = state.joint_angle1, state.joint_angle2
        return -jnp.cos(th1) - jnp.cos(th2 + th1) > 1.0

    def get_obs(self, state: AcrobotState, params: AcrobotParams | None = None) -> jax.Array:
        th1, th2 = state.joint_angle1, state.joint_angle2
        return jnp.stack(
            [
                jnp.cos(th1),
                jnp.sin(th1),
                jnp.cos(th2),
                jnp.sin(th2),
                state.velocity_1,
                state.velocity_2,
            ]
        ).astype(jnp.float32)

    def observation_space(self, params: AcrobotParams) -> spaces.Box:
        high = [1.0, 1.0, 1.0, 1.0, params.max_vel_1, params.max_vel_2]
        return spaces.Box([-h for h in high], high, (6,), jnp.float32)

    def action_space(self, params: AcrobotParams) -> spaces.Discrete:
        return spaces.Discrete(3)


def _dsdt(s: jax.Array, torque: jax.Array, params: AcrobotParams) -> jax.Array:
    """Time derivative of `[theta1, theta2, dtheta1, dtheta2]` under `torque`.

    Equations of motion from Sutton & Barto (2018), "book" variant (as
    gymnasium's `AcrobotEnv._dsdt` with `book_or_nips="book"`): `d1`, `d2` are
    the inertia terms, `phi1`, `phi2` the Coriolis/centrifugal and gravity terms.
    """
    m1, m2 = params.link_mass_1, params.link_mass_2
    l1 = params.link_length_1
    lc1, lc2 = params.link_com_pos_1, params.link_com_pos_2
    i1 = i2 = params.link_moi
    g = params.gravity
    theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
    # Each sine/cosine is computed once (gymnasium writes cos(x - pi/2) for sin(x)).
    cos2, sin2 = jnp.cos(theta2), jnp.sin(theta2)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
    phi2 = m2 * lc2 * g * jnp.sin(theta1 + theta2)
    phi1 = (
        -m2 * l1 * lc2 * dtheta2**2 * sin2
        - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
        + (m1 * lc1 + m2 * l1) * g * jnp.sin(theta1)
        + phi2
    )
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])


def rk4_step(derivs: Any, y: jax.Array, dt: float | jax.Array) -> jax.Array:
    """One classical 4th-order Runge-Kutta step of `dy/dt = derivs(y)` over `dt`.

    y(t + dt) = y + dt/6 (k1 + 2 k2 + 2 k3 + k4), with k1 = f(y),
    k2 = f(y + dt/2 k1), k3 = f(y + dt/2 k2), k4 = f(y + dt k3).
    """
    k1 = derivs(y)
    k2 = derivs(y + dt / 2.0 * k1)
    k3 = derivs(y + dt / 2.0 * k2)
    k4 = derivs(y + dt * k3)
    return y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def wrap(x: jax.Array, low: float, high: float) -> jax.Array:
    """Wraps `x` into `[low, high]` by whole periods, like gymnasium's `wrap`.

    gymnasium subtracts `high - low` while `x > high` (adds while `x < low`); the
    number of periods is therefore `ceil((x - high) / period)` (resp.
    `ceil((low - x) / period)`), computed here without a loop. Values already
    inside the interval, including its end points, are returned unchanged.
    """
    period = high - low
    above = x - period * jnp.ceil((x - high) / period)
    below = x + period * jnp.ceil((low - x) / period)
    return jnp.where(x > high, above, jnp.where(x < low, below, x))
