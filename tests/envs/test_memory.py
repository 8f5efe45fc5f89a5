"""Partially observable tasks: CartPole-POMDP-v1 and MemoryChain-v0."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.envs.classic import CartPole, CartPoleParams
from jaxrl.envs.memory import CartPolePOMDP, MemoryChain


# ------------------------------------------------------------------ CartPole-POMDP
def test_pomdp_spaces_are_cartpole_position_subset() -> None:
    env, params = envs.make("CartPole-POMDP-v1")
    full = CartPole().observation_space(params)
    space = env.observation_space(params)
    assert isinstance(env, CartPolePOMDP) and isinstance(params, CartPoleParams)
    assert space.shape == (2,) and space.dtype == jnp.float32
    np.testing.assert_array_equal(space.low, full.low[[0, 2]])
    np.testing.assert_array_equal(space.high, full.high[[0, 2]])
    assert env.action_space(params).n == 2
    assert params.max_steps_in_episode == 500


def test_pomdp_is_cartpole_with_velocities_hidden() -> None:
    """Same keys and actions: identical states, rewards and flags; obs = [x, theta]."""
    pomdp, params = envs.make("CartPole-POMDP-v1")
    full = CartPole()

    def play(env: Any, key: jax.Array) -> Any:
        obs0, state = env.reset(key, params)

        def body(state: Any, k: jax.Array) -> tuple[Any, Any]:
            action = jax.random.randint(k, (), 0, 2)
            obs, state, reward, terminated, truncated, info = env.step(k, state, action, params)
            return state, (obs, state, reward, terminated, truncated, info["final_observation"])

        return obs0, state, jax.lax.scan(body, state, jax.random.split(key, 120))[1]

    key = jax.random.key(7)
    obs0_p, state0_p, (obs_p, states_p, *rest_p, final_p) = jax.jit(functools.partial(play, pomdp))(
        key
    )
    obs0_f, state0_f, (obs_f, states_f, *rest_f, final_f) = jax.jit(functools.partial(play, full))(
        key
    )
    assert obs_p.shape == (120, 2) and obs0_p.shape == (2,)
    np.testing.assert_array_equal(obs0_p, np.asarray(obs0_f)[[0, 2]])
    np.testing.assert_array_equal(obs_p, np.asarray(obs_f)[:, [0, 2]])
    np.testing.assert_array_equal(final_p, np.asarray(final_f)[:, [0, 2]])
    np.testing.assert_array_equal(obs_p, np.stack([states_p.x, states_p.theta], axis=-1))
    for a, b in zip(
        jax.tree.leaves((states_p, rest_p)), jax.tree.leaves((states_f, rest_f)), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert np.asarray(rest_p[1]).sum() >= 2, "random play should end several episodes"


# ------------------------------------------------------------------ MemoryChain
def remembering(
    memory: jax.Array, obs: jax.Array, answer_flip: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Stores the cue shown in the first observation; answers it (flip 0) or its opposite."""
    is_cue = obs[0] + obs[1] > 0
    memory = jnp.where(is_cue, jnp.argmax(obs[:2]).astype(jnp.int32), memory)
    return memory, jnp.bitwise_xor(memory, answer_flip)


@functools.cache
def play_episode(memory_length: int) -> Callable[[jax.Array, int], Any]:
    """Jitted `(key, answer_flip)`: one `memory_length + 1`-step episode of `remembering`."""
    env, params = envs.make("MemoryChain-v0", memory_length=memory_length)

    def play(key: jax.Array, answer_flip: jax.Array) -> Any:
        obs, state = env.reset(key, params)

        def body(carry: Any, k: jax.Array) -> tuple[Any, Any]:
            state, obs, memory = carry
            memory, action = remembering(memory, obs, answer_flip)
            obs, state, reward, terminated, truncated, _ = env.step(k, state, action, params)
            return (state, obs, memory), (reward, terminated, truncated, state.cue)

        init = (state, obs, jnp.int32(-1))
        return state.cue, jax.lax.scan(body, init, jax.random.split(key, memory_length + 1))[1]

    return jax.jit(play)


@pytest.mark.parametrize("memory_length", [1, 5, 12])
@pytest.mark.parametrize(("answer_flip", "expected_return"), [(0, 1.0), (1, -1.0)])
def test_memory_chain_returns_and_episode_length(
    memory_length: int, answer_flip: int, expected_return: float
) -> None:
    for seed in range(4):  # both cue values occur among these seeds (checked below)
        _, (reward, terminated, truncated, _) = play_episode(memory_length)(
            jax.random.key(seed), answer_flip
        )
        # The episode is exactly memory_length + 1 steps: it terminates on the last.
        np.testing.assert_array_equal(terminated, np.arange(memory_length + 1) == memory_length)
        assert not np.asarray(truncated).any()
        np.testing.assert_array_equal(reward[:-1], 0.0)
        assert float(reward.sum()) == expected_return


def test_memory_chain_seeds_cover_both_cues() -> None:
    cues = {int(play_episode(5)(jax.random.key(seed), 0)[0]) for seed in range(4)}
    assert cues == {0, 1}


def test_memory_chain_cue_only_in_first_observation() -> None:
    """After o_0 the observations do not depend on the cue, so memoryless play scores 0."""
    env, params = envs.make("MemoryChain-v0", memory_length=4)
    step = jax.jit(env.step)
    _, state = env.reset(jax.random.key(0), params)
    trajectories = {}
    for cue in (0, 1):
        s = state.replace(cue=jnp.int32(cue))
        observations = [env.get_obs(s)]
        for t in range(4):
            obs, s, *_ = step(jax.random.key(t), s, jnp.int32(0), params)
            observations.append(obs)
        trajectories[cue] = np.stack(observations)
    np.testing.assert_array_equal(trajectories[0][0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(trajectories[1][0], [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(trajectories[0][1:], trajectories[1][1:])
    np.testing.assert_allclose(trajectories[0][1:, 2], [0.25, 0.5, 0.75, 1.0])  # progress
    # Any fixed answer at the (cue-independent) last observation: +1 on one cue, -1 on the other.
    for answer in (0, 1):
        returns = []
        for cue in (0, 1):
            s = state.replace(cue=jnp.int32(cue), time=jnp.int32(4))
            returns.append(float(step(jax.random.key(0), s, jnp.int32(answer), params)[2]))
        assert sorted(returns) == [-1.0, 1.0]


def test_memory_chain_cue_is_fair_coin_and_configurable_length() -> None:
    env, params = envs.make("MemoryChain-v0", memory_length=3)
    assert env.memory_length == 3 and MemoryChain().memory_length == 5
    assert params.max_steps_in_episode == 5  # one step past the answer: never binds
    keys = jax.random.split(jax.random.key(0), 2000)
    _, states = jax.jit(jax.vmap(lambda k: env.reset(k, params)))(keys)
    assert abs(float(states.cue.mean()) - 0.5) < 0.05
    assert set(np.unique(states.cue).tolist()) == {0, 1}


def test_memory_chain_time_limit_before_the_answer_truncates_with_return_0() -> None:
    """The truncation branch: `max_steps_in_episode <= memory_length` cuts every episode
    before the answer step, so nothing is terminated and no reward is ever paid."""
    env, params = envs.make("MemoryChain-v0", memory_length=5, max_steps_in_episode=3)

    def play(key: jax.Array) -> Any:
        _, state = env.reset(key, params)

        def body(state: Any, k: jax.Array) -> tuple[Any, Any]:
            _, state, reward, terminated, truncated, _ = env.step(k, state, state.cue, params)
            return state, (reward, terminated, truncated)

        return jax.lax.scan(body, state, jax.random.split(key, 12))[1]

    reward, terminated, truncated = jax.jit(play)(jax.random.key(0))
    np.testing.assert_array_equal(truncated, np.arange(12) % 3 == 2)  # 4 truncations counted
    assert int(np.asarray(truncated).sum()) == 4 and not np.asarray(terminated).any()
    np.testing.assert_array_equal(reward, 0.0)  # answering the cue would have paid +1
