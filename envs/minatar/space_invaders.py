"""MinAtar Space Invaders (Young & Tian 2019), rule-for-rule equal to minatar 1.0.15.

A cannon on the bottom row shoots up at a block of aliens that sweeps sideways,
stepping down and turning at the screen edges. +1 per alien shot; termination
when an alien or an alien bullet reaches the cannon (or the block steps down
from the bottom row). The nearest alien column fires every 10 steps; aliens
speed up as their number drops, and each cleared wave comes back one step
faster (the difficulty ramp). Channels: cannon, alien, alien moving left,
alien moving right, friendly bullet, enemy bullet. Minimal actions: no-op,
left, right, fire. Fully deterministic. State field names follow gymnax's
`MinSpaceInvaders` (gymnax's `ramping` state field is a param here).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ..core import require
from .common import (
    FIRE,
    LEFT,
    RIGHT,
    MinAtarEnvironment,
    MinAtarParams,
    MinAtarState,
    initial_common,
    paint_point,
)

_ROWS = np.arange(10)[:, None]
_COLS = np.arange(10)[None, :]
_EMPTY_ROW = np.zeros((1, 10), np.bool_)
MIN_MOVE_INTERVAL = 6  # the ramp stops once waves move every 6 steps


@struct.dataclass
class SpaceInvadersState(MinAtarState):
    pos: jax.Array  # cannon column
    f_bullet_map: jax.Array  # (10, 10) bool, the player's bullets
    e_bullet_map: jax.Array  # (10, 10) bool, the aliens' bullets
    alien_map: jax.Array  # (10, 10) bool
    alien_dir: jax.Array  # -1 left, +1 right
    enemy_move_interval: jax.Array
    alien_move_timer: jax.Array
    alien_shot_timer: jax.Array
    ramp_index: jax.Array
    shot_timer: jax.Array


@struct.dataclass
class SpaceInvadersParams(MinAtarParams):
    ramping: bool = True
    shot_cool_down: int = 5
    enemy_move_interval: int = 12
    enemy_shot_interval: int = 10

    def validate(self) -> None:
        super().validate()
        for name in ("shot_cool_down", "enemy_move_interval", "enemy_shot_interval"):
            require(self, name, lambda v: v >= 0, "a non-negative integer")


def _wave() -> np.ndarray:
    """A fresh alien block: rows 0-3, columns 2-7."""
    return (_ROWS <= 3) & (_COLS >= 2) & (_COLS <= 7)


def _nearest_alien(alien_map: jax.Array, pos: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The lowest alien of the column closest to the cannon: `(row, col, exists)`.

    Ties in distance go to the left column, as MinAtar's stable sort of 0..9 does.
    """
    cols = jnp.arange(10)
    occupied = jnp.any(alien_map, axis=0)
    score = jnp.where(occupied, jnp.abs(cols - pos) * 10 + cols, 1000)
    col = jnp.argmin(score)
    row = 9 - jnp.argmax(alien_map[::-1, col])
    return row, col, jnp.any(occupied)


def _move_aliens(
    state: SpaceInvadersState,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One alien move: sideways, or down and turn at an edge.

    Returns `(alien_map, alien_dir, move_timer, stepped_down_from_bottom)`.
    Like MinAtar's `np.roll`, moves wrap around (a block stepping down from row 9
    reappears on row 0, but that step also ends the game).
    """
    aliens, direction = state.alien_map, state.alien_dir
    at_edge = (jnp.any(aliens[:, 0]) & (direction < 0)) | (jnp.any(aliens[:, 9]) & (direction > 0))
    down = jnp.roll(aliens, 1, axis=0)
    sideways = jnp.where(direction < 0, jnp.roll(aliens, -1, axis=1), jnp.roll(aliens, 1, axis=1))
    move_timer = jnp.minimum(jnp.sum(aliens), state.enemy_move_interval)
    return (
        jnp.where(at_edge, down, sideways),
        jnp.where(at_edge, -direction, direction),
        move_timer.astype(jnp.int32),
        at_edge & jnp.any(aliens[9, :]),
    )


class SpaceInvaders(MinAtarEnvironment[SpaceInvadersState, SpaceInvadersParams]):
    """SpaceInvaders-MinAtar. Observation (10, 10, 6) bool; actions: no-op, left, right, fire."""

    minimal_actions = ("n", "l", "r", "f")
    num_channels = 6
    stochastic_reset = False  # fixed start state: `step` hands its whole key to `step_env`

    @property
    def name(self) -> str:
        return "SpaceInvaders-MinAtar"

    @property
    def default_params(self) -> SpaceInvadersParams:
        return SpaceInvadersParams()

    def reset_env(
        self, key: jax.Array, params: SpaceInvadersParams
    ) -> tuple[jax.Array, SpaceInvadersState]:
        del key  # the start state is fixed
        i32 = lambda v: jnp.asarray(v, jnp.int32)
        empty = jnp.zeros((10, 10), jnp.bool_)
        state = SpaceInvadersState(
            pos=i32(5),
            f_bullet_map=empty,
            e_bullet_map=empty,
            alien_map=jnp.asarray(_wave()),
            alien_dir=i32(-1),
            enemy_move_interval=i32(params.enemy_move_interval),
            alien_move_timer=i32(params.enemy_move_interval),
            alien_shot_timer=i32(params.enemy_shot_interval),
            ramp_index=i32(0),
            shot_timer=i32(0),
            **initial_common(),
        )
        return self.get_obs(state), state

    def transition(
        self,
        state: SpaceInvadersState,
        game_action: jax.Array,
        draws: tuple,
        params: SpaceInvadersParams,
    ) -> tuple[SpaceInvadersState, jax.Array]:
        pos = state.pos
        fire = (game_action == FIRE) & (state.shot_timer == 0)
        f_bullets = state.f_bullet_map | (fire & paint_point(9, pos))
        shot_timer = jnp.where(fire, params.shot_cool_down, state.shot_timer)
        pos = jnp.where(game_action == LEFT, jnp.maximum(0, pos - 1), pos)
        pos = jnp.where(game_action == RIGHT, jnp.minimum(9, pos + 1), pos)

        # Bullets fly one row (player's up, aliens' down) and vanish off the screen.
        f_bullets = jnp.concatenate([f_bullets[1:], _EMPTY_ROW], axis=0)
        e_bullets = jnp.concatenate([_EMPTY_ROW, state.e_bullet_map[:-1]], axis=0)
        terminal = e_bullets[9, pos] | state.alien_map[9, pos]

        move_now = state.alien_move_timer == 0
        moved, moved_dir, moved_timer, crashed = _move_aliens(state)
        aliens = jnp.where(move_now, moved, state.alien_map)
        alien_dir = jnp.where(move_now, moved_dir, state.alien_dir)
        alien_move_timer = jnp.where(move_now, moved_timer, state.alien_move_timer)
        terminal = terminal | (move_now & (crashed | aliens[9, pos]))

        # The alien nearest the cannon fires from its cell.
        shoot_now = state.alien_shot_timer == 0
        row, col, any_alien = _nearest_alien(aliens, pos)
        shot = shoot_now & any_alien & paint_point(row, col)
        e_bullets = e_bullets | shot
        alien_shot_timer = jnp.where(shoot_now, params.enemy_shot_interval, state.alien_shot_timer)

        kills = aliens & f_bullets
        aliens = aliens & ~kills
        f_bullets = f_bullets & ~kills

        # A cleared wave respawns; while ramping, each new wave moves one step faster.
        cleared = ~jnp.any(aliens)
        ramps = cleared & params.ramping & (state.enemy_move_interval > MIN_MOVE_INTERVAL)
        next_state = state.replace(
            pos=pos,
            f_bullet_map=f_bullets,
            e_bullet_map=e_bullets,
            alien_map=aliens | (cleared & _wave()),
            alien_dir=alien_dir,
            enemy_move_interval=state.enemy_move_interval - ramps,
            alien_move_timer=alien_move_timer - 1,
            alien_shot_timer=(alien_shot_timer - 1).astype(jnp.int32),
            ramp_index=state.ramp_index + ramps,
            shot_timer=(shot_timer - (shot_timer > 0)).astype(jnp.int32),
            terminal=terminal,
        )
        return next_state, jnp.sum(kills).astype(jnp.float32)

    def get_obs(
        self, state: SpaceInvadersState, params: SpaceInvadersParams | None = None
    ) -> jax.Array:
        aliens = state.alien_map
        left = state.alien_dir < 0
        return jnp.stack(
            [
                paint_point(9, state.pos),
                aliens,
                aliens & left,
                aliens & ~left,
                state.f_bullet_map,
                state.e_bullet_map,
            ],
            axis=-1,
        )
