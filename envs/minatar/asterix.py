"""MinAtar Asterix (Young & Tian 2019), rule-for-rule equal to minatar 1.0.15.

The player moves in the four directions; enemies and gold enter from the sides
in eight lanes (rows 1-8). +1 per gold picked up, termination on touching an
enemy. Difficulty ramps: every ~100 steps entities spawn more often and (every
other ramp) move faster. Channels: player, enemy, trail, gold. Minimal actions:
no-op, left, up, right, down.

Randomness (what `sample_draws` returns): when the spawn timer runs out, the new
entity's side, whether it is gold, and which free lane it takes. State field
names and the entity layout follow gymnax's `MinAsterix`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

from ..core import require
from .common import (
    DOWN,
    LEFT,
    RIGHT,
    UP,
    MinAtarEnvironment,
    MinAtarParams,
    MinAtarState,
    initial_common,
    paint,
    paint_point,
)

NUM_SLOTS = 8  # one entity lane per row 1..8
# Columns of the `entities` array (one row per lane).
X, Y, LR, GOLD, ALIVE = range(5)


@struct.dataclass
class AsterixState(MinAtarState):
    player_x: jax.Array
    player_y: jax.Array
    shot_timer: jax.Array  # unused by the rules (as in MinAtar), kept for gymnax parity
    spawn_speed: jax.Array
    spawn_timer: jax.Array
    move_speed: jax.Array
    move_timer: jax.Array
    ramp_timer: jax.Array
    ramp_index: jax.Array
    # (8, 5) int32, one row per lane: x, y, moves left-to-right, is gold, alive.
    # Rows of dead entities are all zeros.
    entities: jax.Array


@struct.dataclass
class AsterixParams(MinAtarParams):
    ramping: bool = True
    ramp_interval: int = 100
    init_spawn_speed: int = 10
    init_move_interval: int = 5

    def validate(self) -> None:
        super().validate()
        for name in ("ramp_interval", "init_spawn_speed", "init_move_interval"):
            require(self, name, lambda v: v >= 1, "a positive integer")


@struct.dataclass
class AsterixDraws:
    """Random outcomes of one step; only used when an entity spawns.

    Attributes:
        left_to_right: The entity enters at column 0 moving right (else column 9, left).
        gold: The entity is gold (probability 1/3) rather than an enemy.
        slot_rank: Which free lane it takes, counted among the free lanes in order
            (MinAtar's `slot_options[randint(len(slot_options))]`).
    """

    left_to_right: jax.Array
    gold: jax.Array
    slot_rank: jax.Array


def sample_draws(key: jax.Array, state: AsterixState) -> AsterixDraws:
    """Draws a spawn as MinAtar does: side 1/2, gold 1/3, a uniformly random free lane."""
    # One uniform draw for all three (cheaper to compile than three samplers).
    u_lr, u_gold, u_slot = prng.uniform(key, (3,))
    num_free = jnp.sum(state.entities[:, ALIVE] == 0)
    rank = jnp.floor(u_slot * num_free).astype(jnp.int32)
    return AsterixDraws(
        left_to_right=u_lr < 0.5,
        gold=u_gold < 1.0 / 3.0,
        slot_rank=jnp.minimum(rank, jnp.maximum(num_free - 1, 0)),  # guard u * n rounding to n
    )


def _spawn(entities: jax.Array, draws: AsterixDraws) -> jax.Array:
    """Puts a new entity in the `slot_rank`-th free lane (no-op if all lanes are full)."""
    free = entities[:, ALIVE] == 0
    rank = jnp.cumsum(free) - 1
    chosen = free & (rank == draws.slot_rank)
    lr = draws.left_to_right.astype(jnp.int32)
    lanes = jnp.arange(NUM_SLOTS, dtype=jnp.int32)
    new = jnp.stack(
        [
            jnp.broadcast_to(jnp.where(lr == 1, 0, 9), (NUM_SLOTS,)),
            lanes + 1,
            jnp.broadcast_to(lr, (NUM_SLOTS,)),
            jnp.broadcast_to(draws.gold.astype(jnp.int32), (NUM_SLOTS,)),
            jnp.ones((NUM_SLOTS,), jnp.int32),
        ],
        axis=1,
    )
    return jnp.where(chosen[:, None], new, entities)


def _collide(
    entities: jax.Array, player_x: jax.Array, player_y: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Gold under the player is collected (+1 each), an enemy there ends the game."""
    alive = entities[:, ALIVE] == 1
    here = alive & (entities[:, X] == player_x) & (entities[:, Y] == player_y)
    gold = entities[:, GOLD] == 1
    collected = here & gold
    entities = jnp.where(collected[:, None], 0, entities)
    return entities, jnp.sum(collected), jnp.any(here & ~gold)


def _move(entities: jax.Array) -> jax.Array:
    """Moves every entity one column along its direction; those leaving the screen die."""
    alive = entities[:, ALIVE] == 1
    x = entities[:, X] + jnp.where(entities[:, LR] == 1, 1, -1)
    gone = (x < 0) | (x > 9)
    entities = entities.at[:, X].set(jnp.where(alive, x, entities[:, X]))
    return jnp.where((alive & gone)[:, None], 0, entities)


def _ramp(state: AsterixState, params: AsterixParams) -> AsterixState:
    """MinAtar's difficulty ramp: after the ramp timer runs below 0, speed things up."""
    can_ramp = params.ramping & ((state.spawn_speed > 1) | (state.move_speed > 1))
    ticking = can_ramp & (state.ramp_timer >= 0)
    ramps = can_ramp & (state.ramp_timer < 0)
    # Movement only speeds up on odd ramps, spawning on every ramp.
    faster_move = ramps & (state.move_speed > 1) & (state.ramp_index % 2 == 1)
    faster_spawn = ramps & (state.spawn_speed > 1)
    ramp_timer = jnp.where(ticking, state.ramp_timer - 1, state.ramp_timer)
    return state.replace(
        ramp_timer=jnp.where(ramps, params.ramp_interval, ramp_timer).astype(jnp.int32),
        move_speed=state.move_speed - faster_move,
        spawn_speed=state.spawn_speed - faster_spawn,
        ramp_index=state.ramp_index + ramps,
    )


class Asterix(MinAtarEnvironment[AsterixState, AsterixParams]):
    """Asterix-MinAtar. Observation (10, 10, 4) bool; actions: no-op, left, up, right, down."""

    minimal_actions = ("n", "l", "u", "r", "d")
    num_channels = 4
    has_draws = True
    stochastic_reset = False  # fixed start state: `step` hands its whole key to `step_env`

    @property
    def name(self) -> str:
        return "Asterix-MinAtar"

    @property
    def default_params(self) -> AsterixParams:
        return AsterixParams()

    def reset_env(self, key: jax.Array, params: AsterixParams) -> tuple[jax.Array, AsterixState]:
        del key  # the start state is fixed
        i32 = lambda v: jnp.asarray(v, jnp.int32)
        state = AsterixState(
            player_x=i32(5),
            player_y=i32(5),
            shot_timer=i32(0),
            spawn_speed=i32(params.init_spawn_speed),
            spawn_timer=i32(params.init_spawn_speed),
            move_speed=i32(params.init_move_interval),
            move_timer=i32(params.init_move_interval),
            ramp_timer=i32(params.ramp_interval),
            ramp_index=i32(0),
            entities=jnp.zeros((NUM_SLOTS, 5), jnp.int32),
            **initial_common(),
        )
        return self.get_obs(state), state

    def sample_draws(
        self, key: jax.Array, state: AsterixState, params: AsterixParams
    ) -> AsterixDraws:
        return sample_draws(key, state)

    def transition(
        self,
        state: AsterixState,
        game_action: jax.Array,
        draws: AsterixDraws,
        params: AsterixParams,
    ) -> tuple[AsterixState, jax.Array]:
        spawn_now = state.spawn_timer == 0
        entities = jnp.where(spawn_now, _spawn(state.entities, draws), state.entities)
        spawn_timer = jnp.where(spawn_now, state.spawn_speed, state.spawn_timer)

        px = jnp.where(game_action == LEFT, jnp.maximum(0, state.player_x - 1), state.player_x)
        px = jnp.where(game_action == RIGHT, jnp.minimum(9, state.player_x + 1), px)
        py = jnp.where(game_action == UP, jnp.maximum(1, state.player_y - 1), state.player_y)
        py = jnp.where(game_action == DOWN, jnp.minimum(8, state.player_y + 1), py)

        # Collisions are checked before and (on move steps) after entities move.
        entities, reward, hit = _collide(entities, px, py)
        move_now = state.move_timer == 0
        moved, reward_moved, hit_moved = _collide(_move(entities), px, py)
        entities = jnp.where(move_now, moved, entities)
        reward = reward + jnp.where(move_now, reward_moved, 0)
        hit = hit | (move_now & hit_moved)
        move_timer = jnp.where(move_now, state.move_speed, state.move_timer)

        next_state = state.replace(
            player_x=px,
            player_y=py,
            entities=entities,
            spawn_timer=spawn_timer - 1,
            move_timer=move_timer - 1,
            terminal=hit,
        )
        return _ramp(next_state, params), reward.astype(jnp.float32)

    def get_obs(self, state: AsterixState, params: AsterixParams | None = None) -> jax.Array:
        e = state.entities
        alive = e[:, ALIVE] == 1
        gold = e[:, GOLD] == 1
        back_x = jnp.where(e[:, LR] == 1, e[:, X] - 1, e[:, X] + 1)
        trail = alive & (back_x >= 0) & (back_x <= 9)
        return jnp.stack(
            [
                paint_point(state.player_y, state.player_x),
                paint(e[:, Y], e[:, X], alive & ~gold),
                paint(e[:, Y], back_x, trail),
                paint(e[:, Y], e[:, X], alive & gold),
            ],
            axis=-1,
        )
