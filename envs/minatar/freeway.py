"""MinAtar Freeway (Young & Tian 2019), rule-for-rule equal to minatar 1.0.15.

A chicken crosses eight lanes of traffic from the bottom row to the top; it may
move only every `player_speed` steps. +1 per crossing (the chicken returns to
the bottom and all car speeds are re-drawn); a car hit sends it back to the
bottom. The game terminates (a true MinAtar termination, not a truncation) after
`time_limit` + 1 = 2501 steps. Channels: chicken, car, then five trail channels,
one per car speed (a speed-k car moves once every k steps). Minimal actions:
no-op, up, down. No difficulty ramp.

Randomness (what `sample_draws` returns): the cars' new signed speeds, used on
steps where the chicken reaches the top. State field names follow gymnax's
`MinFreeway`; MinAtar's `terminate_timer` is `time_limit - time`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

from ..core import require
from .common import (
    DOWN,
    UP,
    MinAtarEnvironment,
    MinAtarParams,
    MinAtarState,
    initial_common,
    paint,
    paint_point,
)

NUM_CARS = 8  # one per lane, rows 1..8
CHICKEN_X = 4
# Columns of the `cars` array: x, y, countdown to the next move, signed speed.
X, Y, TIMER, SPEED = range(4)


@struct.dataclass
class FreewayState(MinAtarState):
    pos: jax.Array  # chicken row
    cars: jax.Array  # (8, 4) int32
    move_timer: jax.Array  # steps until the chicken may move again


@struct.dataclass
class FreewayParams(MinAtarParams):
    player_speed: int = 3
    time_limit: int = 2500  # MinAtar terminates once more than this many steps were taken

    def validate(self) -> None:
        super().validate()
        require(self, "player_speed", lambda v: v >= 0, "a non-negative integer")
        require(self, "time_limit", lambda v: v >= 0, "a non-negative integer")


def sample_speeds(key: jax.Array) -> jax.Array:
    """Eight signed car speeds: magnitude uniform in 1..5, direction +-1 with equal odds."""
    u_speed, u_dir = prng.uniform(key, (2, NUM_CARS))  # one draw: cheap to compile
    speed = jnp.minimum(1 + jnp.floor(u_speed * 5), 5).astype(jnp.int32)
    return jnp.where(u_dir < 0.5, -speed, speed)


def _wrap(x: jax.Array) -> jax.Array:
    """Cars leaving one side reappear on the other."""
    return jnp.where(x < 0, 9, jnp.where(x > 9, 0, x))


def _step_cars(cars: jax.Array, pos: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Moves the cars whose countdown is over; returns `(cars, chicken_hit)`.

    MinAtar loops over the cars and sends the chicken to row 9 on a hit; no car
    drives on row 9, so a hit by any car (before or after it moves) is the same
    as checking every car against the starting row.
    """
    x, y, timer, speed = cars[:, X], cars[:, Y], cars[:, TIMER], cars[:, SPEED]
    hit_before = (x == CHICKEN_X) & (y == pos)
    moves = timer == 0
    new_x = jnp.where(moves, _wrap(x + jnp.where(speed > 0, 1, -1)), x)
    new_timer = jnp.where(moves, jnp.abs(speed), timer - 1)
    hit_after = moves & (new_x == CHICKEN_X) & (y == pos)
    cars = jnp.stack([new_x, y, new_timer, speed], axis=1)
    return cars, jnp.any(hit_before | hit_after)


class Freeway(MinAtarEnvironment[FreewayState, FreewayParams]):
    """Freeway-MinAtar. Observation (10, 10, 7) bool; actions {0: no-op, 1: up, 2: down}."""

    minimal_actions = ("n", "u", "d")
    num_channels = 7
    has_draws = True

    @property
    def name(self) -> str:
        return "Freeway-MinAtar"

    @property
    def default_params(self) -> FreewayParams:
        return FreewayParams()

    def reset_env(self, key: jax.Array, params: FreewayParams) -> tuple[jax.Array, FreewayState]:
        speeds = sample_speeds(key)
        lanes = jnp.arange(NUM_CARS, dtype=jnp.int32)
        cars = jnp.stack([jnp.zeros_like(lanes), lanes + 1, jnp.abs(speeds), speeds], axis=1)
        state = FreewayState(
            pos=jnp.int32(9),
            cars=cars,
            move_timer=jnp.asarray(params.player_speed, jnp.int32),
            **initial_common(),
        )
        return self.get_obs(state), state

    def sample_draws(self, key: jax.Array, state: FreewayState, params: FreewayParams) -> jax.Array:
        return sample_speeds(key)

    def transition(
        self,
        state: FreewayState,
        game_action: jax.Array,
        draws: jax.Array,
        params: FreewayParams,
    ) -> tuple[FreewayState, jax.Array]:
        can_move = state.move_timer == 0
        up = can_move & (game_action == UP)
        down = can_move & (game_action == DOWN)
        pos = jnp.where(up, jnp.maximum(0, state.pos - 1), state.pos)
        pos = jnp.where(down, jnp.minimum(9, state.pos + 1), pos)
        move_timer = jnp.where(up | down, params.player_speed, state.move_timer)

        # Reaching the top scores, re-draws car speeds (not positions), restarts the chicken.
        won = pos == 0
        cars = state.cars
        redrawn = cars.at[:, TIMER].set(jnp.abs(draws)).at[:, SPEED].set(draws)
        cars = jnp.where(won, redrawn, cars)
        pos = jnp.where(won, 9, pos)

        cars, hit = _step_cars(cars, pos)
        next_state = state.replace(
            pos=jnp.where(hit, 9, pos),
            cars=cars,
            move_timer=(move_timer - (move_timer > 0)).astype(jnp.int32),
            # MinAtar's terminate_timer (= time_limit - steps) drops below zero.
            terminal=state.time + 1 > params.time_limit,
        )
        return next_state, won.astype(jnp.float32)

    def get_obs(self, state: FreewayState, params: FreewayParams | None = None) -> jax.Array:
        x, y, speed = state.cars[:, X], state.cars[:, Y], state.cars[:, SPEED]
        back_x = _wrap(jnp.where(speed > 0, x - 1, x + 1))
        everywhere = jnp.ones((NUM_CARS,), jnp.bool_)
        trails = [paint(y, back_x, jnp.abs(speed) == k) for k in range(1, 6)]
        return jnp.stack(
            [paint_point(state.pos, CHICKEN_X), paint(y, x, everywhere), *trails], axis=-1
        )
