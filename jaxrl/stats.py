"""Aggregates of per-seed results: interquartile mean with a stratified-bootstrap interval,
and performance profiles.

Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS), recommend reporting the interquartile mean (IQM, the 25%-trimmed
mean) of the runs with a 95% stratified-bootstrap confidence interval. Their `rliable`
package computes it, but rliable 1.2.0 does not import next to this project's packages
(its `arch<8` dependency fails on pandas 3: `deprecate_kwarg() missing ... new_arg_name`),
so this module implements the two pieces rliable's `metrics.aggregate_iqm` and
`library.get_interval_estimates(..., method="percentile")` are made of, and
tests/test_stats.py checks them against scipy's trimmed mean and against the
exact bootstrap distribution enumerated over every resample.

`performance_profile` is rliable's score distribution (Agarwal et al. 2021, sec. 4.1):
the fraction of runs whose score exceeds each threshold, a curve that shows the whole
distribution rather than one statistic of it. `jaxrl plot --kind iqm|profile` draws both
from run directories; the results files of `benchmarks/` report `aggregate`.

Scores are a `(runs, tasks)` array, as in rliable; a result of one environment is one
task. "Stratified" means each task's runs are resampled with replacement on their own
(tasks are never resampled), as rliable's `StratifiedBootstrap` does.
"""

from __future__ import annotations

import numpy as np


def iqm(scores: np.ndarray) -> float:
    """The interquartile mean of all scores: the mean of what remains after cutting
    `floor(n / 4)` scores off each end of the sorted `n` (scipy.stats.trim_mean(x, 0.25),
    rliable's `aggregate_iqm`). Robust to the one run in several that collapses, less
    noisy than the median."""
    flat = np.sort(np.asarray(scores, np.float64).ravel())
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic=iqm,
    reps: int = 20_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap confidence interval of `statistic(scores)`: `reps`
    resamples, each drawing every task's runs with replacement from that task's runs
    (stratified by task), and the `(1 - confidence) / 2` and `(1 + confidence) / 2`
    quantiles (linear interpolation, numpy's default, as arch's percentile method) of
    the statistic over them. Deterministic for a given `seed`, so a results file's
    interval is reproducible from its per-seed values."""
    x = np.asarray(scores, np.float64)
    x = x[:, None] if x.ndim == 1 else x
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    # One index per (resample, run, task): each task column is resampled on its own.
    rows = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = x[rows, np.arange(tasks)[None, None, :]]
    if statistic is iqm:  # vectorised: trim each resample's sorted scores
        flat = np.sort(resampled.reshape(reps, -1), axis=1)
        cut = int(0.25 * flat.shape[1])
        values = flat[:, cut : flat.shape[1] - cut].mean(axis=1)
    else:
        values = np.array([statistic(r) for r in resampled])
    alpha = 1.0 - confidence
    low, high = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high)


def aggregate(values: list[float]) -> dict[str, float | int | list[float]]:
    """What a results file reports of per-seed `values` (one task): the IQM with its 95%
    stratified-bootstrap interval, the mean and the sample standard deviation (ddof=1,
    0 for one seed)."""
    x = np.asarray(values, np.float64)
    low, high = stratified_bootstrap_ci(x)
    return {
        "n": int(x.size),
        "iqm": iqm(x),
        "iqm_ci95": [low, high],
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
    }


def performance_profile(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The fraction of all runs (of every task) whose score is above each threshold:
    rliable's run-score distribution, 1 at thresholds below every score, 0 above."""
    flat = np.asarray(scores, np.float64).ravel()
    taus = np.asarray(thresholds, np.float64)
    return (flat[None, :] > taus[:, None]).mean(axis=1)
