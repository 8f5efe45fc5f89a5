"""Preference losses (DPO, IPO, SimPO, Bradley-Terry) against hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algorithms.dpo import losses as L
from jaxrl.config import ConfigError


def softplus(x: float) -> float:
    return math.log1p(math.exp(x))  # -log sigmoid(-x)


# Pair 0 prefers the chosen answer, pair 1 the rejected one (under the implicit reward).
POLICY_C, POLICY_R = jnp.array([-1.0, -4.0]), jnp.array([-3.0, -2.0])
REF_C, REF_R = jnp.array([-2.0, -3.0]), jnp.array([-2.0, -3.0])


def test_dpo_hand_computed():
    loss, stats = L.dpo_loss(POLICY_C, POLICY_R, REF_C, REF_R, beta=0.1)
    # Pair 0: u_w = 0.1 * 1, u_l = 0.1 * -1 -> -log sigmoid(0.2). Pair 1: u_w = -0.1, u_l = 0.1.
    np.testing.assert_allclose(loss, [softplus(-0.2), softplus(0.2)], rtol=1e-6)
    assert float(stats["reward_chosen"]) == pytest.approx((0.1 - 0.1) / 2, abs=1e-7)
    assert float(stats["reward_rejected"]) == pytest.approx((-0.1 + 0.1) / 2, abs=1e-7)
    assert float(stats["reward_accuracy"]) == 0.5
    assert float(stats["reward_margin"]) == pytest.approx((0.2 - 0.2) / 2, abs=1e-7)
    # d(-log sigmoid(z))/d log pi(y_w) = -beta sigmoid(-z).
    grad = jax.grad(lambda pc: L.dpo_loss(pc, POLICY_R, REF_C, REF_R, 0.1)[0].sum())(POLICY_C)
    sigmoid_neg = [1 / (1 + math.exp(0.2)), 1 / (1 + math.exp(-0.2))]  # sigmoid(-z), z = +-0.2
    np.testing.assert_allclose(grad, [-0.1 * sigmoid_neg[0], -0.1 * sigmoid_neg[1]], rtol=1e-5)


def test_ipo_hand_computed():
    loss, stats = L.ipo_loss(POLICY_C, POLICY_R, REF_C, REF_R, beta=0.1)
    # h = 2 and -2; target 1 / (2 * 0.1) = 5.
    np.testing.assert_allclose(loss, [(2 - 5) ** 2, (-2 - 5) ** 2], rtol=1e-6)
    assert float(stats["reward_accuracy"]) == 0.5


def test_simpo_hand_computed():
    # beta 2, gamma 0.5: u_w = 2 * -4 / 4 = -2, u_l = 2 * -9 / 3 = -6 -> z = -2 + 6 - 0.5 = 3.5.
    loss, stats = L.simpo_loss(
        jnp.array([-4.0]), jnp.array([-9.0]), jnp.array([4.0]), jnp.array([3.0]), 2.0, 0.5
    )
    assert float(loss[0]) == pytest.approx(softplus(-3.5), rel=1e-6)
    assert float(stats["reward_chosen"]) == pytest.approx(-2.0)
    assert float(stats["reward_rejected"]) == pytest.approx(-6.0)
    assert float(stats["reward_margin"]) == pytest.approx(4.0)
    assert float(stats["reward_accuracy"]) == 1.0


def test_bradley_terry_hand_computed():
    loss, stats = L.bradley_terry_loss(jnp.array([1.0, 0.0]), jnp.array([0.5, 2.0]))
    np.testing.assert_allclose(loss, [softplus(-0.5), softplus(2.0)], rtol=1e-6)
    assert float(stats["reward_accuracy"]) == 0.5
    assert float(stats["reward_margin"]) == pytest.approx((0.5 - 2.0) / 2)


def test_chosen_nll_hand_computed():
    """RPO's term: -log pi(y_w) / |y_w|, the length clamped below at 1 token."""
    nll = L.chosen_nll(jnp.array([-6.0, -1.5]), jnp.array([3.0, 0.0]))
    np.testing.assert_allclose(nll, [2.0, 1.5])
    grad = jax.grad(lambda pc: L.chosen_nll(pc, jnp.array([3.0, 0.0])).sum())(jnp.zeros(2))
    np.testing.assert_allclose(grad, [-1 / 3, -1.0], rtol=1e-6)


def test_sequence_logprobs_sums_masked_tokens():
    logp = jnp.array([[-1.0, -2.0, -3.0], [-0.5, -9.0, -9.0]])
    mask = jnp.array([[0, 1, 1], [1, 0, 0]], bool)
    total, length = L.sequence_logprobs(logp, mask)
    np.testing.assert_allclose(total, [-5.0, -0.5])
    np.testing.assert_allclose(length, [2.0, 1.0])


def test_dispatcher_and_bad_input():
    loss, _ = L.preference_loss(
        "dpo", POLICY_C, POLICY_R, beta=0.1, ref_chosen=REF_C, ref_rejected=REF_R
    )
    np.testing.assert_allclose(loss, L.dpo_loss(POLICY_C, POLICY_R, REF_C, REF_R, 0.1)[0])
    with pytest.raises(ConfigError, match="preference_loss"):
        L.preference_loss("kto", POLICY_C, POLICY_R, beta=0.1)
    with pytest.raises(ConfigError, match="ref_chosen"):
        L.preference_loss("ipo", POLICY_C, POLICY_R, beta=0.1)
    with pytest.raises(ConfigError, match="chosen_length"):
        L.preference_loss("simpo", POLICY_C, POLICY_R, beta=2.0)
    with pytest.raises(ConfigError, match="beta"):
        L.dpo_loss(POLICY_C, POLICY_R, REF_C, REF_R, beta=0.0)
