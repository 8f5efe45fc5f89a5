"""The lambda-return recursion and its estimators (GAE, lambda-returns, Q(lambda),
masked GAE): against plain-Python references, hand computations, and bit for bit
against the loops they replaced."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.objectives import masked_gae
from jaxrl.returns import (
    bootstrap_truncated_rewards,
    gae,
    lambda_recursion,
    lambda_returns,
    next_on_mask,
    q_lambda_targets,
)


def reference_gae(r, v, d, last_v, gamma, lam):
    adv = np.zeros_like(r)
    next_adv = 0.0
    for t in reversed(range(len(r))):
        next_v = last_v if t == len(r) - 1 else v[t + 1]
        nd = 1.0 - d[t]
        delta = r[t] + gamma * nd * next_v - v[t]
        next_adv = delta + gamma * lam * nd * next_adv
        adv[t] = next_adv
    return adv


def test_gae_matches_reference():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=7).astype(np.float32), rng.normal(size=7).astype(np.float32)
    d = np.array([0, 0, 1, 0, 0, 1, 0], np.float32)
    adv, ret = gae(
        jnp.asarray(r), jnp.asarray(v), jnp.asarray(d, bool), jnp.float32(0.3), 0.99, 0.95
    )
    expected = reference_gae(r, v, d, 0.3, 0.99, 0.95)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, expected + v, rtol=1e-5, atol=1e-6)


def test_gae_hand_computed_two_steps():
    # gamma=0.5, lambda=1: delta_1 = 1 + 0.5*4 - 3 = 0; delta_0 = 1 + 0.5*3 - 2 = 0.5;
    # A_0 = delta_0 + 0.5 * A_1 = 0.5.
    adv, _ = gae(
        jnp.array([1.0, 1.0]),
        jnp.array([2.0, 3.0]),
        jnp.array([False, False]),
        jnp.float32(4.0),
        0.5,
        1.0,
    )
    np.testing.assert_allclose(adv, [0.5, 0.0])


def test_gae_batched_over_envs():
    r = jnp.ones((5, 3))
    v = jnp.zeros((5, 3))
    d = jnp.zeros((5, 3), bool).at[2, 1].set(True)
    adv, _ = gae(r, v, d, jnp.zeros(3), 0.9, 0.8)
    for env in range(3):
        ref = reference_gae(
            np.ones(5), np.zeros(5), np.asarray(d[:, env], np.float32), 0.0, 0.9, 0.8
        )
        np.testing.assert_allclose(adv[:, env], ref, rtol=1e-6)


@pytest.mark.parametrize(
    "terminated,truncated,expected",
    [(False, False, 1.0), (True, False, 1.0), (False, True, 1.0 + 0.9 * 5.0), (True, True, 1.0)],
)
def test_bootstrap_truncated(terminated, truncated, expected):
    out = bootstrap_truncated_rewards(
        jnp.float32(1.0), jnp.bool_(terminated), jnp.bool_(truncated), jnp.float32(5.0), 0.9
    )
    assert float(out) == pytest.approx(expected)


# ------------------------------------------------------------------ one recursion, bit for bit
# Verbatim copies of the loops `lambda_recursion` replaced (jaxrl/returns.py's `gae` and
# `lambda_returns`, PQN's `q_lambda_targets`, GRPO's `masked_gae`): the wrappers must
# reproduce them bit for bit, or training runs would change their params_fingerprint.


def old_gae(reward, value, done, last_value, gamma, gae_lambda):
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    not_done = 1.0 - done.astype(reward.dtype)
    delta = reward + gamma * not_done * next_value - value

    def backward(carry, inputs):
        delta_t, not_done_t = inputs
        carry = delta_t + gamma * gae_lambda * not_done_t * carry
        return carry, carry

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(last_value), (delta, not_done), reverse=True
    )
    return advantages, advantages + value


def old_lambda_returns(reward, discount, next_value, lam):
    dtype = jnp.result_type(reward, discount, next_value)
    reward, discount, next_value = (jnp.asarray(x, dtype) for x in (reward, discount, next_value))

    def backward(carry, inputs):
        reward_t, discount_t, next_value_t = inputs
        carry = reward_t + discount_t * ((1.0 - lam) * next_value_t + lam * carry)
        return carry.astype(dtype), carry.astype(dtype)

    _, returns = jax.lax.scan(
        backward, next_value[-1], (reward, discount, next_value), reverse=True
    )
    return returns


def old_q_lambda_targets(reward, terminated, truncated, next_q, gamma, q_lambda):
    not_terminated = 1.0 - terminated.astype(reward.dtype)
    trace = q_lambda * (1.0 - jnp.logical_or(terminated, truncated).astype(reward.dtype))

    def backward(next_return, inputs):
        reward_t, not_terminated_t, trace_t, next_q_t = inputs
        # (1 - l) * q + l * G = q + l * (G - q)
        bootstrap = next_q_t + trace_t * (next_return - next_q_t)
        target = reward_t + gamma * not_terminated_t * bootstrap
        return target, target

    _, targets = jax.lax.scan(
        backward, next_q[-1], (reward, not_terminated, trace, next_q), reverse=True
    )
    return targets


def old_masked_gae(token_rewards, values, mask, gamma, gae_lambda):
    m = jnp.asarray(mask).astype(jnp.float32)
    rewards = jnp.asarray(token_rewards, jnp.float32) * m
    values = jnp.asarray(values, jnp.float32) * m

    def backward(carry, inputs):
        next_value, next_adv = carry
        r_t, v_t, m_t = inputs
        adv_t = r_t + gamma * next_value - v_t + gamma * gae_lambda * next_adv
        # A masked step is skipped: it passes on the following token's value and advantage.
        next_value = m_t * v_t + (1.0 - m_t) * next_value
        next_adv = m_t * adv_t + (1.0 - m_t) * next_adv
        return (next_value, next_adv), adv_t * m_t

    zeros = jnp.zeros(rewards.shape[0], jnp.float32)
    _, advantages = jax.lax.scan(backward, (zeros, zeros), (rewards.T, values.T, m.T), reverse=True)
    advantages = advantages.T
    return advantages, (advantages + values) * m


def _rollout_arrays(seed, shape=(13, 5)):
    rng = np.random.default_rng(seed)
    reward, value, next_value = rng.normal(size=(3, *shape)).astype(np.float32)
    terminated = rng.random(shape) < 0.15
    truncated = rng.random(shape) < 0.15
    return reward, value, next_value, terminated, truncated


# Hyperparameters as Python floats (computed in double precision on the host) and as
# float32 arrays (the swept, traced hparams of a training run): both paths must agree.
HYPERS = [(0.99, 0.95), (jnp.float32(0.97), jnp.float32(0.9)), (0.9, 1.0), (0.5, 0.0)]


def _eager_and_jitted(fn, *args):
    """`fn(*args)` run op by op and compiled (XLA fuses the compiled one)."""
    return fn(*args), jax.jit(fn)(*args)


@pytest.mark.parametrize("gamma, lam", HYPERS)
@pytest.mark.parametrize("seed", [0, 1])
def test_gae_bit_exact_with_the_old_loop(seed, gamma, lam):
    reward, value, _, terminated, truncated = _rollout_arrays(seed)
    done = terminated | truncated
    last_value = np.random.default_rng(seed + 10).normal(size=5).astype(np.float32)

    def both(r, v, d, lv):
        return gae(r, v, d, lv, gamma, lam), old_gae(r, v, d, lv, gamma, lam)

    for (adv, ret), (old_adv, old_ret) in _eager_and_jitted(both, reward, value, done, last_value):
        np.testing.assert_array_equal(adv, old_adv)
        np.testing.assert_array_equal(ret, old_ret)


@pytest.mark.parametrize("gamma, lam", HYPERS)
@pytest.mark.parametrize("seed", [0, 1])
def test_lambda_returns_bit_exact_with_the_old_loop(seed, gamma, lam):
    reward, _, next_value, terminated, _ = _rollout_arrays(seed)
    continues = np.random.default_rng(seed).random(reward.shape).astype(np.float32)
    discount = gamma * np.where(terminated, 0.0, continues).astype(np.float32)

    def both(r, d, v):
        return lambda_returns(r, d, v, lam), old_lambda_returns(r, d, v, lam)

    for new, old in _eager_and_jitted(both, reward, discount, next_value):
        np.testing.assert_array_equal(new, old)


@pytest.mark.parametrize("gamma, lam", HYPERS)
@pytest.mark.parametrize("seed", [0, 1])
def test_q_lambda_targets_bit_exact_with_the_old_loop(seed, gamma, lam):
    reward, _, next_q, terminated, truncated = _rollout_arrays(seed)

    def both(r, term, trunc, q):
        return (
            q_lambda_targets(r, term, trunc, q, gamma, lam),
            old_q_lambda_targets(r, term, trunc, q, gamma, lam),
        )

    for new, old in _eager_and_jitted(both, reward, terminated, truncated, next_q):
        np.testing.assert_array_equal(new, old)


@pytest.mark.parametrize("gamma, lam", HYPERS)
@pytest.mark.parametrize("seed", [0, 1])
def test_masked_gae_on_the_core_is_bit_exact_with_the_old_recursion(seed, gamma, lam):
    rng = np.random.default_rng(seed)
    rewards, values = rng.normal(size=(2, 4, 11)).astype(np.float32)
    # Completions with holes (environment tokens) and an empty row.
    mask = rng.random((4, 11)) < 0.7
    mask[:, :2] = False
    mask[3] = False

    @jax.jit  # as in training: see below
    def both(r, v, m):
        return (
            masked_gae(r, v, m, gamma, lam),
            old_masked_gae(r, v, m, gamma, lam),
        )

    # Compiled only: XLA:CPU contracts `r + gamma * next_value` into one fused
    # multiply-add (one rounding instead of two) wherever the two operations fuse. In
    # the old loop they sit in one scan body and always fuse; the wrapper computes
    # them before its scan, where they fuse when compiled, but not when run op by op.
    for (adv, ret), (old_adv, old_ret) in [both(rewards, values, mask)]:
        np.testing.assert_array_equal(adv, old_adv)
        np.testing.assert_array_equal(ret, old_ret)
        # Bit for bit on the mask; off it both are zeros (the sign of a zero may differ).
        on = np.asarray(mask)
        np.testing.assert_array_equal(
            np.asarray(adv)[on].view(np.uint32), np.asarray(old_adv)[on].view(np.uint32)
        )


# ------------------------------------------------------------------ the recursion by hand


def test_lambda_recursion_hand_computed_with_a_mask():
    # G_3 = 10 (bootstrap); step 2 is masked: G_2 = G_3 = 10;
    # G_1 = 1 + 0.5 * ((1 - 0.5) * 4 + 0.5 * 10) = 4.5; G_0 = 2 + 0.5 * (0.5 * 6 + 0.5 * 4.5).
    reward = jnp.array([2.0, 1.0, 100.0])
    next_value = jnp.array([6.0, 4.0, -7.0])
    mask = jnp.array([True, True, False])
    out = lambda_recursion(
        reward, 0.5, jnp.float32(10.0), next_value=next_value, lam=0.5, mask=mask
    )
    np.testing.assert_allclose(out, [2.0 + 0.5 * (3.0 + 2.25), 4.5, 10.0])
    # lam = 1 and next_value=None are the same recursion: the discounted sum.
    summed = lambda_recursion(reward, 0.5, jnp.float32(10.0), mask=mask)
    np.testing.assert_allclose(summed, [2.0 + 0.5 * (1.0 + 0.5 * 10.0), 1.0 + 0.5 * 10.0, 10.0])


def test_lambda_recursion_per_step_lambda_and_discount():
    reward = jnp.array([1.0, 1.0])
    out = lambda_recursion(
        reward,
        jnp.array([0.5, 0.0]),
        jnp.float32(8.0),
        next_value=jnp.array([2.0, 3.0]),
        lam=jnp.array([0.0, 1.0]),
    )
    # G_1 = 1 + 0 * 8 = 1; G_0 = 1 + 0.5 * (1 * 2 + 0 * G_1) = 2.
    np.testing.assert_allclose(out, [2.0, 1.0])


def test_next_on_mask_hand_computed():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    mask = jnp.array([1.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(next_on_mask(x, mask, jnp.float32(9.0)), [4.0, 4.0, 4.0, 9.0])


def test_masked_gae_skips_masked_steps_as_if_absent():
    # The masked GAE of a sequence with holes equals the plain GAE of the sequence
    # with the holes cut out, on the mask; off the mask it carries the next advantage.
    rng = np.random.default_rng(7)
    reward, value = rng.normal(size=(2, 9)).astype(np.float32)
    done = np.zeros(9, bool)
    done[5] = True
    mask = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1], bool)
    adv, _ = gae(reward, value, done, jnp.float32(0.7), 0.9, 0.8, mask=mask)
    ref, _ = gae(reward[mask], value[mask], done[mask], jnp.float32(0.7), 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(adv)[mask], ref, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(adv)[[1, 4, 6]], np.asarray(adv)[[2, 5, 7]])


def test_gae_as_a_lambda_one_blend_of_values():
    # The lead's reading: GAE is the recursion with lam_t = 1 and any finite values,
    # `0 * v + 1 * G == G`; `gae` passes no values instead (no blend operations).
    reward, value, next_value, terminated, _ = _rollout_arrays(3)
    not_done = 1.0 - terminated.astype(np.float32)
    delta = reward + 0.9 * not_done * np.concatenate([value[1:], value[-1:]]) - value
    with_values = lambda_recursion(
        delta, 0.9 * 0.8 * not_done, jnp.zeros(5), next_value=next_value, lam=1.0
    )
    without = lambda_recursion(delta, 0.9 * 0.8 * not_done, jnp.zeros(5))
    np.testing.assert_array_equal(with_values, without)
