"""CartPole-v1 (Barto, Sutton & Anderson 1983), matching gymnasium's dynamics.

A pole hinged on a cart; push the cart left or right to keep the pole upright.
Reward +1 per step; terminates when the pole leans past 12 degrees or the cart
leaves the track; truncated after 500 steps. Euler integration, as gymnasium's
default `kinematics_integrator="euler"`. State field names follow gymnax.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import prng

from .. import spaces
from ..core import Environment, EnvParams, EnvState, require


@struct.dataclass
class CartPoleState(EnvState):
    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array
    time: jax.Array


@struct.dataclass
class CartPoleParams(EnvParams):
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds between state updates
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps_in_episode: int = 500

    def validate(self) -> None:
        super().validate()
        for name in ("masscart", "masspole", "length", "tau"):
            require(self, name, lambda v: v > 0, "positive")


class CartPole(Environment[CartPoleState, CartPoleParams]):
    """CartPole-v1. Observation `[x, x_dot, theta, theta_dot]`; actions {0: left, 1: right}."""

    # Deterministic dynamics: `step` hands its whole key to `reset_env` (no split),
    # and builds the auto-reset observation from the selected state.
    stochastic_step = False
    obs_from_state = True

    @property
    def name(self) -> str:
        return "CartPole-v1"

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def reset_env(self, key: jax.Array, params: CartPoleParams) -> tuple[jax.Array, CartPoleState]:
        x, x_dot, theta, theta_dot = prng.uniform(key, (4,), minval=-0.05, maxval=0.05)
        state = CartPoleState(
            x=x, x_dot=x_dot, theta=theta, theta_dot=theta_dot, time=jnp.zeros((), jnp.int32)
        )
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: CartPoleState, action: jax.Array, params: CartPoleParams
    ) -> tuple[jax.Array, CartPoleState, jax.Array, jax.Array, dict[str, Any]]:
        del key
        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        total_mass = params.masscart + params.masspole
        polemass_length = params.masspole * params.length
        cos, sin = jnp.cos(state.theta), jnp.sin(state.theta)
        # Equations of motion from gymnasium's cartpole.py (Florian 2007, corrected).
        temp = (force + polemass_length * state.theta_dot**2 * sin) / total_mass
        theta_acc = (params.gravity * sin - cos * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * cos**2 / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        state = CartPoleState(
            x=state.x + params.tau * state.x_dot,
            x_dot=state.x_dot + params.tau * x_acc,
            theta=state.theta + params.tau * state.theta_dot,
            theta_dot=state.theta_dot + params.tau * theta_acc,
            time=state.time + 1,
        )
        terminated = self.is_terminated(state, params)
        return self.get_obs(state), state, jnp.ones((), jnp.float32), terminated, {}

    def is_terminated(self, state: CartPoleState, params: CartPoleParams) -> jax.Array:
        return (jnp.abs(state.x) > params.x_threshold) | (
            jnp.abs(state.theta) > params.theta_threshold_radians
        )

    def get_obs(self, state: CartPoleState, params: CartPoleParams | None = None) -> jax.Array:
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)

    def observation_space(self, params: CartPoleParams) -> spaces.Box:
        # Bounds as gymnasium's: twice the termination thresholds, velocities unbounded
        # (infinite, so that `sample` draws them from a normal instead of overflowing).
        # NumPy, not jnp: spaces are static and may be built while tracing.
        high = np.array(
            [params.x_threshold * 2, np.inf, params.theta_threshold_radians * 2, np.inf],
            dtype=np.float32,
        )
        return spaces.Box(-high, high, (4,), jnp.float32)

    def action_space(self, params: CartPoleParams) -> spaces.Discrete:
        return spaces.Discrete(2)
