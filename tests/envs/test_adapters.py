"""Adapters (envs/adapters/): gymnax in, gymnasium out, Brax and Stable-Baselines3 (optional).

The gymnax adapter must reproduce gymnax's own trajectories under the same
keys; the gymnasium export must pass gymnasium's `check_env` and lay out its
vector infos exactly as gymnasium's `SyncVectorEnv` in SAME_STEP mode.
Brax and SB3 tests run only where those packages are installed
(`pytest -m optional`); CI runs them in a second venv built by
.ci/optional_venv.sh (torch CPU, stable-baselines3, transformers, brax).
"""

from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.envs import spaces
from jaxrl.envs import wrappers as W

gymnax = pytest.importorskip("gymnax")
gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from jaxrl.envs.adapters import gymnasium as gym_adapter  # noqa: E402
from jaxrl.envs.adapters import gymnax as gymnax_adapter  # noqa: E402

KEY = jax.random.key(42)


# ----------------------------------------------------------------------------- gymnax


def random_rollout(env, params, key, steps, sample_space):
    """Scan of random actions (drawn from `sample_space`) returning every step output."""

    def run(key):
        key_reset, key = jax.random.split(key)
        obs, state = env.reset(key_reset, params)

        def body(carry, k):
            obs, state = carry
            k_act, k_step = jax.random.split(k)
            action = sample_space.sample(k_act)
            obs, state, reward, term, trunc, info = env.step(k_step, state, action, params)
            out = (obs, reward, term, trunc, info["final_observation"])
            return (obs, state), out

        return jax.lax.scan(body, (obs, state), jax.random.split(key, steps))[1]

    return jax.jit(run)(key)


@pytest.mark.parametrize(
    "env_id, steps", [("CartPole-v1", 300), ("Pendulum-v1", 250), ("Breakout-MinAtar", 300)]
)
def test_gymnax_adapter_reproduces_gymnax_trajectories(env_id, steps):
    ours, params = envs.make(f"gymnax:{env_id}")
    theirs, their_params = gymnax.make(env_id)
    space = ours.action_space(params)
    a = random_rollout(ours, params, KEY, steps, space)
    b = random_rollout(theirs, their_params, KEY, steps, space)
    names = ["obs", "reward", "terminated", "truncated", "final_observation"]
    for name, x, y in zip(names, a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
    assert np.asarray(a[2] | a[3]).any(), "the rollout should cross an episode boundary"
    assert bool(jnp.all(jax.vmap(ours.observation_space(params).contains)(a[0])))


def test_gymnax_adapter_spaces_overrides_and_errors():
    env, params = envs.make("gymnax:Breakout-MinAtar", max_steps_in_episode=7)
    assert params.max_steps_in_episode == 7
    assert env.name == "gymnax:Breakout-MinAtar"
    assert isinstance(env.action_space(params), spaces.Discrete) and env.num_actions == 3
    obs_space = env.observation_space(params)
    assert isinstance(obs_space, spaces.Box) and obs_space.shape == (10, 10, 4)
    full, _ = envs.make("gymnax:Breakout-MinAtar", use_minimal_action_set=False)
    assert full.num_actions == 6
    pend, pend_params = envs.make("gymnax:Pendulum-v1")
    box = pend.action_space(pend_params)
    assert isinstance(box, spaces.Box) and box.shape == (1,) and float(box.high[0]) == 2.0
    with pytest.raises(ValueError, match="Unknown gymnax environment"):
        envs.make("gymnax:NoSuchEnv-v0")
    with pytest.raises(ValueError, match="unknown override"):
        envs.make("gymnax:CartPole-v1", not_a_field=1)


def test_gymnax_adapter_time_limit_truncates():
    env, params = envs.make("gymnax:CartPole-v1", max_steps_in_episode=5)
    actions = spaces.Discrete(2)  # random actions keep CartPole up for 5 steps
    _, _, terminated, truncated, _ = random_rollout(env, params, KEY, 10, actions)
    assert not np.asarray(terminated).any()
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(truncated)), [4, 9])


def test_gymnax_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnax", None)  # makes `import gymnax` fail
    with pytest.raises(ImportError, match=r"jaxrl\[test\]"):
        gymnax_adapter.make("CartPole-v1")


def test_brax_missing_is_a_clear_import_error(monkeypatch):
    from jaxrl.envs.adapters import brax as brax_adapter

    monkeypatch.setitem(sys.modules, "brax", None)
    with pytest.raises(ImportError, match="pip install brax"):
        brax_adapter.make("ant")


def test_brax_backend_in_the_id_is_checked_before_brax_is_imported(monkeypatch):
    from jaxrl.envs.adapters import brax as brax_adapter

    monkeypatch.setitem(sys.modules, "brax", None)
    with pytest.raises(ValueError, match="'fast'.*generalized, positional, spring, mjx"):
        envs.make("brax:hopper@fast")
    with pytest.raises(ImportError, match="pip install brax"):  # a valid id gets that far
        envs.make("brax:hopper@positional")
    assert brax_adapter.split_backend("hopper@spring") == ("hopper", "spring")
    assert brax_adapter.split_backend("hopper") == ("hopper", None)


# ----------------------------------------------------------------------------- gymnasium export


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"])
def test_gymnasium_export_passes_check_env(env_id):
    env = gym_adapter.to_gymnasium(env_id, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # advisory warnings (e.g. non-normalised Box actions)
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert obs in env.observation_space and info == {}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert isinstance(obs, np.ndarray) and isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert "final_observation" not in info


def test_gymnasium_export_is_seeded_and_returns_the_terminal_observation():
    def episode(seed):
        env = gym_adapter.to_gymnasium(envs.make("CartPole-v1"), seed=seed)
        obs, _ = env.reset()
        observations, done = [obs], False
        while not done:
            obs, _, terminated, truncated, _ = env.step(1)  # always push right: falls over
            observations.append(obs)
            done = terminated or truncated
        return np.array(observations), terminated

    a, terminated = episode(3)
    b, _ = episode(3)
    c, _ = episode(4)
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or not np.array_equal(a, c)
    assert terminated and 8 <= len(a) <= 40
    # The last observation is the terminal one (pole past 12 degrees), not a reset one.
    assert abs(a[-1, 2]) > 12 * 2 * np.pi / 360


def make_vector_pair(num_envs, limit):
    """Our vector env and a gymnasium SyncVectorEnv (SAME_STEP) over our single env."""
    jax_env, params = envs.make("CartPole-v1", max_steps_in_episode=limit)
    jax_env = W.LogWrapper(jax_env)  # adds info keys, to compare their masking
    ours = gym_adapter.to_gymnasium_vector((jax_env, params), num_envs, seed=0)
    reference = SyncVectorEnv(
        [lambda i=i: gym_adapter.to_gymnasium((jax_env, params), seed=i) for i in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    return ours, reference


def assert_same_info_layout(ours, theirs):
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert_same_info_layout(ours[key], value)
        elif key.startswith("_"):
            np.testing.assert_array_equal(ours[key], value, err_msg=key)
        elif key == "final_obs":
            assert ours[key].dtype == object
            for mine, ref in zip(ours[key], value, strict=True):
                assert (mine is None) == (ref is None)
        else:
            assert ours[key].shape == value.shape and ours[key].dtype == value.dtype, key


def test_vector_env_matches_sync_vector_env_same_step_layout():
    num_envs, limit = 3, 3  # a fixed action keeps CartPole up: every copy truncates at step 3
    ours, reference = make_vector_pair(num_envs, limit)
    assert ours.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert ours.observation_space == reference.observation_space
    assert ours.action_space == reference.action_space
    obs, info = ours.reset(seed=5)
    ref_obs, ref_info = reference.reset(seed=5)
    assert obs.shape == ref_obs.shape == (num_envs, 4) and info == ref_info == {}
    actions = np.array([0, 1, 0])
    for t in range(1, 2 * limit + 1):
        obs, reward, terminated, truncated, info = ours.step(actions)
        _, ref_reward, ref_term, ref_trunc, ref_info = reference.step(actions)
        np.testing.assert_array_equal(truncated, ref_trunc)
        np.testing.assert_array_equal(terminated, ref_term)
        assert reward.shape == (num_envs,) and reward.dtype == ref_reward.dtype
        assert_same_info_layout(info, ref_info)
        if t % limit == 0:
            assert truncated.all() and "final_obs" in info
            np.testing.assert_array_equal(info["final_info"]["episode_length"], [limit] * 3)
            for i in range(num_envs):  # obs already belongs to the next episode
                assert not np.array_equal(info["final_obs"][i], obs[i])
                assert np.abs(obs[i]).max() <= 0.05
        else:
            assert "final_obs" not in info


def test_vector_env_partial_reset_with_mask():
    venv = gym_adapter.to_gymnasium_vector("CartPole-v1", 4, seed=1)
    first, _ = venv.reset()
    stepped, *_ = venv.step(np.ones(4, dtype=np.int64))
    mask = np.array([True, False, True, False])
    obs, _ = venv.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(obs[~mask], stepped[~mask])
    assert not np.array_equal(obs[mask], stepped[mask])
    assert np.abs(obs[mask]).max() <= 0.05
    assert first.dtype == np.float32


def test_register_gymnasium_id():
    gym_id = gym_adapter.register_gymnasium("CartPole-v1")
    env = gymnasium.make(gym_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)
    assert gym_adapter.register_gymnasium("CartPole-v1") == gym_id  # idempotent


# ----------------------------------------------------------------------------- optional: Brax, SB3


@pytest.mark.optional
@pytest.mark.slow
def test_brax_adapter_time_limit_and_termination():
    pytest.importorskip("brax")
    env, params = envs.make("brax:inverted_pendulum", backend="positional", max_steps_in_episode=4)
    assert env.action_space(params).shape == (1,) and env.observation_space(params).shape == (4,)
    limited = W.LogWrapper(env)
    _, _, terminated, truncated, final = random_rollout(
        limited, params, KEY, 8, spaces.Box(-0.01, 0.01, (1,), jnp.float32)
    )
    assert not np.asarray(terminated).any()  # tiny actions keep the pendulum up for 4 steps
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(truncated)), [3, 7])
    assert np.isfinite(np.asarray(final)).all()


@pytest.mark.optional
def test_brax_backend_from_the_id():
    pytest.importorskip("brax")
    env, params = envs.make("brax:inverted_pendulum@spring", max_steps_in_episode=7)
    assert env.brax_env.backend == "spring" and params.max_steps_in_episode == 7
    assert env.name == "brax:inverted_pendulum@spring"
    assert envs.make("brax:inverted_pendulum")[0].brax_env.backend == "generalized"  # Brax's
    with pytest.raises(ValueError, match="given twice"):
        envs.make("brax:inverted_pendulum@spring", backend="positional")


@pytest.mark.optional
@pytest.mark.slow
def test_stable_baselines3_ppo_learns_our_cartpole():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = gym_adapter.to_gymnasium("CartPole-v1", seed=0)
    sb3_check_env(env)
    model = sb3.PPO("MlpPolicy", env, n_steps=512, batch_size=64, seed=0, device="cpu", verbose=0)
    model.learn(total_timesteps=12_288)
    mean_return, _ = evaluate_policy(model, env, n_eval_episodes=10, deterministic=True)
    assert mean_return > 100.0  # a random policy averages about 22
