"""The JAX environment suites' adapters (envs/adapters/: Craftax, Jumanji, XLand-MiniGrid,
pgx, MuJoCo Playground).

Only where a suite is installed (`-m optional`, the venv of .ci/optional_venv.sh;
without the suites, tests/envs/test_suite_errors.py): each adapter passes the
conformance checks the built-in environments pass (tests/envs/test_api_conformance.py,
on fewer seeds: a suite's step compiles slowly), reproduces the suite's own trajectories
where the suite has an auto-resetting form to compare with (Craftax), reports endings
as ours, and a full PPO update on it jits into one program with no host callback.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_api_conformance as conformance
from test_suite_errors import SUITES

import jaxrl
from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import ppo
from jaxrl.envs import registry, spaces
from jaxrl.envs import wrappers as W

if not registry.installed_suites():
    pytest.skip(
        "no environment suite installed (CI's optional venv: .ci/optional_venv.sh)",
        allow_module_level=True,
    )
pytestmark = pytest.mark.optional

# The ids the conformance checks run on, and the package each needs.
CONFORMANCE_IDS = [
    pytest.param(("craftax:Craftax-Classic-Symbolic-v1", "craftax"), id="craftax-classic-symbolic"),
    pytest.param(("craftax:Craftax-Classic-Pixels-v1", "craftax"), id="craftax-classic-pixels"),
    pytest.param(("jumanji:Snake-v1", "jumanji"), id="jumanji-snake"),
    # A MultiDiscrete action (face, depth, direction) as one Discrete.
    pytest.param(("jumanji:RubiksCube-partly-scrambled-v0", "jumanji"), id="jumanji-rubiks"),
    pytest.param(("xminigrid:MiniGrid-Empty-8x8", "xminigrid"), id="xminigrid-empty"),
    pytest.param(("xminigrid:XLand-MiniGrid-R1-9x9", "xminigrid"), id="xminigrid-xland"),
    pytest.param(("pgx:tic_tac_toe", "pgx"), id="pgx-tic-tac-toe"),
    pytest.param(("pgx:connect_four", "pgx"), id="pgx-connect-four"),
    pytest.param(("playground:CartpoleBalance", "mujoco_playground"), id="playground-cartpole"),
]
SEEDS = [0, 1, 2]


# ----------------------------------------------------------------------------- conformance


@pytest.fixture(scope="module", params=CONFORMANCE_IDS)
def harness(request: pytest.FixtureRequest) -> conformance.Harness:
    env_id, package = request.param
    pytest.importorskip(package)
    return conformance.Harness(env_id)


@pytest.mark.parametrize("seed", SEEDS)
def test_suite_rollout_satisfies_contract(harness, seed):
    conformance.check_rollout_satisfies_contract(harness, seed)


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_suite_same_key_gives_same_result(harness, seed):
    conformance.check_same_key_gives_same_result(harness, seed)


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_suite_vmap_matches_unbatched(harness, seed):
    conformance.check_vmap_matches_unbatched(harness, seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_suite_truncation_exactly_at_time_limit(harness, seed):
    conformance.test_truncation_exactly_at_time_limit(harness, seed)


def test_suite_action_space_sample_is_valid(harness):
    conformance.test_action_space_sample_is_valid_and_covers_space(harness)


def test_suite_name_is_the_prefixed_id(harness):
    assert harness.env.name == harness.env_id


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_unknown_id_lists_the_suites_ids(suite):
    module, known_id = SUITES[suite]
    pytest.importorskip(module)
    with pytest.raises(ValueError, match=rf"Unknown .* 'NoSuchEnv-v9'; .* has: .*{known_id}"):
        envs.make(f"{suite}:NoSuchEnv-v9")


def test_discrete_craftax_refuses_sac_before_compiling():
    pytest.importorskip("craftax")
    env_id = "craftax:Craftax-Classic-Symbolic-v1"
    config = jaxrl.make_config("sac", env_id)
    with pytest.raises(cfg.ConfigError, match=r"sac needs a 1-D Box .*use dqn, c51"):
        jaxrl.algorithms.get("sac").make(config)


def test_structured_jumanji_observation_refuses_ppo_and_flattens():
    pytest.importorskip("jumanji")
    env, params = envs.make("jumanji:Snake-v1")
    assert isinstance(env.observation_space(params), spaces.Dict)
    config = jaxrl.make_config("ppo", "jumanji:Snake-v1", num_envs=2, num_steps=4)
    with pytest.raises(cfg.ConfigError, match="FlattenObservation"):
        ppo.make(config)
    flat = W.FlattenObservation(env)
    assert isinstance(flat.observation_space(params), spaces.Box)


# ----------------------------------------------------------------------------- semantics


def _rollout(step, reset, key, actions):
    """Reset, then `actions` through `step`; returns every step's outputs."""
    k_reset, k_steps = jax.random.split(key)
    obs, state = reset(k_reset)

    def body(state, xs):
        key, action = xs
        obs, state, reward, done, *rest = step(key, state, action)
        return state, (obs, reward, done, *rest)

    keys = jax.random.split(k_steps, actions.shape[0])
    return jax.lax.scan(body, state, (keys, actions))[1]


def test_craftax_reproduces_craftax_auto_reset_env():
    """Same keys and actions: our trajectory equals Craftax's auto-resetting env, with
    `terminated | truncated` equal to its `done`, when both have the same time limit."""
    pytest.importorskip("craftax")
    from craftax.craftax_env import make_craftax_env_from_name

    limit, steps = 12, 40
    ours, params = envs.make("craftax:Craftax-Classic-Symbolic-v1", max_steps_in_episode=limit)
    theirs = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)
    their_params = theirs.default_params.replace(max_timesteps=limit)
    actions = jax.random.randint(jax.random.key(1), (steps,), 0, 17)
    key = jax.random.key(7)
    a = jax.jit(
        lambda k: _rollout(
            lambda k, s, a: ours.step(k, s, a, params), lambda k: ours.reset(k, params), k, actions
        )
    )(key)
    b = jax.jit(
        lambda k: _rollout(
            lambda k, s, a: theirs.step(k, s, a, their_params),
            lambda k: theirs.reset(k, their_params),
            k,
            actions,
        )
    )(key)
    obs, reward, terminated, truncated, _ = a
    their_obs, their_reward, their_done, _ = b
    # Same computation in two programs: XLA may round a float differently (last bit).
    np.testing.assert_allclose(np.asarray(obs), np.asarray(their_obs), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(reward), np.asarray(their_reward))
    np.testing.assert_array_equal(np.asarray(terminated | truncated), np.asarray(their_done))
    assert np.asarray(truncated).sum() == steps // limit  # its time limit is our truncation


def test_craftax_time_limit_defaults_to_craftax_and_death_terminates():
    pytest.importorskip("craftax")
    env, params = envs.make("craftax:Craftax-Classic-Symbolic-v1")
    from craftax.craftax_classic.envs.craftax_state import EnvParams

    assert params.max_steps_in_episode == EnvParams().max_timesteps
    assert params.inner.max_timesteps >= 2**30  # Craftax's own limit is out of reach
    _, state = jax.jit(env.reset)(jax.random.key(0), params)
    health = state.inner.player_health
    dying = state.replace(inner=state.inner.replace(player_health=jnp.zeros_like(health)))
    step = jax.jit(env.step)
    _, after, _, terminated, truncated, _ = step(jax.random.key(1), dying, jnp.int32(0), params)
    assert bool(terminated) and not bool(truncated) and int(after.time) == 0
    with pytest.raises(ValueError, match=r"unknown override.*allowed: .*max_steps_in_episode"):
        envs.make("craftax:Craftax-Classic-Symbolic-v1", max_timesteps=5)


def test_jumanji_multi_discrete_action_is_one_discrete_unravelled():
    pytest.importorskip("jumanji")
    env, params = envs.make("jumanji:Minesweeper-v0")
    spec = env.jumanji_env.action_spec
    radices = [int(n) for n in np.asarray(spec.num_values).reshape(-1)]
    space = env.action_space(params)
    assert isinstance(space, spaces.Discrete) and space.n == int(np.prod(radices))
    last = space.n - 1  # the last combination: every sub-action at its largest value
    np.testing.assert_array_equal(
        np.asarray(env._to_jumanji_action(jnp.asarray(last))), [n - 1 for n in radices]
    )
    np.testing.assert_array_equal(np.asarray(env._to_jumanji_action(jnp.asarray(1))), [0, 1])


def test_pgx_random_opponent_and_agent_reward():
    """The agent is player 0: after reset and after every step it is player 0's turn
    (or the game is over), and the reward is player 0's."""
    pytest.importorskip("pgx")
    env, params = envs.make("pgx:tic_tac_toe")
    steps = 30
    keys = jax.random.split(jax.random.key(3), steps)

    def run(key):
        _, state = env.reset(key, params)

        def body(state, key):
            k_act, k_step = jax.random.split(key)
            legal = state.inner.legal_action_mask
            action = jnp.argmax(jnp.where(legal, jax.random.uniform(k_act, legal.shape), -1.0))
            _, state, reward, terminated, truncated, info = env.step(k_step, state, action, params)
            to_move = state.inner.current_player
            return state, (reward, terminated, truncated, to_move)

        return jax.lax.scan(body, state, keys)[1]

    reward, terminated, truncated, to_move = jax.jit(run)(jax.random.key(0))
    reward, terminated = np.asarray(reward), np.asarray(terminated)
    assert (np.asarray(to_move) == 0).all()  # after auto-reset too: the opponent opened
    assert terminated.sum() >= 3 and not np.asarray(truncated).any()
    assert set(np.unique(reward[terminated])) <= {-1.0, 0.0, 1.0}
    assert (reward[~terminated] == 0).all()


def test_playground_restarts_from_the_copys_first_state_unless_full_reset():
    """As Playground's training wrapper: an ended episode restarts from the physics data
    and observation its copy's reset drew; `full_reset=True` draws a fresh start."""
    pytest.importorskip("mujoco_playground")
    limit, action = 3, jnp.zeros((1,), jnp.float32)

    def run(env, params):
        def episode(key):
            obs, state = env.reset(key, params)

            def body(state, k):
                out = env.step(k, state, action, params)
                return out[1], (out[0], out[4])

            state, (obs_seq, truncated) = jax.lax.scan(
                body, state, jax.random.split(jax.random.key(1), limit)
            )
            return obs, state, obs_seq, truncated

        return jax.jit(episode)(jax.random.key(0))

    cached, params = envs.make("playground:CartpoleBalance", max_steps_in_episode=limit)
    obs, state, obs_seq, truncated = run(cached, params)
    assert np.asarray(truncated).tolist() == [False, False, True] and int(state.time) == 0
    np.testing.assert_array_equal(obs_seq[-1], obs)  # the first observation again
    np.testing.assert_array_equal(state.brax_state.data.qpos, state.first_data.qpos)
    assert not np.array_equal(np.asarray(obs_seq[-2]), np.asarray(obs))  # it had moved
    fresh, params = envs.make(
        "playground:CartpoleBalance", max_steps_in_episode=limit, full_reset=True
    )
    obs, state, obs_seq, truncated = run(fresh, params)
    assert bool(truncated[-1]) and not np.array_equal(np.asarray(obs_seq[-1]), np.asarray(obs))
    with pytest.raises(ValueError, match="full_reset must be True or False"):
        envs.make("playground:CartpoleBalance", full_reset="yes")


# ----------------------------------------------------------------------------- training


PPO_IDS = [
    pytest.param("craftax:Craftax-Classic-Symbolic-v1", "craftax", True, id="craftax-rnn"),
    pytest.param("jumanji:Game2048-v1", "jumanji", False, id="jumanji-2048"),
    pytest.param("xminigrid:MiniGrid-Empty-8x8", "xminigrid", True, id="xminigrid-rnn"),
    pytest.param("pgx:connect_four", "pgx", False, id="pgx-connect-four"),
    pytest.param("playground:CartpoleBalance", "mujoco_playground", False, id="playground"),
]


@pytest.mark.parametrize(("env_id", "package", "recurrent"), PPO_IDS)
def test_ppo_update_on_a_suite_is_one_compiled_program(env_id, package, recurrent):
    pytest.importorskip(package)
    env, params = envs.make(env_id)
    if isinstance(env.observation_space(params), spaces.Dict):
        env = W.FlattenObservation(env)
    config = jaxrl.make_config(
        "ppo",
        env_id,
        num_envs=2,
        num_steps=8,
        num_minibatches=1,
        update_epochs=1,
        hidden_sizes=(16,),
        recurrent=recurrent,
        rnn_hidden_size=16,
        # Craftax's preset shares a fresh world among 16 copies: one here, for 2 copies.
        **({"reset_ratio": 2} if package == "craftax" else {}),
    )
    algo = ppo.PPO(config, env, params)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    compiled = jax.jit(algo.update).lower(state).compile()
    text = compiled.as_text()
    assert "callback" not in text.lower()  # nothing goes back to the host mid-step
    new_state, metrics = compiled(state)
    assert np.isfinite(float(metrics["loss"]))
    assert int(new_state.update_step) == 1


# ----------------------------------------------------------------------------- jaxrl envs


def test_jaxrl_envs_lists_installed_suites_and_steps_one(monkeypatch, capsys):
    from jaxrl import cli

    monkeypatch.setattr(
        envs, "registered", lambda multi_agent=False: [] if multi_agent else ["CartPole-v1"]
    )
    assert cli.main(["envs", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    for suite in registry.installed_suites():
        assert f"{suite} (installed; step them with `jaxrl envs --suite {suite}`)" in out
        assert registry.suite_ids(suite)[0] in out
    pytest.importorskip("pgx")
    all_ids = registry.suite_ids
    monkeypatch.setattr(registry, "suite_ids", lambda suite: all_ids(suite)[-1:])
    assert cli.main(["envs", "--suite", "pgx", "--steps", "5"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.startswith("pgx:tic_tac_toe") and "Discrete(9)" in row and "FAILED" not in row
