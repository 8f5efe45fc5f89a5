"""Optimistic resets (envs/optimistic_resets.py): the batched auto-reset sharing fresh starts.

Each check steps a batch with `acting.step_envs` (what the algorithms call) and
compares it with the plain auto-reset on the same keys, on CartPole (a built-in
environment) with a short time limit, so that chosen copies finish on a chosen step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import acting, envs
from jaxrl.config import ConfigError
from jaxrl.envs import wrappers as W
from jaxrl.envs.optimistic_resets import (
    OptimisticResets,
    OptimisticResetState,
    pool_index,
    shared_starts,
)

N = 8
LIMIT = 4  # CartPole's time limit here: a copy at time LIMIT - 1 truncates on its next step


def _cartpole():
    return envs.make("CartPole-v1", max_steps_in_episode=LIMIT)


def _assert_trees_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _row(tree, i):
    """Copy `i` of a batched pytree."""
    return jax.tree.map(lambda x: x[i], tree)


def _set_time(state, time):
    """The same stack of states with the base CartPole state's `time` replaced."""
    if isinstance(state, W.WrapperState):
        return state.replace(inner_state=_set_time(state.inner_state, time))
    return state.replace(time=time)


def test_pool_index_hands_the_kth_finished_copy_entry_k_mod_pool_size():
    done = jnp.array([0, 1, 1, 0, 1, 1, 0, 1])
    got = [int(pool_index(done, jnp.int32(i), 2)) for i in range(8)]
    # finished copies 1, 2, 4, 5, 7 are the 0th..4th: entries 0, 1, 0, 1, 0
    assert [got[i] for i in (1, 2, 4, 5, 7)] == [0, 1, 0, 1, 0]
    # one entry per copy: copy i takes entry i
    assert [int(pool_index(done, jnp.int32(i), 8)) for i in range(8)] == list(range(8))
    np.testing.assert_array_equal(shared_starts(done.astype(bool), 2), [0, 0, 0, 0, 1, 1, 0, 1])


def test_reset_ratio_one_equals_the_plain_auto_reset_exactly():
    """Through a wrapper stack, over enough steps for many episodes to end."""
    env, params = _cartpole()
    plain = W.LogWrapper(W.TimeLimit(env, 3))
    optimistic = OptimisticResets(plain, 1)
    _, s_plain = acting.reset_envs(plain, params, jax.random.key(0), N)
    _, s_opt = acting.reset_envs(optimistic, params, jax.random.key(0), N)
    step_plain = jax.jit(lambda k, s, a: acting.step_envs(plain, params, k, s, a))
    step_opt = jax.jit(lambda k, s, a: acting.step_envs(optimistic, params, k, s, a))
    key = jax.random.key(1)
    ended = 0
    for _ in range(8):
        key, k_act, k_env = jax.random.split(key, 3)
        action = jax.random.randint(k_act, (N,), 0, 2)
        out_plain = step_plain(k_env, s_plain, action)
        out_opt = step_opt(k_env, s_opt, action)
        s_plain, s_opt = out_plain[1], out_opt[1]
        _assert_trees_equal(out_opt[1].inner_state, s_plain)
        for a, b in zip(out_opt[:1] + out_opt[2:5], out_plain[:1] + out_plain[2:5], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(
            out_opt[5]["final_observation"], out_plain[5]["final_observation"]
        )
        ended += int(np.sum(out_plain[3] | out_plain[4]))
        assert not np.asarray(out_opt[5]["shared_reset"]).any()
    assert ended > N  # the comparison covered many auto-resets


def _one_step(reset_ratio, finishing, seed=5):
    """One step of N CartPole copies where the copies in `finishing` hit the time limit:
    the optimistic step, the plain one, and the pool it should draw from."""
    return _one_step_program(reset_ratio, tuple(finishing))(jax.random.key(seed))


@functools.cache
def _one_step_program(reset_ratio, finishing):
    env, params = _cartpole()
    optimistic = OptimisticResets(env, reset_ratio)
    action = jnp.arange(N) % 2

    @jax.jit
    def run(key):
        _, state = acting.reset_envs(optimistic, params, jax.random.key(0), N)
        time = jnp.where(jnp.isin(jnp.arange(N), jnp.asarray(finishing)), LIMIT - 1, 0)
        state = _set_time(state, time.astype(jnp.int32))
        out = acting.step_envs(optimistic, params, key, state, action)
        plain = acting.step_envs(env, params, key, state.inner_state, action)
        keys = jax.random.split(key, N)
        reset_keys = jax.vmap(lambda k: env.step_keys(k, params)[1])(keys)
        pool_size = N // reset_ratio
        pool = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys[:pool_size], params)
        return out, plain, pool

    return run


def test_finished_copies_start_from_the_pool_and_the_others_are_untouched():
    finishing = [1, 4, 6]
    out, plain, (pool_obs, pool_state) = _one_step(reset_ratio=2, finishing=finishing)
    obs, state, reward, terminated, truncated, info = out
    done = np.asarray(terminated | truncated)
    np.testing.assert_array_equal(done, np.isin(np.arange(N), finishing))
    for i in range(N):
        if i in finishing:
            k = finishing.index(i)  # the k-th finished copy takes pool entry k (k < 4)
            np.testing.assert_array_equal(obs[i], pool_obs[k])
            _assert_trees_equal(_row(state.inner_state, i), _row(pool_state, k))
        else:  # the plain step, untouched
            np.testing.assert_array_equal(obs[i], plain[0][i])
            _assert_trees_equal(_row(state.inner_state, i), _row(plain[1], i))
    # Everything but the restarts is the plain step's.
    for a, b in zip((reward, terminated, truncated), plain[2:5], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(info["final_observation"], plain[5]["final_observation"])
    # Three distinct fresh starts, none shared.
    assert len({tuple(np.asarray(obs[i]).tolist()) for i in finishing}) == 3
    assert not np.asarray(info["shared_reset"]).any()
    np.testing.assert_array_equal(state.shared_resets, np.zeros(N))


def test_more_finished_copies_than_starts_share_them_and_are_counted():
    finishing = [0, 2, 3, 5, 7]  # 5 finish, the pool has N / 4 = 2 starts
    out, _, (pool_obs, _) = _one_step(reset_ratio=4, finishing=finishing)
    obs, state, info = out[0], out[1], out[5]
    for k, i in enumerate(finishing):
        np.testing.assert_array_equal(obs[i], pool_obs[k % 2])
    expected = np.isin(np.arange(N), [3, 5, 7])  # the third finished copy on share
    np.testing.assert_array_equal(info["shared_reset"], expected)
    assert isinstance(state, OptimisticResetState)
    np.testing.assert_array_equal(state.shared_resets, expected.astype(np.int32))
    found = W.find_state(state, OptimisticResetState)
    assert int(found.shared_resets.sum()) == 3


def test_same_key_same_result_other_key_other_starts():
    a = _one_step(2, [1, 4, 6], 9)[0]
    b = _one_step(2, [1, 4, 6], 9)[0]
    c = _one_step(2, [1, 4, 6], 10)[0]
    _assert_trees_equal(a, b)
    assert not np.array_equal(np.asarray(a[0][1]), np.asarray(c[0][1]))


def test_a_copy_stepped_alone_auto_resets_as_usual():
    """`step` (e.g. evaluation episodes) has no batch to share with: the plain auto-reset."""
    env, params = _cartpole()
    optimistic = OptimisticResets(env, 2)
    _, state = optimistic.reset(jax.random.key(0), params)
    _, plain_state = env.reset(jax.random.key(0), params)
    for t in range(2 * LIMIT):
        key = jax.random.key(t)
        obs, state, *_, info = optimistic.step(key, state, jnp.int32(t % 2), params)
        plain_obs, plain_state, *_ = env.step(key, plain_state, jnp.int32(t % 2), params)
        np.testing.assert_array_equal(obs, plain_obs)
        assert not bool(info["shared_reset"])
    assert int(state.shared_resets) == 0


def test_bad_reset_ratio_fails_early_naming_it():
    env, params = _cartpole()
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="reset_ratio must be a positive integer"):
            OptimisticResets(env, bad)
    optimistic = OptimisticResets(env, 3)
    _, state = acting.reset_envs(optimistic, params, jax.random.key(0), N)
    with pytest.raises(ValueError, match="reset_ratio=3 must divide the number of copies"):
        acting.step_envs(optimistic, params, jax.random.key(1), state, jnp.zeros(N, jnp.int32))


TINY = dict(total_steps=512, num_envs=4, num_steps=32, progress=False)


def test_ppo_reset_ratio_is_validated_and_trains():
    with pytest.raises(ConfigError, match="reset_ratio"):
        jaxrl.train("ppo", env="CartPole-v1", reset_ratio=3, **TINY)
    with pytest.raises(ConfigError, match="reset_ratio"):
        jaxrl.train("ppo", env="CartPole-v1", reset_ratio=0, **TINY)
    with pytest.raises(ConfigError, match="reset_ratio"):
        jaxrl.train("ppo", env="CartPole-v1", reset_ratio=2.5, **TINY)
    shared = jaxrl.train("ppo", env="CartPole-v1", reset_ratio=2, **TINY)
    counts = W.find_state(shared.state.env_state, OptimisticResetState).shared_resets
    assert counts.shape[-1] == 4 and np.isfinite(shared.summary["final_return_mean"])
