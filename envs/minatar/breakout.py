"""MinAtar Breakout (Young & Tian 2019), rule-for-rule equal to minatar 1.0.15.

A paddle on the bottom row bounces a diagonally moving ball into three rows of
bricks; +1 per brick broken, a fresh wall when the ball returns to the bottom
with no bricks left, termination when the ball reaches the bottom row past the
paddle. Channels: paddle, ball, trail (the ball's previous cell), brick.
Minimal actions: no-op, left, right. No difficulty ramp. The only randomness is
the ball's starting side. State field names follow gymnax's `MinBreakout`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import prng

from .common import (
    LEFT,
    RIGHT,
    MinAtarEnvironment,
    MinAtarParams,
    MinAtarState,
    initial_common,
    paint_point,
)

# Ball directions 0..3: up-left, up-right, down-right, down-left. NumPy tables, so
# importing this module does not start a JAX backend.
_DX = np.array([-1, 1, 1, -1], np.int32)
_DY = np.array([-1, -1, 1, 1], np.int32)
_FLIP_X = np.array([1, 0, 3, 2], np.int32)  # bounce off a side wall
_FLIP_Y = np.array([3, 2, 1, 0], np.int32)  # bounce off the ceiling, a brick, paddle centre
_PADDLE_EDGE = np.array([2, 3, 0, 1], np.int32)  # ball caught by the paddle's new cell

_ROWS = np.arange(10)[:, None]


def _lookup(table: np.ndarray, direction: jax.Array) -> jax.Array:
    """`table[direction]` for a traced direction."""
    return jnp.asarray(table)[direction]


@struct.dataclass
class BreakoutState(MinAtarState):
    ball_y: jax.Array
    ball_x: jax.Array
    ball_dir: jax.Array
    pos: jax.Array  # paddle column
    brick_map: jax.Array  # (10, 10) bool
    strike: jax.Array  # the ball hit a brick on the previous step
    last_y: jax.Array
    last_x: jax.Array


@struct.dataclass
class BreakoutParams(MinAtarParams):
    """Breakout has no parameters beyond the shared MinAtar ones (no difficulty ramp)."""


def _wall() -> np.ndarray:
    """The initial brick layout: rows 1-3 full."""
    return np.broadcast_to((_ROWS >= 1) & (_ROWS <= 3), (10, 10))


class Breakout(MinAtarEnvironment[BreakoutState, BreakoutParams]):
    """Breakout-MinAtar. Observation (10, 10, 4) bool; actions {0: no-op, 1: left, 2: right}."""

    minimal_actions = ("n", "l", "r")
    num_channels = 4

    @property
    def name(self) -> str:
        return "Breakout-MinAtar"

    @property
    def default_params(self) -> BreakoutParams:
        return BreakoutParams()

    def reset_env(self, key: jax.Array, params: BreakoutParams) -> tuple[jax.Array, BreakoutState]:
        # Ball starts at row 3, either at the left wall heading down-right or the right
        # wall heading down-left.
        right = prng.bernoulli(key)
        ball_x = jnp.where(right, 9, 0).astype(jnp.int32)
        state = BreakoutState(
            ball_y=jnp.int32(3),
            ball_x=ball_x,
            ball_dir=jnp.where(right, 3, 2).astype(jnp.int32),
            pos=jnp.int32(4),
            brick_map=jnp.asarray(_wall()),
            strike=jnp.bool_(False),
            last_y=jnp.int32(3),
            last_x=ball_x,
            **initial_common(),
        )
        return self.get_obs(state), state

    def transition(
        self, state: BreakoutState, game_action: jax.Array, draws: tuple, params: BreakoutParams
    ) -> tuple[BreakoutState, jax.Array]:
        pos = jnp.where(game_action == LEFT, jnp.maximum(0, state.pos - 1), state.pos)
        pos = jnp.where(game_action == RIGHT, jnp.minimum(9, state.pos + 1), pos)

        # Move the ball one diagonal step; a side wall clamps x and mirrors the direction.
        direction = state.ball_dir
        new_x = state.ball_x + _lookup(_DX, direction)
        new_y = state.ball_y + _lookup(_DY, direction)
        hit_side = (new_x < 0) | (new_x > 9)
        new_x = jnp.clip(new_x, 0, 9)
        direction = jnp.where(hit_side, _lookup(_FLIP_X, direction), direction)

        # MinAtar's if/elif chain: ceiling, else brick, else bottom row.
        hit_top = new_y < 0
        row = jnp.clip(new_y, 0, 9)
        on_brick = ~hit_top & state.brick_map[row, new_x]
        # A brick is only broken if the ball did not hit one on the previous step;
        # otherwise the ball passes into the brick's cell.
        breaks = on_brick & ~state.strike
        brick_map = state.brick_map & ~(breaks & paint_point(row, new_x))
        direction = jnp.where(hit_top | breaks, _lookup(_FLIP_Y, direction), direction)
        new_y = jnp.where(breaks, state.ball_y, jnp.maximum(new_y, 0))

        at_bottom = ~hit_top & ~on_brick & (new_y == 9)
        refill = at_bottom & ~jnp.any(brick_map)
        brick_map = brick_map | (refill & _wall())
        # The paddle catches the ball if it is under the ball's old or new column.
        caught_centre = at_bottom & (state.ball_x == pos)
        caught_edge = at_bottom & ~caught_centre & (new_x == pos)
        direction = jnp.where(caught_centre, _lookup(_FLIP_Y, direction), direction)
        direction = jnp.where(caught_edge, _lookup(_PADDLE_EDGE, direction), direction)
        new_y = jnp.where(caught_centre | caught_edge, state.ball_y, new_y)
        terminal = at_bottom & ~caught_centre & ~caught_edge

        next_state = state.replace(
            ball_y=new_y,
            ball_x=new_x,
            ball_dir=direction,
            pos=pos,
            brick_map=brick_map,
            strike=on_brick,
            last_y=state.ball_y,
            last_x=state.ball_x,
            terminal=terminal,
        )
        return next_state, breaks.astype(jnp.float32)

    def get_obs(self, state: BreakoutState, params: BreakoutParams | None = None) -> jax.Array:
        return jnp.stack(
            [
                paint_point(9, state.pos),
                paint_point(state.ball_y, state.ball_x),
                paint_point(state.last_y, state.last_x),
                state.brick_map,
            ],
            axis=-1,
        )
