"""Wrappers (envs/wrappers.py): semantics, auto-reset/final_observation, statistics, composition.

Most checks run a wrapped environment and the bare one on the same keys and
compare against a reference computed in NumPy from the bare stream. A tiny
deterministic `Drift` environment (never terminates on its own unless it
reaches `goal`) makes time-limit and frame-stack arithmetic exact; CartPole
covers a real environment with early terminations.
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl import envs
from jaxrl.envs import spaces
from jaxrl.envs import wrappers as W
from jaxrl.envs.core import Environment, EnvParams, EnvState
from jaxrl.running_stats import RunningStats

# ----------------------------------------------------------------------------- toy environments


@struct.dataclass
class DriftState(EnvState):
    x: jax.Array
    time: jax.Array


@struct.dataclass
class DriftParams(EnvParams):
    max_steps_in_episode: int = 50
    goal: float = 1e9  # unreachable by default: episodes end by time limit only


class Drift(Environment):
    """x in R^3 starts uniform in [-1, 1]; x += action (Box [-1, 1]); reward = sum(action)."""

    @property
    def default_params(self) -> DriftParams:
        return DriftParams()

    def reset_env(self, key: jax.Array, params: DriftParams) -> tuple[jax.Array, DriftState]:
        x = jax.random.uniform(key, (3,), minval=-1.0, maxval=1.0)
        return x, DriftState(x=x, time=jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        x = state.x + action
        new = DriftState(x=x, time=state.time + 1)
        return x, new, jnp.sum(action), x[0] >= params.goal, {"x0": x[0]}

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (3,), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (3,), jnp.float32)


class DictDrift(Drift):
    """Drift with a Dict observation: position plus the step count mod 3 (Discrete)."""

    def reset_env(self, key, params):
        x, state = super().reset_env(key, params)
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        _, new, reward, terminated, info = super().step_env(key, state, action, params)
        return self._obs(new), new, reward, terminated, info

    def _obs(self, state: DriftState) -> dict[str, jax.Array]:
        return {"pos": state.x, "phase": state.time % 3}

    def observation_space(self, params):
        return spaces.Dict(
            {"pos": spaces.Box(-5.0, 5.0, (3,), jnp.float32), "phase": spaces.Discrete(3)}
        )


def rollout(
    env: Environment, params: Any, key: jax.Array, steps: int, policy: Any = None
) -> tuple[Any, Any]:
    """Jitted scan of `steps` steps: `(first_obs, (action, obs, state, reward, term, trunc, info))`.

    Per-step outputs are stacked along a leading time axis.
    """
    return jax.jit(lambda k: _raw_rollout(env, params, k, steps, policy))(key)


@functools.cache
def cartpole_rollout(wrapper: type | None = None, steps: int = 200) -> tuple[Any, Any]:
    """A CartPole random-policy rollout on `KEY`, bare or in one wrapper (compiled once)."""
    env = CARTPOLE if wrapper is None else wrapper(CARTPOLE)
    return rollout(env, CARTPOLE_PARAMS, KEY, steps)


def fixed_actions_policy(actions: jax.Array):
    """Ignores the key: returns the same action every step."""
    return lambda k, obs: actions


CARTPOLE, CARTPOLE_PARAMS = envs.make("CartPole-v1")
DRIFT, DRIFT_PARAMS = Drift(), DriftParams()
KEY = jax.random.key(0)


# ----------------------------------------------------------------------------- base wrapper


def test_wrapper_forwards_spaces_params_name_and_attributes():
    env = W.Wrapper(W.Wrapper(CARTPOLE))
    assert env.name == "CartPole-v1"
    assert env.default_params == CARTPOLE_PARAMS
    assert env.num_actions == 2
    assert env.observation_space(CARTPOLE_PARAMS).shape == (4,)
    assert env.unwrapped is CARTPOLE
    assert env.get_obs is not None  # a CartPole method, reached through __getattr__
    assert repr(env) == "Wrapper(Wrapper(CartPole-v1()))"
    with pytest.raises(AttributeError):
        _ = env.no_such_attribute


def test_identity_wrapper_matches_bare_environment():
    jax.tree.map(np.testing.assert_array_equal, cartpole_rollout(), cartpole_rollout(W.Wrapper))


def test_state_helpers_reach_inner_states():
    env = W.LogWrapper(W.TimeLimit(W.NormalizeObservation(CARTPOLE), 7))
    _, state = env.reset(KEY, CARTPOLE_PARAMS)
    assert isinstance(W.unwrap_state(state), type(CARTPOLE.reset(KEY)[1]))
    assert isinstance(W.find_state(state, W.NormalizeObservationState), W.NormalizeObservationState)
    assert isinstance(state.inner_state, W.TimeLimitState)
    assert int(state.time) == 0
    with pytest.raises(ValueError, match="FrameStackState"):
        W.find_state(state, W.FrameStackState)


# ----------------------------------------------------------------------------- LogWrapper


def test_log_wrapper_episode_statistics_match_reward_stream():
    steps = 200
    _, (_, _, _, reward, terminated, truncated, info) = cartpole_rollout(W.LogWrapper, steps)
    reward, done = np.asarray(reward), np.asarray(terminated | truncated)
    assert done.sum() >= 5 and info["episode_return"].dtype == jnp.float32
    np.testing.assert_array_equal(info["returned_episode"], done)
    np.testing.assert_array_equal(info["done"], done)
    np.testing.assert_array_equal(info["timestep"], np.arange(1, steps + 1))
    running_return, running_length, last_return, last_length = 0.0, 0, 0.0, 0
    for t in range(steps):
        running_return += reward[t]
        running_length += 1
        if done[t]:
            last_return, last_length = running_return, running_length
            assert info["episode_return"][t] == pytest.approx(running_return)
            assert info["episode_length"][t] == running_length
            running_return, running_length = 0.0, 0
        else:
            assert info["episode_return"][t] == 0 and info["episode_length"][t] == 0
        assert info["returned_episode_returns"][t] == pytest.approx(last_return)
        assert info["returned_episode_lengths"][t] == last_length


# ----------------------------------------------------------------------------- statistics


def sequential_reference(samples: np.ndarray, prior: float = 1e-4) -> tuple[np.ndarray, ...]:
    """gymnasium's RunningMeanStd fed one sample at a time, in float64."""
    mean, var, count = np.zeros(samples.shape[1:]), np.ones(samples.shape[1:]), prior
    for x in samples:
        delta, total = x - mean, count + 1
        mean = mean + delta / total
        var = (var * count + delta**2 * count / total) / total
        count = total
    return mean, var, count


def test_normalize_observation_stats_use_reset_and_pre_reset_observations():
    steps = 200
    env = W.NormalizeObservation(CARTPOLE)
    first, (_, obs, state, _, terminated, truncated, info) = cartpole_rollout(
        W.NormalizeObservation, steps
    )
    raw_first, (_, raw_obs, _, _, raw_term, _, raw_info) = cartpole_rollout(None, steps)
    np.testing.assert_array_equal(terminated, raw_term)  # same dynamics underneath
    assert raw_term.sum() >= 3
    # Statistics see the reset observation, then each step's pre-reset observation.
    finals = np.asarray(raw_info["final_observation"])
    samples = np.concatenate([np.asarray(raw_first)[None], finals])
    mean, var, count = sequential_reference(samples.astype(np.float64))
    stats = jax.tree.map(lambda x: x[-1], state.stats)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats.var, var, rtol=1e-3)
    np.testing.assert_allclose(stats.mean, samples.mean(0), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(stats.var, samples.var(0), rtol=1e-3)
    assert stats.count == pytest.approx(steps + 1, rel=1e-6)
    # obs and final_observation are normalised with the statistics of the same step.
    per_step = state.stats
    expect_obs = (np.asarray(raw_obs) - per_step.mean) / np.sqrt(per_step.var + 1e-8)
    expect_final = (np.asarray(raw_info["final_observation"]) - per_step.mean) / np.sqrt(
        per_step.var + 1e-8
    )
    np.testing.assert_allclose(obs, expect_obs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(info["final_observation"], expect_final, rtol=1e-4, atol=1e-4)
    done = np.asarray(terminated | truncated)
    assert not np.allclose(np.asarray(obs)[done], np.asarray(info["final_observation"])[done])
    assert env.observation_space(CARTPOLE_PARAMS).dtype == jnp.float32


def test_normalize_observation_frozen_stats_and_clip():
    given = RunningStats(
        mean=jnp.array([0.0, 0.0, 0.0]), var=jnp.array([4.0, 4.0, 4.0]), count=jnp.array(10.0)
    )
    env = W.NormalizeObservation(DRIFT, update_stats=False, clip=0.25)
    obs, state = env.reset(KEY, DRIFT_PARAMS, options={"obs_stats": given})
    raw_obs, _ = DRIFT.reset(KEY, DRIFT_PARAMS)
    np.testing.assert_allclose(obs, np.clip(np.asarray(raw_obs) / 2.0, -0.25, 0.25), rtol=1e-5)
    action = jnp.full((3,), 0.5)
    obs, state, *_ = jax.jit(env.step)(KEY, state, action, DRIFT_PARAMS)
    jax.tree.map(np.testing.assert_array_equal, state.stats, given)
    assert float(jnp.max(jnp.abs(obs))) <= 0.25
    assert env.observation_space(DRIFT_PARAMS).high.max() == np.float32(0.25)


def test_shared_statistics_with_axis_name_under_vmap():
    copies, steps = 4, 30
    env = W.NormalizeObservation(DRIFT, axis_name="envs")
    keys = jax.random.split(KEY, copies)
    action = jnp.full((copies, 3), 0.1)

    @jax.jit
    def run(keys):
        obs, state = jax.vmap(env.reset, (0, None), axis_name="envs")(keys, DRIFT_PARAMS)
        step = jax.vmap(env.step, (0, 0, 0, None), axis_name="envs")

        def body(state, k):
            _, state, *_ = step(jax.random.split(k, copies), state, action, DRIFT_PARAMS)
            return state, None

        state, _ = jax.lax.scan(body, state, jax.random.split(KEY, steps))
        return state

    stats = run(keys).stats
    for leaf in jax.tree.leaves(stats):  # every copy holds the same shared statistics
        np.testing.assert_allclose(leaf, jnp.broadcast_to(leaf[0], leaf.shape), rtol=1e-6)
    raw0 = np.asarray(jax.vmap(DRIFT.reset, (0, None))(keys, DRIFT_PARAMS)[0], np.float64)
    samples = np.concatenate([raw0 + 0.1 * t for t in range(steps + 1)])  # x_t = x_0 + 0.1 t
    np.testing.assert_allclose(stats.mean[0], samples.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var[0], samples.var(0), rtol=1e-3)
    assert float(stats.count[0]) == pytest.approx(copies * (steps + 1), rel=1e-5)


def test_scale_reward_matches_discounted_return_reference():
    gamma, steps = 0.9, 120
    params = DRIFT_PARAMS.replace(max_steps_in_episode=7)
    env = W.ScaleReward(DRIFT, gamma=gamma)
    policy = lambda k, obs: jax.random.uniform(k, (3,), minval=-1.0, maxval=1.0)  # noqa: E731
    _, (_, _, state, scaled, _, truncated, _) = rollout(env, params, KEY, steps, policy)
    _, (_, _, _, raw, _, raw_trunc, _) = rollout(DRIFT, params, KEY, steps, policy)
    np.testing.assert_array_equal(truncated, raw_trunc)
    raw, done = np.asarray(raw, np.float64), np.asarray(raw_trunc)
    ret, returns = 0.0, []
    for t in range(steps):
        ret = gamma * ret + raw[t]
        returns.append(ret)
        ret = 0.0 if done[t] else ret
    mean, var, _ = sequential_reference(np.array(returns)[:, None])
    np.testing.assert_allclose(state.stats.var[-1], var[0], rtol=1e-3)
    np.testing.assert_allclose(state.stats.mean[-1], mean[0], rtol=1e-3, atol=1e-6)
    expected = raw / np.sqrt(np.asarray(state.stats.var, np.float64) + 1e-8)
    np.testing.assert_allclose(scaled, expected, rtol=1e-4)
    np.testing.assert_array_equal(state.discounted_return[done], 0.0)


# ----------------------------------------------------------------------------- actions and shapes


def test_clip_action_clips_to_bounds_and_keeps_space():
    env = W.ClipAction(DRIFT)
    assert env.action_space(DRIFT_PARAMS).low.tolist() == [-1.0] * 3
    _, state = env.reset(KEY, DRIFT_PARAMS)
    _, _, reward, *_ = jax.jit(env.step)(KEY, state, jnp.array([5.0, -7.0, 0.25]), DRIFT_PARAMS)
    assert float(reward) == pytest.approx(1.0 - 1.0 + 0.25)
    with pytest.raises(TypeError, match="Box action"):
        W.ClipAction(CARTPOLE)


def test_flatten_observation_dict_with_one_hot_and_final_observation():
    env = W.FlattenObservation(DictDrift())
    space = env.observation_space(DRIFT_PARAMS)
    assert space.shape == (6,)
    np.testing.assert_array_equal(space.low, [-5, -5, -5, 0, 0, 0])
    params = DRIFT_PARAMS.replace(max_steps_in_episode=4)
    first, (_, obs, _, _, _, truncated, info) = rollout(
        env, params, KEY, 8, fixed_actions_policy(jnp.full((3,), 0.5))
    )
    assert first.shape == (6,) and obs.shape == (8, 6)
    np.testing.assert_array_equal(first[3:], [1, 0, 0])  # phase 0, one-hot
    np.testing.assert_array_equal(truncated, [0, 0, 0, 1, 0, 0, 0, 1])
    # Step 4 ends the episode: final observation has phase 4 % 3 == 1, the new one phase 0.
    np.testing.assert_array_equal(info["final_observation"][3, 3:], [0, 1, 0])
    np.testing.assert_array_equal(obs[3, 3:], [1, 0, 0])
    flat_cartpole = W.FlattenObservation(CARTPOLE)
    assert flat_cartpole.observation_space(CARTPOLE_PARAMS).shape == (4,)


def test_frame_stack_reset_fill_push_and_auto_reset():
    k = 3
    params = DRIFT_PARAMS.replace(max_steps_in_episode=5)
    env = W.FrameStack(DRIFT, k)
    assert env.observation_space(params).shape == (9,)
    policy = fixed_actions_policy(jnp.array([1.0, 0.0, 0.0]))
    first, (_, obs, _, _, _, truncated, info) = rollout(env, params, KEY, 12, policy)
    raw_first, (_, raw_obs, _, _, _, _, raw_info) = rollout(DRIFT, params, KEY, 12, policy)
    np.testing.assert_array_equal(first, np.tile(raw_first, k))  # reset fills with frame 0
    # Reference: a deque of raw frames, refilled with the new first frame after each end.
    frames = [np.asarray(raw_first)] * k
    for t in range(12):
        final_frames = [*frames[1:], np.asarray(raw_info["final_observation"][t])]
        np.testing.assert_allclose(info["final_observation"][t], np.concatenate(final_frames))
        frames = [np.asarray(raw_obs[t])] * k if truncated[t] else final_frames
        np.testing.assert_allclose(obs[t], np.concatenate(frames))
    assert truncated.sum() == 2


class ImageDrift(Drift):
    """Drift observed as a (2, 2, 3) image (each pixel shows x)."""

    def reset_env(self, key, params):
        _, state = super().reset_env(key, params)
        return jnp.broadcast_to(state.x, (2, 2, 3)), state

    def step_env(self, key, state, action, params):
        _, new, reward, terminated, info = super().step_env(key, state, action, params)
        return jnp.broadcast_to(new.x, (2, 2, 3)), new, reward, terminated, info

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2, 2, 3), jnp.float32)


def test_frame_stack_on_image_observations():
    stacked = W.FrameStack(ImageDrift(), 2)
    obs, state = stacked.reset(KEY, DRIFT_PARAMS)
    assert obs.shape == (2, 2, 6) == stacked.observation_space(DRIFT_PARAMS).shape
    np.testing.assert_array_equal(obs[..., :3], obs[..., 3:])
    obs, *_ = stacked.step(KEY, state, jnp.ones(3), DRIFT_PARAMS)
    np.testing.assert_allclose(obs[..., 3:] - obs[..., :3], 1.0)  # newest frame last


# ----------------------------------------------------------------------------- TimeLimit


@pytest.mark.parametrize("limit, inner_limit, expected", [(4, 50, 4), (20, 6, 6)])
def test_time_limit_truncates_at_the_smaller_limit(limit, inner_limit, expected):
    params = DRIFT_PARAMS.replace(max_steps_in_episode=inner_limit)
    env = W.TimeLimit(DRIFT, limit)
    policy = fixed_actions_policy(jnp.array([0.5, 0.0, 0.0]))
    first, (_, obs, state, _, terminated, truncated, info) = rollout(
        env, params, KEY, 3 * expected, policy
    )
    ends = np.flatnonzero(np.asarray(truncated)) + 1
    np.testing.assert_array_equal(ends, expected * np.arange(1, 4))
    assert not np.asarray(terminated).any()
    np.testing.assert_array_equal(state.steps[:expected], list(range(1, expected)) + [0])
    # The final observation is the true last one (x0 moved 0.5 per step); obs is the new episode's.
    t = expected - 1
    assert float(info["final_observation"][t, 0]) == pytest.approx(float(first[0]) + 0.5 * expected)
    assert abs(float(obs[t, 0])) <= 1.0


def test_time_limit_outside_other_wrappers_passes_truncation_down():
    env = W.TimeLimit(W.LogWrapper(W.NormalizeObservation(W.FrameStack(DRIFT, 2))), 5)
    policy = fixed_actions_policy(jnp.array([0.5, 0.0, 0.0]))
    _, (_, obs, state, _, _, truncated, info) = rollout(env, DRIFT_PARAMS, KEY, 15, policy)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(truncated)), [4, 9, 14])
    # LogWrapper (inside) saw the truncations; NormalizeObservation kept counting across them.
    np.testing.assert_array_equal(np.asarray(info["episode_length"])[[4, 9, 14]], [5, 5, 5])
    norm = W.find_state(state, W.NormalizeObservationState)
    np.testing.assert_allclose(norm.stats.count, np.arange(2, 17) + 1e-4, rtol=1e-6)
    # FrameStack (innermost wrapper) refilled after each truncation.
    frames = W.find_state(state, W.FrameStackState).frames
    np.testing.assert_array_equal(frames[4, :3], frames[4, 3:])


def test_time_limit_on_adapter_environment():
    env, params = envs.make("gymnax:CartPole-v1")
    limited = W.TimeLimit(env, 3)
    policy = lambda k, obs: (obs[2] > 0).astype(jnp.int32)  # noqa: E731 - keeps the pole up
    _, (_, _, _, _, terminated, truncated, _) = rollout(limited, params, KEY, 9, policy)
    assert not np.asarray(terminated).any()
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(truncated)), [2, 5, 8])


# ----------------------------------------------------------------------------- composition


def full_stack(env: Environment, order: int) -> Environment:
    if order == 0:
        inner = W.LogWrapper(W.TimeLimit(env, 9))
        return W.ScaleReward(W.NormalizeObservation(W.FrameStack(inner, 2), clip=5.0))
    inner = W.FrameStack(W.NormalizeObservation(W.ScaleReward(env)), 2)
    return W.TimeLimit(W.LogWrapper(W.FlattenObservation(inner)), 9)


@pytest.mark.parametrize("order", [0, 1])
def test_full_stack_composes_under_jit_and_vmap(order):
    env = full_stack(CARTPOLE, order)
    copies, steps = 3, 40
    space = env.observation_space(CARTPOLE_PARAMS)
    assert space.shape == (8,)

    run = jax.jit(jax.vmap(lambda k: _raw_rollout(env, CARTPOLE_PARAMS, k, steps)))
    first, (_, obs, _, reward, terminated, truncated, info) = run(jax.random.split(KEY, copies))
    assert first.shape == (copies, 8) and obs.shape == (copies, steps, 8)
    assert info["final_observation"].shape == obs.shape
    assert reward.dtype == jnp.float32 and terminated.dtype == jnp.bool_
    done = np.asarray(terminated | truncated)
    lengths = np.asarray(info["episode_length"])[done]
    assert done.any() and lengths.max() <= 9
    np.testing.assert_array_equal(info["returned_episode"], done)
    assert np.isfinite(np.asarray(obs)).all() and np.isfinite(np.asarray(reward)).all()


def _raw_rollout(env, params, key, steps, policy=None):
    policy = policy or (lambda k, obs: env.action_space(params).sample(k))
    key_reset, key = jax.random.split(key)
    obs, state = env.reset(key_reset, params)

    def body(carry, k):
        obs, state = carry
        k_act, k_step = jax.random.split(k)
        action = policy(k_act, obs)
        out = env.step(k_step, state, action, params)
        return (out[0], out[1]), (action, *out)

    _, outs = jax.lax.scan(body, (obs, state), jax.random.split(key, steps))
    return obs, outs


def test_wrapped_step_rejects_bad_actions_at_trace_time():
    env = W.LogWrapper(W.TimeLimit(CARTPOLE, 5))
    _, state = env.reset(KEY, CARTPOLE_PARAMS)
    with pytest.raises(TypeError, match="integer dtype"):
        env.step(KEY, state, jnp.float32(1.0), CARTPOLE_PARAMS)


def test_constructor_validation():
    with pytest.raises(ValueError):
        W.TimeLimit(CARTPOLE, 0)
    with pytest.raises(ValueError):
        W.FrameStack(CARTPOLE, 0)
    with pytest.raises(TypeError, match="Box observation"):
        W.NormalizeObservation(W.Wrapper(DictDrift()))


def test_check_action_raises_on_an_action_outside_the_space():
    """Issue 36, item 9: CartPole's step takes action=5 silently (as Gymnax does: any
    action but 1 pushes left); `CheckAction` is the debug mode that refuses it, under jit
    and vmap too, naming the action and the space."""
    env, params = envs.make("CartPole-v1")
    checked = W.CheckAction(env)
    _, state = checked.reset(jax.random.key(0), params)
    reference = env.step(jax.random.key(1), state, 1, params)
    chex.assert_trees_all_equal(checked.step(jax.random.key(1), state, 1, params), reference)
    with pytest.raises(Exception, match=r"CartPole-v1: action \[5\] is not in Discrete\(2\)"):
        jax.block_until_ready(jax.jit(checked.step)(jax.random.key(1), state, 5, params))
    keys = jax.random.split(jax.random.key(0), 3)
    _, states = jax.vmap(checked.reset, (0, None))(keys, params)
    step = jax.jit(jax.vmap(checked.step, (0, 0, 0, None)))
    jax.block_until_ready(step(keys, states, jnp.array([0, 1, 1]), params))
    with pytest.raises(Exception, match=r"action \[7\] is not in Discrete\(2\)"):
        jax.block_until_ready(step(keys, states, jnp.array([0, 7, 1]), params))
    pendulum, pendulum_params = envs.make("Pendulum-v1")
    checked = W.CheckAction(pendulum)
    _, state = checked.reset(jax.random.key(0), pendulum_params)
    with pytest.raises(Exception, match=r"action \[3\.5\] is not in Box"):
        step = checked.step(jax.random.key(1), state, jnp.array([3.5]), pendulum_params)
        jax.block_until_ready(step)
