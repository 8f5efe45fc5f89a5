"""PPO loss terms against values computed by hand."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algorithms.ppo import losses


def test_clipped_surrogate_hand_computed():
    # ratios: e^0.5 = 1.6487 (clipped to 1.2 for A>0), e^-0.5 = 0.6065 (clipped to 0.8 for A<0
    # but min picks the clipped 0.8*-1 = -0.8 vs 0.6065*-1 = -0.6065 -> -0.8), 1.0.
    log_prob = jnp.array([0.5, -0.5, 0.0])
    old = jnp.zeros(3)
    adv = jnp.array([1.0, -1.0, 2.0])
    loss = losses.clipped_surrogate_loss(log_prob, old, adv, 0.2)
    expected = -(1.2 * 1.0 + 0.8 * -1.0 + 1.0 * 2.0) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    stats = losses.ratio_diagnostics(log_prob, old, 0.2)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 3)
    r = np.exp([0.5, -0.5, 0.0])
    assert float(stats["approx_kl"]) == pytest.approx(np.mean((r - 1) - np.log(r)), rel=1e-6)


def test_surrogate_is_pessimistic_bound():
    # With A > 0 and ratio below 1 - eps, the unclipped term is smaller and must be used.
    loss = losses.clipped_surrogate_loss(jnp.array([math.log(0.5)]), jnp.zeros(1), jnp.ones(1), 0.2)
    assert float(loss) == pytest.approx(-0.5)


def test_value_loss_clipped_and_unclipped():
    value, old, ret = jnp.array([2.0, 0.0]), jnp.array([1.0, 0.0]), jnp.array([3.0, 1.0])
    assert float(losses.value_loss(value, old, ret, 0.2, clip=False)) == pytest.approx(
        0.5 * (1 + 1) / 2
    )
    # Sample 0: V_clip = 1.2 -> (1.2 - 3)^2 = 3.24 > (2 - 3)^2 = 1 -> 3.24. Sample 1: 1.
    assert float(losses.value_loss(value, old, ret, 0.2, clip=True)) == pytest.approx(
        0.5 * (3.24 + 1) / 2
    )


def test_normalize_advantages_population_std():
    adv = jnp.array([1.0, 2.0, 3.0, 4.0])
    out = np.asarray(losses.normalize_advantages(adv))
    expected = (np.array([1, 2, 3, 4]) - 2.5) / (np.std([1, 2, 3, 4]) + 1e-8)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_total_loss_combines_terms():
    kw = dict(
        clip_eps=0.2,
        vf_clip_eps=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        clip_value=False,
        normalize_advantages_=False,
    )
    total, stats = losses.ppo_loss(
        jnp.zeros(2),
        jnp.array([0.7, 0.5]),
        jnp.array([1.0, 2.0]),
        jnp.zeros(2),
        jnp.zeros(2),
        jnp.array([1.0, -1.0]),
        jnp.array([0.0, 0.0]),
        **kw,
    )
    policy = -(1.0 - 1.0) / 2
    value = 0.5 * (1 + 4) / 2
    assert float(total) == pytest.approx(policy + 0.5 * value - 0.01 * 0.6, rel=1e-6)
    assert float(stats["entropy"]) == pytest.approx(0.6)


def test_total_loss_without_diagnostics_reports_only_the_loss():
    args = (jnp.array([0.3, -0.2]), jnp.array([0.7, 0.5]), jnp.array([1.0, 2.0]))
    args += (jnp.zeros(2), jnp.array([0.5, 1.5]), jnp.array([1.0, -1.0]), jnp.array([0.5, 2.5]))
    kw = dict(clip_eps=0.2, vf_clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, clip_value=True)
    full, stats = losses.ppo_loss(*args, **kw, normalize_advantages_=True)
    lean, lean_stats = losses.ppo_loss(*args, **kw, normalize_advantages_=True, diagnostics=False)
    assert float(lean) == float(full)
    assert set(lean_stats) == {"loss"}
    assert set(stats) == {
        "loss",
        "policy_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
        "approx_kl",
    }
