"""Parity of jaxrl's MinAtar games with the reference `minatar` package (v1.0.15).

The reference draws its random events (spawns, car speeds) from NumPy, so the
two cannot agree bit for bit on them. Instead every random draw the reference
game makes is recorded, translated into our `draws` pytree and injected into
`step_with_draws`; on steps without a random event our own sampled draws are
passed, which checks that the rules ignore them there. Our environment then runs
free (synced only at episode starts) over the reference's whole trajectory and
must reproduce every frame, reward, termination and state field exactly.
Episode starts are partly perturbed (fewer bricks, late difficulty levels,
nearly cleared waves, the Freeway clock near its end) so that rare branches
(brick refills, ramps, full lanes, wave clears, time-outs) are reached. Each
game's coverage counts every way MinAtar ends it (Breakout: ball missed;
Asterix: stepping onto an enemy, or an enemy moving onto the player; Freeway:
the clock; SpaceInvaders: an alien bullet, or aliens reaching the bottom) and
the test fails if one is never reached. The time-limit truncation that jaxrl
adds is checked for every registered environment in test_api_conformance.py.

Also checked: sticky-action frequency, frame dtype/shape, the random draws'
distributions, and that a random policy's mean return and episode length agree
with the reference's under the same policy.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("minatar")
from minatar import Environment as RefEnvironment  # noqa: E402

from jaxrl import envs  # noqa: E402
from jaxrl.envs.minatar import (  # noqa: E402
    Asterix,
    AsterixState,
    Breakout,
    BreakoutState,
    Freeway,
    FreewayState,
    MinAtarEnvironment,
    SpaceInvaders,
    SpaceInvadersState,
)
from jaxrl.envs.minatar import asterix as asterix_mod  # noqa: E402
from jaxrl.envs.minatar import freeway as freeway_mod  # noqa: E402
from jaxrl.envs.minatar.common import FULL_ACTIONS  # noqa: E402

I32 = np.int32


# ---------------------------------------------------------------- reference -> our state
def _common(time: int, last_action: int, terminal: bool) -> dict[str, np.ndarray]:
    return {
        "time": I32(time),
        "last_action": I32(last_action),
        "terminal": np.bool_(terminal),
    }


def breakout_state(g: Any, time: int, last_action: int = 0) -> BreakoutState:
    return BreakoutState(
        ball_y=I32(g.ball_y),
        ball_x=I32(g.ball_x),
        ball_dir=I32(g.ball_dir),
        pos=I32(g.pos),
        brick_map=np.asarray(g.brick_map, bool),
        strike=np.bool_(g.strike),
        last_y=I32(g.last_y),
        last_x=I32(g.last_x),
        **_common(time, last_action, g.terminal),
    )


def asterix_state(g: Any, time: int, last_action: int = 0) -> AsterixState:
    entities = np.zeros((8, 5), I32)
    for i, e in enumerate(g.entities):
        if e is not None:
            entities[i] = [e[0], e[1], int(e[2]), int(e[3]), 1]
    return AsterixState(
        player_x=I32(g.player_x),
        player_y=I32(g.player_y),
        shot_timer=I32(g.shot_timer),
        spawn_speed=I32(g.spawn_speed),
        spawn_timer=I32(g.spawn_timer),
        move_speed=I32(g.move_speed),
        move_timer=I32(g.move_timer),
        ramp_timer=I32(g.ramp_timer),
        ramp_index=I32(g.ramp_index),
        entities=entities,
        **_common(time, last_action, g.terminal),
    )


def freeway_state(g: Any, time: int, last_action: int = 0) -> FreewayState:
    del time  # Freeway's clock is part of the game: time = time_limit - terminate_timer
    return FreewayState(
        pos=I32(g.pos),
        cars=np.asarray(g.cars, I32),
        move_timer=I32(g.move_timer),
        **_common(2500 - g.terminate_timer, last_action, g.terminal),
    )


def space_invaders_state(g: Any, time: int, last_action: int = 0) -> SpaceInvadersState:
    return SpaceInvadersState(
        pos=I32(g.pos),
        f_bullet_map=np.asarray(g.f_bullet_map, bool),
        e_bullet_map=np.asarray(g.e_bullet_map, bool),
        alien_map=np.asarray(g.alien_map, bool),
        alien_dir=I32(g.alien_dir),
        enemy_move_interval=I32(g.enemy_move_interval),
        alien_move_timer=I32(g.alien_move_timer),
        alien_shot_timer=I32(g.alien_shot_timer),
        ramp_index=I32(g.ramp_index),
        shot_timer=I32(g.shot_timer),
        **_common(time, last_action, g.terminal),
    )


# ------------------------------------------------------ reference random draws -> ours
class RecordingRandom:
    """Stands in for the game's `RandomState` and logs (a copy of) every draw it hands
    out: the games modify returned arrays in place (Freeway's `speeds *= directions`)."""

    def __init__(self, rng: np.random.RandomState):
        self.rng = rng
        self.calls: list[tuple[str, Any]] = []

    def rand(self, *shape: int) -> Any:
        out = self.rng.rand(*shape)
        self.calls.append(("rand", np.copy(out)))
        return out

    def randint(self, *args: Any) -> Any:
        out = self.rng.randint(*args)
        self.calls.append(("randint", np.copy(out)))
        return out


def no_draws(calls: list) -> tuple:
    assert not calls, f"deterministic game drew random numbers: {calls}"
    return ()


def asterix_draws(calls: list) -> asterix_mod.AsterixDraws:
    # _spawn_entity: rand() for the side, rand() for gold, randint(#free) for the lane
    # (skipped when no lane is free).
    (_, lr), (_, gold), *rest = calls
    rank = rest[0][1] if rest else 0
    return asterix_mod.AsterixDraws(
        left_to_right=np.bool_(lr < 0.5), gold=np.bool_(gold < 1 / 3), slot_rank=I32(rank)
    )


def freeway_draws(calls: list) -> np.ndarray:
    # _randomize_cars: randint(1, 6, 8) magnitudes, sign(rand(8) - 0.5) directions.
    (_, speeds), (_, signs) = calls
    return (speeds * np.sign(signs - 0.5)).astype(I32)


# --------------------------------------------------- policies and episode perturbations
def uniform_policy(n: int) -> Callable[[Any, np.random.RandomState], int]:
    return lambda g, rng: rng.randint(n)


def breakout_policy(g: Any, rng: np.random.RandomState) -> int:
    """Half the time follow the ball (for longer rallies), otherwise act at random."""
    if rng.rand() < 0.5:
        return int(rng.randint(3))
    return 1 if g.ball_x < g.pos else 2 if g.ball_x > g.pos else 0


def freeway_policy(g: Any, rng: np.random.RandomState) -> int:
    return int(rng.choice(3, p=[0.15, 0.7, 0.15]))  # mostly up, so crossings happen


def space_invaders_policy(g: Any, rng: np.random.RandomState) -> int:
    """Half the time fire or close in on the lowest alien, otherwise act at random."""
    if rng.rand() < 0.5:
        return int(rng.randint(4))
    if g.shot_timer == 0:
        return 3
    cols = np.flatnonzero(g.alien_map.any(axis=0))
    target = cols[np.argmin(np.abs(cols - g.pos))]
    return 1 if target < g.pos else 2 if target > g.pos else 0


def perturb_breakout(g: Any, rng: np.random.RandomState, episode: int) -> None:
    """Vary episode starts: most (sometimes all) bricks gone, so the wall refills, or
    the ball already inside a half-broken wall, so it hits bricks on consecutive steps."""
    if episode % 3 == 1:
        g.brick_map = g.brick_map * (rng.rand(10, 10) < rng.choice([0.0, 0.2]))
    elif episode % 3 == 2:
        g.brick_map = g.brick_map * (rng.rand(10, 10) < 0.5)
        g.ball_y = g.last_y = int(rng.randint(1, 4))
        g.ball_x = g.last_x = int(rng.randint(10))
        g.ball_dir = int(rng.randint(4))
        g.brick_map[g.ball_y, g.ball_x] = 0


def perturb_asterix(g: Any, rng: np.random.RandomState, episode: int) -> None:
    """Odd episodes start deep in the difficulty ramp, some with every lane taken."""
    if episode % 2:
        g.spawn_speed = int(rng.randint(1, 5))
        g.move_speed = int(rng.randint(1, 4))
        g.spawn_timer = int(rng.randint(0, g.spawn_speed + 1))
        g.move_timer = int(rng.randint(0, g.move_speed + 1))
        g.ramp_index = int(rng.randint(0, 12))
        g.ramp_timer = int(rng.randint(-1, 20))
        for i in range(8):
            x = int(rng.choice([0, 1, 8, 9]))  # away from the player's start (5, 5)
            if rng.rand() < 0.8:
                g.entities[i] = [x, i + 1, x < 5, bool(rng.rand() < 1 / 3)]


def perturb_freeway(g: Any, rng: np.random.RandomState, episode: int) -> None:
    """After the first full episode, start near the end of the game clock."""
    if episode > 0:
        g.terminate_timer = int(rng.randint(0, 400))
        g.pos = int(rng.randint(1, 10))
        g.move_timer = int(rng.randint(0, 4))


def perturb_space_invaders(g: Any, rng: np.random.RandomState, episode: int) -> None:
    """Odd episodes start with a few aliens left, lower down and on a faster wave."""
    if episode % 2:
        keep = g.alien_map * (rng.rand(10, 10) < 0.15)
        keep[0, 2] = 1  # never empty: MinAtar's alien shot needs an alien
        g.alien_map = np.roll(keep, int(rng.randint(0, 5)), axis=0)
        g.enemy_move_interval = int(rng.randint(6, 13))
        g.alien_move_timer = int(rng.randint(0, g.enemy_move_interval + 1))
        g.alien_dir = int(rng.choice([-1, 1]))


@dataclasses.dataclass(frozen=True)
class Game:
    env: MinAtarEnvironment
    ref_name: str
    to_state: Callable[..., Any]
    to_draws: Callable[[list], Any]
    policy: Callable[[Any, np.random.RandomState], int]
    perturb: Callable[[Any, np.random.RandomState, int], None]
    num_steps: int
    coverage: Callable[[Any, Any, dict], dict[str, int]]


def _coverage_breakout(pre: Any, post: Any, rec: dict) -> dict[str, int]:
    bricks = lambda s: s.brick_map.sum(axis=(1, 2))
    return {
        "terminations (ball missed)": int(rec["terminated"].sum()),  # Breakout's only end
        "bricks broken": int(rec["reward"].sum()),
        "wall refills": int((bricks(post) > bricks(pre)).sum()),
        "ball passes into a brick": int((pre.strike & post.strike).sum()),
        "side-wall bounces": int(((pre.ball_x == 0) | (pre.ball_x == 9)).sum()),
    }


def _coverage_asterix(pre: Any, post: Any, rec: dict) -> dict[str, int]:
    full = (pre.entities[:, :, 4] == 1).all(axis=1)
    # MinAtar ends the game at two places: the player steps onto an enemy (checked before
    # the entities move), or an enemy moves onto the player.
    x, y, gold, alive = (pre.entities[:, :, i] for i in (0, 1, 3, 4))
    on_enemy = (x == post.player_x[:, None]) & (y == post.player_y[:, None]) & (alive == 1)
    stepped_on = (on_enemy & (gold == 0)).any(axis=1) & rec["terminated"]
    return {
        "terminations: player steps onto an enemy": int(stepped_on.sum()),
        "terminations: an enemy moves onto the player": int(
            (rec["terminated"] & ~stepped_on).sum()
        ),
        "gold collected": int(rec["reward"].sum()),
        "spawns": int(rec["random_event"].sum()),
        "spawn timer up with all lanes full": int((full & (pre.spawn_timer == 0)).sum()),
        "ramps": int((post.ramp_index > pre.ramp_index).sum()),
        "move-speed increases": int((post.move_speed < pre.move_speed).sum()),
    }


def _coverage_freeway(pre: Any, post: Any, rec: dict) -> dict[str, int]:
    hit = (post.pos == 9) & (pre.pos < 8) & (rec["reward"] == 0)
    return {
        "terminations (time limit)": int(rec["terminated"].sum()),
        "crossings": int(rec["reward"].sum()),
        "speed re-draws": int(rec["random_event"].sum()),
        "car hits": int(hit.sum()),
    }


def _coverage_space_invaders(pre: Any, post: Any, rec: dict) -> dict[str, int]:
    # MinAtar ends the game when an alien bullet reaches the player's cell, or when the
    # aliens reach the bottom row (onto the player, or shifting down from row 9).
    steps = np.arange(len(post.pos))
    shot = post.e_bullet_map[steps, 9, post.pos] & rec["terminated"]
    return {
        "terminations: shot by an alien": int(shot.sum()),
        "terminations: aliens reach the bottom": int((rec["terminated"] & ~shot).sum()),
        "aliens shot": int(rec["reward"].sum()),
        "waves cleared": int(
            ((post.alien_map.sum(axis=(1, 2)) == 24) & (pre.alien_map.sum(axis=(1, 2)) < 24)).sum()
        ),
        "ramps": int((post.enemy_move_interval < pre.enemy_move_interval).sum()),
        "turns": int((post.alien_dir != pre.alien_dir).sum()),
    }


GAMES = {
    "breakout": Game(
        Breakout(), "breakout", breakout_state, no_draws, breakout_policy,
        perturb_breakout, 2000, _coverage_breakout,
    ),
    "asterix": Game(
        Asterix(), "asterix", asterix_state, asterix_draws, uniform_policy(5),
        perturb_asterix, 2000, _coverage_asterix,
    ),
    "freeway": Game(
        Freeway(), "freeway", freeway_state, freeway_draws, freeway_policy,
        perturb_freeway, 4000, _coverage_freeway,
    ),
    "space_invaders": Game(
        SpaceInvaders(), "space_invaders", space_invaders_state, no_draws,
        space_invaders_policy, perturb_space_invaders, 2000, _coverage_space_invaders,
    ),
}  # fmt: skip


# ------------------------------------------------------------- recording the reference
def _stack(trees: list) -> Any:
    return jax.tree.map(lambda *xs: np.stack(xs), *trees)


def record_reference(game: Game, seed: int, ramping: bool = True) -> dict[str, Any]:
    """Plays the reference game (sticky actions off) and logs everything per step."""
    ref = RefEnvironment(game.ref_name, sticky_action_prob=0.0, difficulty_ramping=ramping)
    ref.seed(seed)
    recorder = RecordingRandom(ref.env.random)
    ref.env.random = recorder
    rng = np.random.RandomState(seed + 1)
    full_actions = [FULL_ACTIONS.index(a) for a in game.env.minimal_actions]
    params = game.env.default_params
    draws_shape = jax.eval_shape(
        lambda k: game.env.sample_draws(k, game.env.reset(k, params)[1], params),
        jax.random.PRNGKey(0),
    )
    zero_draws = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), draws_shape)

    rows: dict[str, list] = {k: [] for k in (
        "pre", "post", "action", "draws", "random_event", "episode_start",
        "frame", "reward", "terminated",
    )}  # fmt: skip
    episode, time, start = 0, 0, True
    ref.reset()
    game.perturb(ref.env, rng, episode)
    for _ in range(game.num_steps):
        action = game.policy(ref.env, rng)
        rows["pre"].append(game.to_state(ref.env, time))
        recorder.calls.clear()
        reward, terminated = ref.act(full_actions[action])
        event = bool(recorder.calls)
        rows["draws"].append(game.to_draws(recorder.calls) if event else zero_draws)
        rows["random_event"].append(event)
        rows["action"].append(I32(action))
        rows["episode_start"].append(start)
        rows["frame"].append(ref.state())
        rows["reward"].append(np.float32(reward))
        rows["terminated"].append(bool(terminated))
        rows["post"].append(game.to_state(ref.env, time + 1, action))
        time, start = time + 1, False
        if terminated:
            episode, time, start = episode + 1, 0, True
            ref.reset()
            game.perturb(ref.env, rng, episode)
    rec = {k: _stack(v) if k in ("pre", "post", "draws") else np.stack(v) for k, v in rows.items()}
    rec["episodes"] = episode
    return rec


@functools.partial(jax.jit, static_argnums=0)
def replay(env: MinAtarEnvironment, params: Any, rec: dict, key: jax.Array) -> Any:
    """Runs our env over the reference's actions and draws, synced only at episode starts."""

    def body(state, x):
        start, is_start, action, injected, event, k = x
        state = jax.tree.map(lambda a, b: jnp.where(is_start, a, b), start, state)
        sampled = env.sample_draws(k, state, params)
        draws = jax.tree.map(lambda a, b: jnp.where(event, a, b), injected, sampled)
        obs, state, reward, terminated, _ = env.step_with_draws(state, action, draws, params)
        return state, (obs, state, reward, terminated)

    steps = rec["action"].shape[0]
    xs = (rec["pre"], rec["episode_start"], rec["action"], rec["draws"], rec["random_event"],
          jax.random.split(key, steps))  # fmt: skip
    init = jax.tree.map(lambda x: x[0], rec["pre"])
    return jax.lax.scan(body, init, xs)[1]


def _first_mismatch(ours: Any, rec: dict, obs, reward, terminated) -> tuple[np.ndarray, str]:
    """Per-step equality of everything, and a description of the first difference."""
    checks = {
        "frame": (np.asarray(obs) == rec["frame"]).reshape(len(reward), -1).all(axis=1),
        "reward": np.asarray(reward) == rec["reward"],
        "terminated": np.asarray(terminated) == rec["terminated"],
    }
    for field in dataclasses.fields(rec["post"]):
        a = np.asarray(getattr(ours, field.name))
        b = getattr(rec["post"], field.name)
        checks[f"state.{field.name}"] = (a == b).reshape(len(reward), -1).all(axis=1)
    ok = np.all(np.stack(list(checks.values())), axis=0)
    if ok.all():
        return ok, ""
    t = int(np.argmin(ok))
    bad = [name for name, c in checks.items() if not c[t]]
    return ok, f"first mismatch at step {t} (episode start {rec['episode_start'][t]}): {bad}"


RAMP_EVENTS = ("ramps", "move-speed increases")


@pytest.mark.parametrize(
    ("name", "ramping"),
    [(name, True) for name in GAMES] + [("asterix", False), ("space_invaders", False)],
)
def test_free_running_parity_with_reference(name: str, ramping: bool) -> None:
    game = GAMES[name]
    rec = record_reference(game, seed=7 if ramping else 8, ramping=ramping)
    params = game.env.default_params.replace(sticky_action_prob=0.0)
    if hasattr(params, "ramping"):  # Breakout and Freeway have no ramp (MinAtar ignores it)
        params = params.replace(ramping=ramping)
    inputs = {k: rec[k] for k in ("pre", "episode_start", "action", "draws", "random_event")}
    obs, ours, reward, terminated = replay(game.env, params, inputs, jax.random.PRNGKey(3))
    ok, message = _first_mismatch(ours, rec, obs, reward, terminated)
    coverage = game.coverage(rec["pre"], rec["post"], rec)
    print(
        f"\n{name} (ramping={ramping}): {ok.sum()}/{ok.size} steps fully compared and equal "
        f"({rec['episodes']} episodes, {int(rec['random_event'].sum())} with random events "
        f"replayed); coverage {coverage}"
    )
    assert ok.all(), message
    assert rec["terminated"].sum() >= 1
    if not ramping:
        assert all(coverage.pop(event, 0) == 0 for event in RAMP_EVENTS), coverage
    missing = [event for event, count in coverage.items() if count == 0]
    assert not missing, f"{name}: the trajectory never reached {missing}"


# --------------------------------------------------------------- sticky actions and frames
@functools.partial(jax.jit, static_argnums=0)
def _sticky_batch(env: MinAtarEnvironment, params: Any, keys: jax.Array) -> Any:
    """One step from reset with previous action 1, choosing action 0, for many keys."""
    _, state = env.reset(jax.random.PRNGKey(0), params)
    state = state.replace(last_action=jnp.int32(1))
    return jax.vmap(lambda k: env.step_env(k, state, jnp.int32(0), params))(keys)


@pytest.mark.parametrize("name", list(GAMES))
def test_sticky_actions_repeat_previous_action(name: str) -> None:
    env = GAMES[name].env
    num = 10_000
    keys = jax.random.split(jax.random.PRNGKey(11), num)
    for prob in (0.0, 0.25, 1.0):
        params = env.default_params.replace(sticky_action_prob=prob)
        obs, state, *_ = _sticky_batch(env, params, keys)
        repeated = np.asarray(state.last_action) == 1
        # 10000 Bernoulli(0.25) trials: standard error 0.0043.
        assert abs(repeated.mean() - prob) < 0.02, (prob, repeated.mean())
        assert obs.dtype == jnp.bool_ and obs.shape == (num, 10, 10, env.num_channels)
        if name == "breakout":  # the repeated action is the one executed: paddle 4 -> 3
            assert np.array_equal(np.asarray(state.pos) == 3, repeated)


@pytest.mark.parametrize("name", list(GAMES))
def test_frames_are_boolean_with_minatar_shape(name: str) -> None:
    env, params = envs.make(GAMES[name].env.name)
    ref = RefEnvironment(name, sticky_action_prob=0.0)
    assert list(env.observation_space(params).shape) == ref.state_shape()
    assert env.action_space(params).n == len(ref.minimal_action_set())
    obs, _ = jax.jit(env.reset)(jax.random.PRNGKey(0), params)
    assert obs.dtype == jnp.bool_ and obs.shape == (10, 10, ref.state_shape()[2])
    assert bool(env.observation_space(params).contains(obs))
    if name in ("asterix", "space_invaders"):  # deterministic start: the same frame
        ref.reset()
        assert np.array_equal(np.asarray(obs), ref.state())


def test_terminal_state_absorbs_like_minatar_act() -> None:
    env = Breakout()
    params = env.default_params.replace(sticky_action_prob=0.0)

    @jax.jit
    def run(key):
        _, state = env.reset(key, params)
        state = state.replace(terminal=jnp.bool_(True))
        return state, env.step_env(key, state, jnp.int32(1), params)

    state, (_, nxt, reward, terminated, _) = run(jax.random.PRNGKey(0))
    assert float(reward) == 0.0 and bool(terminated)
    assert int(nxt.pos) == int(state.pos) and int(nxt.ball_y) == int(state.ball_y)


def test_state_fields_match_gymnax() -> None:
    gymnax_minatar = pytest.importorskip("gymnax.environments.minatar")
    pairs = [
        (gymnax_minatar.breakout.EnvState, BreakoutState),
        (gymnax_minatar.asterix.EnvState, AsterixState),
        (gymnax_minatar.freeway.EnvState, FreewayState),
        (gymnax_minatar.space_invaders.EnvState, SpaceInvadersState),
    ]
    for theirs, ours in pairs:
        missing = {f.name for f in dataclasses.fields(theirs)} - {
            f.name for f in dataclasses.fields(ours)
        }
        assert missing <= {"ramping"}, (ours.__name__, missing)  # ramping is a param here


def test_params_validate_sticky_probability() -> None:
    with pytest.raises(ValueError, match="sticky_action_prob"):
        envs.make("Breakout-MinAtar", sticky_action_prob=1.5)
    _, params = envs.make("Asterix-MinAtar", ramping=False)
    assert params.ramping is False and params.max_steps_in_episode == 10_000


# ------------------------------------------------------------------ random draw samplers
def test_asterix_spawn_draws_distribution() -> None:
    env = Asterix()
    _, state = jax.jit(env.reset)(jax.random.PRNGKey(0), env.default_params)
    alive = jnp.zeros((8, 5), jnp.int32).at[jnp.array([0, 2, 3, 5, 6]), 4].set(1)
    state = state.replace(entities=alive)  # lanes 1, 4, 7 free
    keys = jax.random.split(jax.random.PRNGKey(5), 30_000)
    draws = jax.jit(jax.vmap(lambda k: asterix_mod.sample_draws(k, state)))(keys)
    assert abs(np.mean(draws.left_to_right) - 0.5) < 0.015
    assert abs(np.mean(draws.gold) - 1 / 3) < 0.015
    counts = np.bincount(np.asarray(draws.slot_rank), minlength=3)
    assert counts.size == 3 and np.all(np.abs(counts / counts.sum() - 1 / 3) < 0.015)


def test_freeway_speed_draws_distribution() -> None:
    speeds = np.asarray(
        jax.jit(jax.vmap(freeway_mod.sample_speeds))(jax.random.split(jax.random.PRNGKey(6), 5000))
    ).ravel()
    magnitudes = np.bincount(np.abs(speeds), minlength=6)
    assert magnitudes[0] == 0 and np.all(np.abs(magnitudes[1:] / speeds.size - 0.2) < 0.01)
    assert abs((speeds > 0).mean() - 0.5) < 0.01


# ------------------------------------------------------- random-policy returns vs reference
def reference_random_returns(name: str, episodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths of a uniformly random minimal-set policy, default settings."""
    ref = RefEnvironment(name)  # sticky_action_prob=0.1, ramping on
    ref.seed(seed)
    actions = ref.minimal_action_set()
    rng = np.random.RandomState(seed + 1)
    returns, lengths = [], []
    for _ in range(episodes):
        ref.reset()
        total, steps, done = 0.0, 0, False
        while not done:
            reward, done = ref.act(actions[rng.randint(len(actions))])
            total, steps = total + reward, steps + 1
        returns.append(total)
        lengths.append(steps)
    return np.array(returns), np.array(lengths)


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def our_random_returns(
    env: MinAtarEnvironment, key: jax.Array, num_envs: int, max_steps: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """First-episode return and length of a uniformly random policy in `num_envs` copies.

    Steps all copies until every first episode ended (or `max_steps`).
    """
    params = env.default_params
    k_reset, k_run = jax.random.split(key)
    _, states = jax.vmap(env.reset, (0, None))(jax.random.split(k_reset, num_envs), params)
    step = jax.vmap(env.step, (0, 0, 0, None))
    zeros = jnp.zeros((num_envs,))

    def body(carry):
        t, states, total, length, done = carry
        k_act, k_step = jax.random.split(jax.random.fold_in(k_run, t))
        actions = jax.random.randint(k_act, (num_envs,), 0, env.num_actions)
        keys = jax.random.split(k_step, num_envs)
        _, states, reward, terminated, truncated, _ = step(keys, states, actions, params)
        total = total + jnp.where(done, 0.0, reward)
        length = length + jnp.where(done, 0, 1)
        return t + 1, states, total, length, done | terminated | truncated

    def cond(carry):
        return (carry[0] < max_steps) & ~jnp.all(carry[-1])

    carry = (jnp.int32(0), states, zeros, zeros, zeros.astype(bool))
    _, _, total, length, done = jax.lax.while_loop(cond, body, carry)
    return total, length, done


@pytest.mark.parametrize(
    ("name", "ref_episodes", "max_steps"),
    [("breakout", 400, 1000), ("asterix", 300, 3000), ("freeway", 24, 3000),
     ("space_invaders", 200, 3000)],
)  # fmt: skip
def test_random_policy_return_matches_reference(name: str, ref_episodes: int, max_steps: int):
    env = GAMES[name].env
    num_envs = 256 if name != "freeway" else 64
    ref_ret, ref_len = reference_random_returns(name, ref_episodes, seed=0)
    ret, length, done = (np.asarray(x) for x in our_random_returns(
        env, jax.random.PRNGKey(0), num_envs, max_steps))  # fmt: skip
    assert done.all(), "every first episode must finish within max_steps"
    for ours, theirs, what in ((ret, ref_ret, "return"), (length, ref_len, "length")):
        se = np.sqrt(ours.var() / ours.size + theirs.var() / theirs.size)
        gap = abs(ours.mean() - theirs.mean())
        print(f"\n{name} {what}: ours {ours.mean():.3f} ref {theirs.mean():.3f} (se {se:.3f})")
        assert gap <= 4 * se + 1e-6, (name, what, ours.mean(), theirs.mean(), se)
