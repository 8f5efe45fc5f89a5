"""Rollout pieces (jaxrl/acting.py) against hand-computed values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import acting, envs
from jaxrl.running_stats import init_stats

T, F = True, False


def test_track_episodes_and_summary_hand_computed():
    # Two environments, three steps; env 0 ends an episode on step 2, env 1 on step 3.
    rewards = jnp.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    dones = jnp.array([[F, F], [T, F], [F, T]])
    stats, finished = acting.EpisodeStats.zeros(2), []
    for reward, done in zip(rewards, dones, strict=True):
        stats, ended = acting.track_episodes(stats, reward, done)
        finished.append(ended)
    # Step 3: env 0 is one step into a new episode, env 1 has just restarted.
    np.testing.assert_array_equal(stats.episode_return, [1.0, 0.0])
    np.testing.assert_array_equal(stats.episode_length, [1, 0])
    np.testing.assert_array_equal(finished[1].episode_return, [2.0, 4.0])  # env 0 ended: 1 + 1
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *finished)
    metrics = acting.episode_metrics(stacked)
    assert int(metrics["episodes"]) == 2
    assert float(metrics["episode_return"]) == pytest.approx((2.0 + 6.0) / 2)
    assert float(metrics["episode_length"]) == pytest.approx((2 + 3) / 2)


def test_episode_summary_is_zero_without_finished_episodes():
    _, ended = acting.track_episodes(acting.EpisodeStats.zeros(3), jnp.ones(3), jnp.zeros(3, bool))
    metrics = acting.episode_metrics(ended)
    assert [float(metrics[k]) for k in ("episodes", "episode_return", "episode_length")] == [
        0,
        0,
        0,
    ]


def test_normalize_obs_updates_then_normalises():
    # Prior (0, 1, count 1) + batch {2, 4} -> mean 2, var 3 (see test_running_stats).
    stats, out = acting.normalize_obs(init_stats((1,), 1.0), jnp.array([[2.0], [4.0]]), clip=1.0)
    np.testing.assert_allclose(stats.mean, [2.0], rtol=1e-6)
    np.testing.assert_allclose(out, [[0.0], [1.0]], atol=1e-6)  # 2 / sqrt(3) = 1.15 -> clip 1
    frozen, out = acting.normalize_obs(stats, jnp.array([[5.0]]), update=False)
    assert frozen is stats
    np.testing.assert_allclose(out, [[3.0 / np.sqrt(3.0)]], rtol=1e-5)


def test_scale_reward_hand_computed():
    gamma = 0.5
    stats = init_stats((), prior_count=1.0)
    # Step 1: G = [1, 3] -> batch mean 2, var 1, count 2; with the prior (0, 1, 1):
    # mean 4/3, M2 = 1 + 2 + 2^2 * 2/3 = 17/3, var = 17/9. Reward scale 1 / sqrt(17/9).
    stats, g, scaled = acting.scale_reward(
        stats, jnp.zeros(2), jnp.array([1.0, 3.0]), jnp.array([F, F]), gamma, clip=None
    )
    np.testing.assert_allclose(stats.var, 17.0 / 9.0, rtol=1e-6)
    np.testing.assert_allclose(g, [1.0, 3.0])
    np.testing.assert_allclose(scaled, np.array([1.0, 3.0]) * 3.0 / np.sqrt(17.0), rtol=1e-5)
    # Step 2: G = 0.5 * [1, 3] + [1, 1] = [1.5, 2.5]; env 0's episode ends, its G restarts.
    # The large reward's scaled value (100 / std, about 2.5) is clipped to 1.
    _, g, scaled = acting.scale_reward(
        stats, g, jnp.array([1.0, 100.0]), jnp.array([T, F]), gamma, clip=1.0
    )
    np.testing.assert_allclose(g, [0.0, 0.5 * 3.0 + 100.0])
    assert float(scaled[1]) == 1.0 and 0.0 < float(scaled[0]) < 0.1
    # Frozen statistics: nothing is merged.
    frozen, _, _ = acting.scale_reward(
        stats, g, jnp.ones(2), jnp.array([F, F]), gamma, update=False
    )
    assert frozen is stats


def test_reset_and_step_envs_equal_vmapped_env_with_split_keys():
    env, params = envs.make("CartPole-v1")
    key, n = jax.random.key(3), 5
    obs, state = acting.reset_envs(env, params, key, n)
    ref_obs, ref_state = jax.vmap(env.reset, (0, None))(jax.random.split(key, n), params)
    np.testing.assert_array_equal(obs, ref_obs)
    action = jnp.array([0, 1, 1, 0, 1])
    out = acting.step_envs(env, params, key, state, action)
    ref = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(key, n), ref_state, action, params)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(a, b)
    assert out[0].shape == (n, 4)
