"""Distributions: log-probabilities and entropies against closed forms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.nn import Categorical, DiagGaussian, TanhGaussian


def test_categorical():
    logits = jnp.log(jnp.array([0.2, 0.3, 0.5]))
    d = Categorical(logits)
    assert float(d.log_prob(jnp.int32(2))) == pytest.approx(math.log(0.5), rel=1e-6)
    p = np.array([0.2, 0.3, 0.5])
    assert float(d.entropy()) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-6)
    samples = jax.vmap(d.sample)(jax.random.split(jax.random.key(0), 20000))
    np.testing.assert_allclose(np.bincount(samples, minlength=3) / 20000, p, atol=0.015)


def test_diag_gaussian():
    d = DiagGaussian(jnp.array([0.0, 1.0]), jnp.log(jnp.array([1.0, 2.0])))
    x = jnp.array([0.5, 0.0])
    expected = sum(
        -0.5 * ((xi - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
        for xi, m, s in [(0.5, 0.0, 1.0), (0.0, 1.0, 2.0)]
    )
    assert float(d.log_prob(x)) == pytest.approx(expected, rel=1e-6)
    assert float(d.entropy()) == pytest.approx(
        sum(0.5 * math.log(2 * math.pi * math.e * s**2) for s in (1, 2)), rel=1e-6
    )


def test_tanh_gaussian_change_of_variables():
    d = TanhGaussian(jnp.array([0.3]), jnp.array([-0.2]))
    u = jnp.array([0.7])
    base = DiagGaussian(d.mean, d.log_std).log_prob(u)
    expected = float(base) - math.log(1 - math.tanh(0.7) ** 2)
    assert float(d.log_prob(u)) == pytest.approx(expected, rel=1e-5)
    # Stable for large |u| where 1 - tanh(u)^2 underflows in float32.
    assert np.isfinite(float(d.log_prob(jnp.array([30.0]))))
