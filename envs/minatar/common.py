"""Shared pieces of the four MinAtar games: params, sticky actions, action sets, drawing.

Every game is written as three pure functions so the randomness can be separated
from the rules (the parity tests rely on this):

* `sample_draws(key, state, params)`: every random outcome a step may need (e.g.
  where Asterix spawns an entity), drawn from a JAX key;
* `transition(state, game_action, draws, params)`: the game rules, deterministic
  given the draws, a line-by-line match of MinAtar's `Env.act`;
* `get_obs(state)`: the 10x10xC boolean frame of MinAtar's `Env.state()`.

`MinAtarEnvironment.step_env` chains them and adds MinAtar's sticky actions, so a
test can replay a reference trajectory by feeding the reference's realised random
outcomes to `transition` instead of sampled ones.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import prng

from .. import spaces
from ..core import Environment, EnvParams, EnvState, require

__all__ = [
    "FULL_ACTIONS",
    "MinAtarEnvironment",
    "MinAtarParams",
    "MinAtarState",
    "action_set",
    "paint",
    "paint_point",
    "sticky_action",
]

# MinAtar's full action set, in its order: no-op, left, up, right, down, fire.
FULL_ACTIONS = ("n", "l", "u", "r", "d", "f")
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)

GRID = 10  # every MinAtar frame is GRID x GRID


@struct.dataclass
class MinAtarState(EnvState):
    """Fields common to every MinAtar game.

    Attributes:
        last_action: Minimal-set index of the action executed on the previous
            step; a sticky action repeats it. A new episode starts from no-op
            (MinAtar's wrapper instead carries it over from the last episode,
            which a stateless reset cannot do; it starts at no-op too).
        terminal: Set by the game rules (MinAtar's `Env.terminal`); a terminal
            state absorbs further steps with zero reward, as `Env.act` does.
    """

    last_action: jax.Array
    terminal: jax.Array


@struct.dataclass
class MinAtarParams(EnvParams):
    """Parameters shared by the MinAtar games.

    Attributes:
        sticky_action_prob: Probability that the previous action is executed
            instead of the chosen one (MinAtar's `sticky_action_prob`, default 0.1).
        max_steps_in_episode: Truncation limit. MinAtar itself (and its
            gymnasium registration) has none; gymnax truncates at 1000 (2500 for
            Freeway), which cuts off the long episodes of good Breakout / Space
            Invaders agents and so changes the task. We use 10000: a safety cap
            that random or moderately trained agents never reach.
    """

    max_steps_in_episode: int = 10_000
    sticky_action_prob: float = 0.1

    def validate(self) -> None:
        super().validate()
        require(self, "sticky_action_prob", lambda v: (v >= 0) & (v <= 1), "in [0, 1]")


def action_set(minimal: tuple[str, ...]) -> np.ndarray:
    """Maps minimal-action indices to MinAtar's full action indices (e.g. "nlr" -> [0, 1, 3])."""
    return np.asarray([FULL_ACTIONS.index(a) for a in minimal], np.int32)


def sticky_action(
    key: jax.Array, action: jax.Array, last_action: jax.Array, prob: jax.Array
) -> jax.Array:
    """With probability `prob`, returns `last_action` instead of `action` (MinAtar's rule)."""
    repeat = prng.uniform(key) < prob
    return jnp.where(repeat, last_action, action)


def paint(ys: jax.Array, xs: jax.Array, mask: jax.Array) -> jax.Array:
    """A GRID x GRID boolean layer that is True at each `(ys[i], xs[i])` with `mask[i]`.

    Points off the grid or masked out paint nothing; overlapping points are fine.
    One scatter into the flattened grid: a broadcast-compare-reduce
    (`any(rows == ys & cols == xs & mask)`) gives the same layer, but XLA fuses
    it into its consumers and recomputes the game state feeding it for every
    cell, which costs most where a game paints many layers (Freeway's 7).
    """
    on_grid = (ys >= 0) & (ys < GRID) & (xs >= 0) & (xs < GRID)
    # Off-grid or masked points go to index GRID * GRID, which mode="drop" ignores.
    flat = jnp.where(mask & on_grid, ys * GRID + xs, GRID * GRID)
    layer = jnp.zeros((GRID * GRID,), jnp.bool_).at[flat].set(True, mode="drop")
    return layer.reshape(GRID, GRID)


def paint_point(y: jax.Array, x: jax.Array) -> jax.Array:
    """A GRID x GRID boolean layer that is True only at `(y, x)` (all False if off the grid).

    A one-hot compare against the flat cell index: for a single point this is
    cheaper than `paint`'s scatter (one fused elementwise pass, no scatter).
    """
    y, x = jnp.asarray(y, jnp.int32), jnp.asarray(x, jnp.int32)
    on_grid = (y >= 0) & (y < GRID) & (x >= 0) & (x < GRID)
    flat = jnp.where(on_grid, y * GRID + x, -1)
    return (jnp.arange(GRID * GRID, dtype=jnp.int32) == flat).reshape(GRID, GRID)


TState = TypeVar("TState", bound=MinAtarState)
TParams = TypeVar("TParams", bound=MinAtarParams)


class MinAtarEnvironment(Environment[TState, TParams], Generic[TState, TParams]):
    """Base class: sticky actions + action-set mapping around a game's `transition`.

    Subclasses set `minimal_actions` and `num_channels` and implement
    `reset_env`, `sample_draws`, `transition` and `get_obs`.
    """

    minimal_actions: tuple[str, ...] = FULL_ACTIONS
    num_channels: int = 0
    # Whether `sample_draws` uses its key; without draws the step key goes to the
    # sticky-action draw whole.
    has_draws: bool = False
    obs_from_state = True  # `step` builds the auto-reset observation from the state

    def __init__(self) -> None:
        self.action_set = action_set(self.minimal_actions)

    def step_env(
        self, key: jax.Array, state: TState, action: Any, params: TParams
    ) -> tuple[jax.Array, TState, jax.Array, jax.Array, dict[str, Any]]:
        """Resolves the sticky action, samples the step's random outcomes, applies the rules."""
        if self.has_draws:
            key_sticky, key_draws = prng.split(key)  # == jax.random.split(key)
        else:
            key_sticky = key_draws = key  # sample_draws ignores its key
        # Out-of-range indices are clipped: values cannot be checked under jit.
        action = jnp.clip(jnp.asarray(action, jnp.int32), 0, len(self.minimal_actions) - 1)
        action = sticky_action(key_sticky, action, state.last_action, params.sticky_action_prob)
        draws = self.sample_draws(key_draws, state, params)
        return self.step_with_draws(state, action, draws, params)

    def step_with_draws(
        self, state: TState, action: jax.Array, draws: Any, params: TParams
    ) -> tuple[jax.Array, TState, jax.Array, jax.Array, dict[str, Any]]:
        """`step_env` with the random outcomes given: `action` is the executed
        (post-sticky) minimal-set index, `draws` what `sample_draws` would return.

        Lets tests replay a reference trajectory with its realised randomness.
        """
        game_action = jnp.asarray(self.action_set)[action]
        next_state, reward = self.transition(state, game_action, draws, params)
        # MinAtar's act() on a finished game changes nothing and pays nothing.
        next_state = jax.tree.map(
            lambda old, new: jnp.where(state.terminal, old, new), state, next_state
        )
        reward = jnp.where(state.terminal, 0.0, reward).astype(jnp.float32)
        next_state = next_state.replace(time=state.time + 1, last_action=action)
        return self.get_obs(next_state), next_state, reward, next_state.terminal, {}

    # ------------------------------------------------------- implemented by games
    def sample_draws(self, key: jax.Array, state: TState, params: TParams) -> Any:
        """Random outcomes the next `transition` may use (a pytree; `()` if none)."""
        return ()

    def transition(
        self, state: TState, game_action: jax.Array, draws: Any, params: TParams
    ) -> tuple[TState, jax.Array]:
        """MinAtar's `Env.act`: returns `(next_state, reward)`; sets `terminal`.

        `game_action` is an index into `FULL_ACTIONS`. Leaves `time` and
        `last_action` to `step_with_draws`.
        """
        raise NotImplementedError

    def get_obs(self, state: TState, params: TParams | None = None) -> jax.Array:
        raise NotImplementedError

    # ------------------------------------------------------------------ spaces
    def observation_space(self, params: TParams) -> spaces.Box:
        return spaces.Box(False, True, (GRID, GRID, self.num_channels), jnp.bool_)

    def action_space(self, params: TParams) -> spaces.Discrete:
        return spaces.Discrete(len(self.minimal_actions))


def initial_common() -> dict[str, jax.Array]:
    """The `time`, `last_action` (no-op) and `terminal` fields of a fresh episode."""
    return {
        "time": jnp.zeros((), jnp.int32),
        "last_action": jnp.zeros((), jnp.int32),
        "terminal": jnp.zeros((), jnp.bool_),
    }
