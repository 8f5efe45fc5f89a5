"""pass@k and mean@k against exact binomial arithmetic."""

import math
from fractions import Fraction

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks.metrics import mean_at_k, pass_at_k, sample_metrics


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_hand_computed():
    # n = 5, c = 2: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 0.7; pass@3 = 1 - 1/10;
    # pass@4 = 1 (any 4 of 5 samples include a correct one).
    expected = {1: 0.4, 2: 0.7, 3: 0.9, 4: 1.0, 5: 1.0}
    for k, value in expected.items():
        assert float(pass_at_k(5, 2, k)) == pytest.approx(value, abs=1e-12)
    assert float(pass_at_k(5, 0, 3)) == 0.0
    assert float(pass_at_k(5, 5, 1)) == 1.0


def test_pass_at_k_vectorised_and_large_k_match_exact_binomials():
    n = np.array([300, 300, 512, 256, 1000])
    c = np.array([0, 7, 1, 255, 600])
    out = pass_at_k(n, c, 256)
    assert out.shape == (5,)
    for i in range(5):
        assert out[i] == pytest.approx(exact_pass_at_k(int(n[i]), int(c[i]), 256), abs=1e-9)
    assert out[0] == 0.0 and out[4] == 1.0  # n - c = 400 >= 256 but C(400,256)/C(1000,256) ~ 0


def test_mean_at_k_and_sample_metrics():
    np.testing.assert_allclose(mean_at_k(np.array([4, 8]), np.array([1, 6]), 4), [0.25, 0.75])
    correct = np.array([[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]], bool)
    metrics = sample_metrics(correct, ks=(1, 2))
    assert metrics["pass@1"] == pytest.approx((1 / 4 + 3 / 4 + 0) / 3)
    # pass@2 per prompt: 1 - C(3,2)/C(4,2) = 1/2; 1 - C(1,2)/C(4,2) = 1; 0.
    assert metrics["pass@2"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert metrics["mean@2"] == pytest.approx(metrics["pass@1"])


def test_bad_input_raises_config_errors():
    with pytest.raises(ConfigError, match="k=9"):
        pass_at_k(np.array([8, 16]), np.array([1, 2]), 9)
    with pytest.raises(ConfigError, match="k=0"):
        pass_at_k(8, 1, 0)
    with pytest.raises(ConfigError, match="num_correct"):
        pass_at_k(8, 9, 1)
    with pytest.raises(ConfigError, match="k=5"):
        mean_at_k(4, 1, 5)
    with pytest.raises(ConfigError, match="correct"):
        sample_metrics(np.zeros(4, bool))
