"""The shared on-policy rollout (jaxrl/rollout.py): bit-exact equality with the same steps
written as a Python loop of `jaxrl.acting` pieces, the policy's state and reset flags, the
final observations kept for the truncation bootstrap, and reward scaling over a rollout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import acting, envs, prng, rollout
from jaxrl.running_stats import init_stats

NUM_ENVS, NUM_STEPS, MAX_STEPS = 3, 12, 5


def _env():
    return envs.make("CartPole-v1", max_steps_in_episode=MAX_STEPS)


def _random_policy(count, obs, reset, key):
    """A uniform policy whose state counts its calls; keeps `reset` as an extra."""
    action = jax.random.randint(key, (obs.shape[0],), 0, 2)
    return count + 1, rollout.PolicyStep(action, extras={"reset": reset, "count": count})


def _run(policy=_random_policy, **kwargs):
    env, params = _env()
    loop = rollout.EnvLoop.reset(env, params, jax.random.key(1), NUM_ENVS)
    run = jax.jit(
        lambda loop, key: rollout.rollout(env, params, policy, loop, 0, key, NUM_STEPS, **kwargs)
    )
    return (loop, *run(loop, jax.random.key(2)))


def _loop_reference(start: rollout.EnvLoop, key: jax.Array):
    """The rollout of `_random_policy` written as a Python loop of `jaxrl.acting` pieces.

    The environment step is compiled alone and called once per step, as a loop body is
    compiled (eager CartPole physics differ in the last bit: XLA fuses multiply-adds).
    """
    env, params = _env()
    step_envs = jax.jit(lambda *a: acting.step_envs(env, params, *a))
    obs, env_state, done = start.obs, start.env_state, start.done
    episodes, steps = acting.EpisodeStats.zeros(NUM_ENVS), []
    for _ in range(NUM_STEPS):
        key, k_act, k_env = prng.split(key, 3)
        action = jax.random.randint(k_act, (NUM_ENVS,), 0, 2)
        next_obs, env_state, reward, terminated, truncated, info = step_envs(
            k_env, env_state, action
        )
        reset, done = done, jnp.logical_or(terminated, truncated)
        episodes, finished = acting.track_episodes(episodes, reward, done)
        final = info["final_observation"]
        steps.append((obs, action, reward, terminated, truncated, done, reset, final, finished))
        obs = next_obs
    return obs, done, episodes, key, jax.tree.map(lambda *xs: jnp.stack(xs), *steps)


def test_rollout_equals_the_same_steps_written_as_a_loop():
    start, loop, count, key, traj = _run(record_final=lambda count, obs: obs)
    obs, done, episodes, loop_key, steps = _loop_reference(start, jax.random.key(2))
    fields = ("obs", "action", "reward", "terminated", "truncated", "done", "reset", "final")
    for name, expected in zip(fields, steps[:-1], strict=True):
        np.testing.assert_array_equal(getattr(traj, name), expected, err_msg=name)
    for got, expected in zip(
        jax.tree.leaves(traj.finished), jax.tree.leaves(steps[-1]), strict=True
    ):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(loop.obs, obs)
    np.testing.assert_array_equal(loop.done, done)
    np.testing.assert_array_equal(loop.episodes.episode_return, episodes.episode_return)
    np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(loop_key))
    assert int(count) == NUM_STEPS


def test_policy_state_and_reset_flags_thread_through_the_steps():
    _, _, _, _, traj = _run()
    np.testing.assert_array_equal(traj.extras["count"], np.arange(NUM_STEPS))
    assert np.asarray(traj.reset[0]).all()  # EnvLoop.reset: every env starts an episode
    np.testing.assert_array_equal(traj.reset[1:], traj.done[:-1])
    np.testing.assert_array_equal(traj.extras["reset"], traj.reset)  # what the policy saw
    assert traj.final is None  # nothing recorded without record_final


def test_time_limits_end_episodes_and_keep_their_final_observation():
    """A random CartPole policy does not drop the pole within 5 steps, so every episode is
    cut by the time limit at steps 5 and 10, with return 5 and length 5."""
    _, _, _, _, traj = _run(record_final=lambda count, obs: obs)
    done = np.asarray(traj.done)
    assert done[4].all() and done[9].all() and done.sum() == 2 * NUM_ENVS
    np.testing.assert_array_equal(traj.truncated, done)
    assert not np.asarray(traj.terminated).any()
    # Where an episode ended, the next observation is a reset one, not its final one.
    assert not np.allclose(traj.final[4], traj.obs[5])
    np.testing.assert_array_equal(traj.final[:4], traj.obs[1:5])
    metrics = acting.episode_metrics(traj.finished)
    assert int(metrics["episodes"]) == 2 * NUM_ENVS
    assert float(metrics["episode_return"]) == 5.0 and float(metrics["episode_length"]) == 5.0


def test_env_action_goes_to_the_environments_and_action_to_the_trajectory():
    """A policy storing `a` but acting `1 - a` steps the environments exactly as one that
    stores and acts `1 - a`."""

    def stores_a_acts_flipped(count, obs, reset, key):
        count, step = _random_policy(count, obs, reset, key)
        return count, step._replace(env_action=1 - step.action)

    def acts_flipped(count, obs, reset, key):
        count, step = _random_policy(count, obs, reset, key)
        return count, step._replace(action=1 - step.action)

    _, _, _, _, split = _run(stores_a_acts_flipped)
    _, _, _, _, same = _run(acts_flipped)
    np.testing.assert_array_equal(split.obs, same.obs)
    np.testing.assert_array_equal(split.action, 1 - same.action)


def test_scale_rewards_equals_scale_reward_step_by_step():
    """Bit-exact with `acting.scale_reward` compiled alone and called once per step (as
    a loop body is compiled; a fully unrolled loop may fuse G <- gamma G + r across steps
    into multiply-adds and differ in the last bit)."""
    reward = jax.random.normal(jax.random.key(0), (6, 4))
    done = jnp.zeros((6, 4), bool).at[2, 1].set(True).at[4, 3].set(True)
    stats, ret = init_stats(), jnp.full((4,), 0.5)
    got = jax.jit(lambda *a: rollout.scale_rewards(*a, 0.9, 2.0))(stats, ret, reward, done)
    one_step = jax.jit(lambda *a: acting.scale_reward(*a, 0.9, 2.0))
    scaled = []
    for t in range(reward.shape[0]):
        stats, ret, r = one_step(stats, ret, reward[t], done[t])
        scaled.append(r)
    expected = (stats, ret, jnp.stack(scaled))
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(a, b)


def test_scale_rewards_carries_the_discounted_return_hand_computed():
    """G <- gamma G + r, restarted after an episode end: rewards 1, 2, 3 with gamma 0.5 and
    no end give G = 0.5 (0.5 * 1 + 2) + 3 = 4.25; an end on the last step restarts it."""
    reward = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    done = jnp.array([[False, False], [False, False], [False, True]])
    _, ret, _ = rollout.scale_rewards(init_stats(), jnp.zeros(2), reward, done, 0.5)
    np.testing.assert_allclose(ret, [4.25, 0.0])


@pytest.mark.parametrize("num_envs", [1, 4])
def test_env_loop_reset_starts_every_env_at_an_episode_start(num_envs):
    env, params = _env()
    loop = rollout.EnvLoop.reset(env, params, jax.random.key(0), num_envs)
    obs, _ = acting.reset_envs(env, params, jax.random.key(0), num_envs)
    np.testing.assert_array_equal(loop.obs, obs)
    assert loop.done.dtype == jnp.bool_ and np.asarray(loop.done).all()
    np.testing.assert_array_equal(loop.episodes.episode_return, np.zeros(num_envs))


class _TwoAgentCounter:
    """A toy environment whose observations and actions are dicts keyed by agent: the
    state counts steps, an episode ends every third step, the reward is the sum of the
    two agents' actions."""

    def reset(self, key, params):
        return {"a": jnp.zeros(2), "b": jnp.zeros(())}, jnp.zeros((), jnp.int32)

    def step(self, key, state, action, params):
        t = state + 1
        done = t % 3 == 0
        state = jnp.where(done, 0, t)  # reset at an episode's end
        reward = (action["a"] + action["b"]).astype(jnp.float32)
        info = {"final_observation": self._obs(t)}
        return self._obs(state), state, reward, done, jnp.bool_(False), info

    @staticmethod
    def _obs(t):
        return {"a": jnp.full(2, t, jnp.float32), "b": t.astype(jnp.float32)}


def test_observations_and_actions_may_be_dicts_keyed_by_agent():
    env = _TwoAgentCounter()

    def both_act_one(state, obs, reset, key):
        ones = jnp.ones(obs["b"].shape, jnp.int32)
        return state, rollout.PolicyStep({"a": ones, "b": ones})

    loop = rollout.EnvLoop.reset(env, None, jax.random.key(0), 4)
    _, _, _, traj = rollout.rollout(
        env, None, both_act_one, loop, None, jax.random.key(1), 7, record_final=lambda _, o: o
    )
    assert traj.obs["a"].shape == (7, 4, 2) and traj.action["b"].shape == (7, 4)
    np.testing.assert_array_equal(traj.obs["b"][:, 0], [0, 1, 2, 0, 1, 2, 0])
    np.testing.assert_array_equal(traj.finished.episode_return[:, 0], [2, 4, 6, 2, 4, 6, 2])
    np.testing.assert_array_equal(traj.done[:, 0], [0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.final["b"][:, 0], [1, 2, 3, 1, 2, 3, 1])
