"""jaxrl/stats.py: the IQM and its stratified-bootstrap interval (Agarwal et al.
2021), checked against scipy's trimmed mean (what rliable's `aggregate_iqm` calls) and
against the exact bootstrap distribution, enumerated over every resample."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jaxrl import stats


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 10])
def test_iqm_is_scipys_25_percent_trimmed_mean(n: int) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    x = np.random.default_rng(n).normal(size=n) * 100
    assert stats.iqm(x) == pytest.approx(scipy_stats.trim_mean(x, 0.25))


def test_iqm_by_hand() -> None:
    # 8 scores: cut 2 from each end, the mean of the middle 4.
    assert stats.iqm([500, 500, 490, 150, 480, 500, 330, 499]) == (480 + 490 + 499 + 500) / 4
    assert stats.iqm([3.0]) == 3.0
    assert stats.iqm(np.array([[1.0, 2.0], [3.0, 100.0]])) == 2.5  # over runs and tasks


def _exact_quantiles(x: np.ndarray, q: list[float]) -> np.ndarray:
    """The bootstrap distribution's quantiles, from all n**n equally likely resamples."""
    n = x.size
    values = [stats.iqm(x[list(idx)]) for idx in itertools.product(range(n), repeat=n)]
    return np.percentile(values, q)


def test_interval_matches_the_exact_bootstrap_distribution() -> None:
    x = np.array([-160.0, -150.0, -140.0, -135.0, -400.0])  # one collapsed seed
    exact = _exact_quantiles(x, [2.5, 97.5])
    low, high = stats.stratified_bootstrap_ci(x, reps=50_000)
    spread = x.max() - x.min()
    assert abs(low - exact[0]) < 0.02 * spread and abs(high - exact[1]) < 0.02 * spread
    assert low <= stats.iqm(x) <= high


def test_stratification_resamples_each_task_on_its_own() -> None:
    # Two tasks on very different scales: a resample never mixes their runs, so with
    # identical runs within each task the interval collapses to the point.
    x = np.array([[1.0, 1000.0]] * 5)
    assert stats.stratified_bootstrap_ci(x) == (pytest.approx(500.5), pytest.approx(500.5))


def test_aggregate_is_deterministic_and_complete() -> None:
    values = [500.0, 500.0, 480.0, 120.0, 499.0]
    a, b = stats.aggregate(values), stats.aggregate(values)
    assert a == b  # a results file's interval is reproducible from its per-seed values
    assert a["n"] == 5 and a["mean"] == pytest.approx(np.mean(values))
    assert a["std"] == pytest.approx(np.std(values, ddof=1))
    assert a["iqm"] == pytest.approx((480 + 499 + 500) / 3)
    assert a["iqm_ci95"][0] <= a["iqm"] <= a["iqm_ci95"][1]
    assert stats.aggregate([1.0])["std"] == 0.0


def test_performance_profile_is_the_fraction_of_runs_above_each_threshold():
    scores = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # 3 runs x 2 tasks
    profile = stats.performance_profile(scores, np.array([0.0, 1.0, 2.5, 25.0, 30.0]))
    np.testing.assert_allclose(profile, [1.0, 5 / 6, 4 / 6, 1 / 6, 0.0])
