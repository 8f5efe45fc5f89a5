"""CartPole-POMDP-v1: CartPole-v1 with the velocities hidden.

The dynamics, rewards, termination and time limit are CartPole-v1's (the
environment wraps a `CartPole` instance and forwards every call to it); only
the observation changes, to `[x, theta]`. Cart and pole velocities must be
inferred from successive observations, so a memoryless policy cannot balance
the pole as well as one that remembers (a standard benchmark for recurrent
agents). State and params are CartPole's, so states interconvert freely.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .. import spaces
from ..classic.cartpole import CartPole, CartPoleParams, CartPoleState
from ..core import Environment

# Positions of `[x, theta]` in CartPole's observation `[x, x_dot, theta, theta_dot]`.
OBSERVED_INDICES = (0, 2)


class CartPolePOMDP(Environment[CartPoleState, CartPoleParams]):
    """CartPole-v1 observing only `[x, theta]`; actions {0: left, 1: right}."""

    stochastic_step = False  # as CartPole's
    obs_from_state = True

    def __init__(self) -> None:
        self.cartpole = CartPole()

    @property
    def name(self) -> str:
        return "CartPole-POMDP-v1"

    @property
    def default_params(self) -> CartPoleParams:
        return self.cartpole.default_params

    def reset_env(self, key: jax.Array, params: CartPoleParams) -> tuple[jax.Array, CartPoleState]:
        obs, state = self.cartpole.reset_env(key, params)
        return mask_velocities(obs), state

    def step_env(
        self, key: jax.Array, state: CartPoleState, action: jax.Array, params: CartPoleParams
    ) -> tuple[jax.Array, CartPoleState, jax.Array, jax.Array, dict[str, Any]]:
        obs, state, reward, terminated, info = self.cartpole.step_env(key, state, action, params)
        return mask_velocities(obs), state, reward, terminated, info

    def get_obs(self, state: CartPoleState, params: CartPoleParams | None = None) -> jax.Array:
        return mask_velocities(self.cartpole.get_obs(state, params))

    def observation_space(self, params: CartPoleParams) -> spaces.Box:
        full = self.cartpole.observation_space(params)
        idx = list(OBSERVED_INDICES)
        return spaces.Box(full.low[idx], full.high[idx], (len(idx),), full.dtype)

    def action_space(self, params: CartPoleParams) -> spaces.Space:
        return self.cartpole.action_space(params)


def mask_velocities(obs: jax.Array) -> jax.Array:
    """Keeps `[x, theta]` of a CartPole observation (drops both velocities)."""
    return obs[..., jnp.array(OBSERVED_INDICES)]
