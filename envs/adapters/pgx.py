"""pgx board games (Koyamada et al. 2023) through jaxrl's API: `envs.make("pgx:tic_tac_toe")`.

Any id of `pgx.available_envs()`. Needs the `pgx` extra (`pip install 'jaxrl[pgx]'`).

A pgx game has several players; a jaxrl environment has one agent. The adapter makes
the game a single-agent task: the agent is player 0 and every other player's move is
drawn uniformly among its legal actions (a random opponent, inside the step, so the
whole game is still one compiled program). `reset` plays the opponent's opening moves
when player 0 does not start; `step` plays the agent's move, then the opponent's
moves until it is the agent's turn again or the game ends. The reward is the agent's
(`state.rewards[0]`) summed over those moves: +1 for a win, -1 for a loss, as pgx
scores games. Single-player games (`2048`) have no opponent.

What else the adapter changes (see `_suite.py`): pgx does not auto-reset (a finished
game stays finished); ours does. pgx's `terminated` is a termination, its own
`truncated` (games with a move limit) a truncation, as is our `max_steps_in_episode`
(counting the agent's moves; default out of reach). An illegal action is pgx's rule:
the mover loses and the game ends; the agent's legal actions for its next move are
`state.inner.legal_action_mask` (of the state `step` returns, after any auto-reset).
Observations are pgx's (from the agent's side of the board), a `Box` of pgx's dtype
(bool planes for most games).

Why every step plays an opening move. Half of a two-player game's episodes start with
the opponent to move (pgx draws the first player), and the agent must see the board
after the opponent's opening move, so a fresh start (`reset_env`) is pgx's `init` plus
the opponent's moves. The auto-reset computes that fresh start for every copy on every
step and keeps it where an episode ended (`Environment.step`; under `vmap` a branch is
computed for every copy), so a step costs the agent's move, the opponent's reply and
the opening move of a fresh game. The opening move cannot be skipped without changing
the game (pgx's own `auto_reset` returns the bare `init` state, and a caller stepping
it as player 0 plays the opponent's first move); nor can it be played only where a game
ended (it would run after the reply, a second move in sequence, computed for every
copy anyway). What saves the work in training is drawing fewer fresh starts than
copies: `OptimisticResets` (`envs/optimistic_resets.py`, PPO's `reset_ratio`).

Overrides: `max_steps_in_episode` only (`pgx.make` takes none; Go's sizes are ids:
`go_9x9`, `go_19x19`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import prng

from .. import spaces
from ..core import Environment
from ._suite import OUT_OF_REACH, SuiteParams, SuiteState, import_suite, unknown_id

__all__ = ["AGENT", "PACKAGE", "PgxEnvironment", "ids", "make"]

PACKAGE = "pgx"
AGENT = 0  # the agent's player id; every other player is the random opponent


def ids() -> list[str]:
    """pgx's game ids (without the `pgx:` prefix)."""
    pgx = import_suite("pgx", "pgx", "pgx")
    return sorted(pgx.available_envs())


def _random_legal_action(key: jax.Array, legal: jax.Array) -> jax.Array:
    """A uniformly random legal action: Gumbel-max over the legal ones."""
    noise = prng.gumbel(key, legal.shape)
    return jnp.argmax(jnp.where(legal, noise, -jnp.inf)).astype(jnp.int32)


class PgxEnvironment(Environment[SuiteState, SuiteParams]):
    """A pgx game against a uniformly random opponent; see the module docstring."""

    def __init__(self, pgx_env: Any, name: str):
        self.pgx_env = pgx_env
        self._name = name
        probe = jax.eval_shape(pgx_env.init, jax.random.key(0))
        self._obs_shape = tuple(probe.observation.shape)
        self._obs_dtype = np.dtype(probe.observation.dtype)

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> SuiteParams:
        return SuiteParams(max_steps_in_episode=OUT_OF_REACH)

    def _opponent_moves(self, key: jax.Array, state: Any) -> tuple[Any, jax.Array]:
        """Plays random legal moves while the game goes on and it is not the agent's turn.

        Returns the state and the agent's reward summed over those moves.
        """

        def opponent_to_move(carry: tuple[Any, jax.Array, jax.Array]) -> jax.Array:
            state = carry[0]
            ended = jnp.logical_or(state.terminated, state.truncated)
            return jnp.logical_and(~ended, state.current_player != AGENT)

        def move(carry: tuple[Any, jax.Array, jax.Array]) -> tuple[Any, jax.Array, jax.Array]:
            state, reward, count = carry
            k_action, k_step = prng.split(prng.fold_in(key, count))
            action = _random_legal_action(k_action, state.legal_action_mask)
            state = self.pgx_env.step(state, action, k_step)
            return state, reward + state.rewards[AGENT], count + 1

        start = (state, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
        state, reward, _ = jax.lax.while_loop(opponent_to_move, move, start)
        return state, reward

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, SuiteState]:
        k_init, k_opponent = prng.split(key)
        game = self.pgx_env.init(k_init)
        game, _ = self._opponent_moves(k_opponent, game)
        return game.observation, SuiteState(inner=game, time=jnp.zeros((), jnp.int32))

    def step_env(
        self, key: jax.Array, state: SuiteState, action: jax.Array, params: SuiteParams
    ) -> tuple[jax.Array, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        k_step, k_opponent = prng.split(key)
        game = self.pgx_env.step(state.inner, action, k_step)
        reward = game.rewards[AGENT]
        game, opponent_reward = self._opponent_moves(k_opponent, game)
        new_state = SuiteState(inner=game, time=state.time + 1)
        return game.observation, new_state, reward + opponent_reward, game.terminated, {}

    def is_truncated(self, state: SuiteState, params: SuiteParams) -> jax.Array:
        """Our time limit, or pgx's own (a game's move limit)."""
        return jnp.logical_or(state.time >= params.max_steps_in_episode, state.inner.truncated)

    def observation_space(self, params: SuiteParams) -> spaces.Box:
        dtype = self._obs_dtype
        if dtype == np.bool_:
            return spaces.Box(False, True, self._obs_shape, dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return spaces.Box(info.min, info.max, self._obs_shape, dtype)
        return spaces.Box(-np.inf, np.inf, self._obs_shape, dtype)

    def action_space(self, params: SuiteParams) -> spaces.Discrete:
        return spaces.Discrete(int(self.pgx_env.num_actions))


def make(env_id: str, **overrides: Any) -> tuple[PgxEnvironment, SuiteParams]:
    """Builds pgx game `env_id` against a random opponent: returns `(env, params)`."""
    pgx = import_suite("pgx", "pgx", "pgx")
    known = sorted(pgx.available_envs())
    if env_id not in known:
        raise unknown_id("pgx", env_id, known)
    overrides = dict(overrides)
    limit = overrides.pop("max_steps_in_episode", OUT_OF_REACH)
    try:
        raw = pgx.make(env_id, **overrides)
    except TypeError as err:
        raise ValueError(
            f"make('pgx:{env_id}'): unknown override(s) {sorted(overrides)} "
            f"(max_steps_in_episode, or pgx.make's arguments): {err}"
        ) from err
    env = PgxEnvironment(raw, f"pgx:{env_id}")
    params = SuiteParams(max_steps_in_episode=limit)
    params.validate()
    return env, params
