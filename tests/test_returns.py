"""GAE and truncation bootstrapping against a plain-Python reference."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.returns import bootstrap_truncated_rewards, gae


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
