"""Plots of run directories (matplotlib, an optional dependency): learning curves, and
aggregates across seeds and runs.

By default a run's curve is its algorithm's declared `headline_metric` (episode return
in an environment, accuracy on a language-model task) against its progress unit
(environment steps, samples); both come from the algorithm's class through the
registry, not from guesses about its config.

The aggregate plots (Agarwal et al. 2021) compare runs by their seeds' final scores
(`final_scores`: each seed's mean of the metric over the last 10% of its logged rows):
`iqm_figure`, the interquartile mean of each run (and sweep point) with its 95%
stratified-bootstrap interval, and `profile_figure`, the fraction of seeds whose final
score exceeds each threshold (`jaxrl.stats`).
"""

from __future__ import annotations

import json
import pathlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrl import algorithms, stats
from jaxrl import config as cfg
from jaxrl.training.contract import TARGET_FIELDS


def _matplotlib() -> Any:
    """`matplotlib.pyplot` on the file-only Agg backend; an `ImportError` saying how to
    install it when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from err
    return plt


def check_output_format(output: str | pathlib.Path) -> None:
    """Raises `ConfigError` (before anything is read or drawn) when matplotlib cannot
    write `output`'s image format, naming the formats it can. No suffix is allowed:
    matplotlib then writes its default format."""
    plt = _matplotlib()
    suffix = pathlib.Path(output).suffix.lower().lstrip(".")
    formats = sorted(plt.figure().canvas.get_supported_filetypes())
    plt.close("all")
    cfg.check(
        not suffix or suffix in formats,
        "--output",
        str(output),
        f"an image file ending in one of {['.' + f for f in formats]}",
    )


def read_metrics(path: pathlib.Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file.

    A damaged line is a `ConfigError` naming the file and line, except a last line
    without its newline: that is the torn write of a run being written (or killed),
    skipped with a warning so a live run can still be plotted.
    """
    text = path.read_text()
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: a torn last write
                warnings.warn(
                    f"{path}: skipped line {number}, an incomplete last row ({err.msg})",
                    stacklevel=2,
                )
                continue
            raise cfg.ConfigError(
                f"invalid metrics file {path}: line {number} is not a JSON row ({err.msg}); "
                "every line must be one JSON object"
            ) from None
    if not rows:
        raise cfg.ConfigError(f"invalid metrics file {path}: it holds no rows")
    return rows


def load_curves(
    run_dir: str | pathlib.Path, metric: str | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per sweep point: `(progress (N,), values (N, seeds))` read from metrics.jsonl.

    `metric` defaults to the algorithm's `headline_metric`; progress is counted in its
    `progress_unit` (per agent)."""
    run_dir = pathlib.Path(run_dir)
    resolved = json.loads((run_dir / "config.json").read_text())
    entry = algorithms.get(resolved["algorithm"])
    metric = metric or entry.headline_metric
    unit = entry.algorithm.progress_unit
    rows = read_metrics(run_dir / "metrics.jsonl")
    if metric not in rows[0]:  # a ConfigError: the CLI reports it as a usage error
        available = sorted(k for k, v in rows[0].items() if isinstance(v, list))
        raise cfg.ConfigError(f"unknown metric {metric!r}; available: {available}")
    steps = np.asarray([r[unit] for r in rows], dtype=np.float64)
    values = np.asarray(
        [[np.nan if v is None else v for v in r[metric]] for r in rows], dtype=np.float64
    )
    grid = cfg.expand_grid(cfg.parse_sweep(resolved["run"].get("sweep") or {}))
    seeds = resolved["run"]["num_seeds"]
    label = f"{resolved['algorithm']} {_target(entry, resolved['config'])} ({run_dir.name})"
    curves = {}
    for g, point in enumerate(grid):
        suffix = " ".join(f"{k}={v:g}" for k, v in point.items())
        curves[f"{label} {suffix}".strip()] = (steps, values[:, g * seeds : (g + 1) * seeds])
    return curves


FINAL_FRACTION = 0.1
"""The last fraction of a run's logged rows its final score averages (at least one)."""
KINDS = ("curves", "iqm", "profile")


def plot_runs(
    run_dirs: Sequence[str | pathlib.Path],
    output: str | pathlib.Path,
    metric: str | None = None,
    kind: str = "curves",
) -> None:
    """Writes the `kind` figure of the runs to `output`: learning curves
    (`curves_figure`), IQMs with intervals (`iqm_figure`) or performance profiles
    (`profile_figure`)."""
    cfg.check(kind in KINDS, "--kind", kind, f"one of {list(KINDS)}")
    plt = _matplotlib()
    figure = {"curves": curves_figure, "iqm": iqm_figure, "profile": profile_figure}[kind]
    fig = figure(run_dirs, metric)
    fig.savefig(output, dpi=120)
    plt.close(fig)


def curves_figure(run_dirs: Sequence[str | pathlib.Path], metric: str | None = None) -> Any:
    """A matplotlib figure of the runs' learning curves: per run (and sweep point) the
    mean over seeds with a +-1 std band. `metric` defaults to each run's headline metric
    (`load_curves`). The title names the metric and what the runs trained on; the legend
    says what the band is and how many seeds each curve has.

    Points where no seed has a value yet (no episode ended) are left out of a curve."""
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    resolved = [json.loads((pathlib.Path(d) / "config.json").read_text()) for d in run_dirs]
    entry = algorithms.get(resolved[0]["algorithm"])
    metric_name = (metric or entry.headline_metric).replace("_", " ")
    for run_dir in run_dirs:
        for label, (steps, values) in load_curves(run_dir, metric).items():
            mean, std = _mean_std_over_seeds(values)
            (line,) = ax.plot(steps, mean, label=f"{label} (n={values.shape[1]})")
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    for label, value in _dataset_lines(run_dirs, metric or entry.headline_metric):
        ax.axhline(value, color="gray", linestyle="--", linewidth=1, label=label)
    unit = entry.algorithm.progress_unit.replace("env_steps", "environment steps")
    ax.set_xlabel(f"{unit.replace('_', ' ')} (per agent)")
    ax.set_ylabel(metric_name)
    ax.set_title(f"{metric_name}: {_targets(resolved)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="mean over n seeds, band: \u00b11 std", title_fontsize=8)
    fig.tight_layout()
    return fig


# An offline run's summary.json field that a curve of the metric is read against.
DATASET_FIELDS = {
    "episode_return": "dataset_behaviour_return_mean",
    "normalized_score": "dataset_behaviour_normalized_score",
}


def _dataset_lines(run_dirs: Sequence[str | pathlib.Path], metric: str) -> list[tuple[str, float]]:
    """Runs on a dataset (`trains_on` "dataset"): `(label, value)` of each dataset's
    behaviour mean (its return, or its normalised score) from summary.json, once per
    dataset, for a dashed line."""
    lines: dict[str, float] = {}
    field = DATASET_FIELDS.get(metric)
    for run_dir in run_dirs:
        path = pathlib.Path(run_dir) / "summary.json"
        resolved = json.loads((pathlib.Path(run_dir) / "config.json").read_text())
        entry = algorithms.get(resolved["algorithm"])
        if field is None or entry.trains_on != "dataset" or not path.exists():
            continue
        value = json.loads(path.read_text()).get(field)
        if value is not None:
            lines.setdefault(f"dataset {_target(entry, resolved['config'])} (behaviour)", value)
    return list(lines.items())


def _nan_mean(values: np.ndarray, axis: int) -> np.ndarray:
    """The mean over `axis` of the values that are not NaN, NaN where there is none,
    without numpy's "Mean of empty slice" warning (a row before any episode ended)."""
    counts = np.sum(~np.isnan(values), axis=axis)
    totals = np.where(np.isnan(values), 0.0, values).sum(axis=axis)
    return np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)


def _mean_std_over_seeds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, mean and (ddof 0) std over the seeds that have a value (`_nan_mean`)."""
    mean = _nan_mean(values, axis=1)
    return mean, np.sqrt(_nan_mean((values - mean[:, None]) ** 2, axis=1))


def _target(entry: Any, config: dict[str, Any]) -> str:
    """What a run trained on, as its config.json names it (a dataset by its file's stem)."""
    target = config.get(TARGET_FIELDS[entry.trains_on])
    return pathlib.Path(str(target)).stem if entry.trains_on == "dataset" else str(target)


def _targets(resolved: Sequence[dict[str, Any]]) -> str:
    """ "ppo on CartPole-v1" for the runs' algorithms and what they trained on, each once."""
    names = []
    for run in resolved:
        entry = algorithms.get(run["algorithm"])
        name = f"{run['algorithm']} on {_target(entry, run['config'])}"
        if name not in names:
            names.append(name)
    return ", ".join(names)


def final_scores(
    run_dirs: Sequence[str | pathlib.Path], metric: str | None = None
) -> dict[str, np.ndarray]:
    """Per run and sweep point (`load_curves`' labels), each seed's final score: its mean
    of `metric` over the last `FINAL_FRACTION` of the logged rows (NaN for a seed with
    no value there, e.g. no episode ended; those seeds are left out)."""
    scores = {}
    for run_dir in run_dirs:
        for label, (_, values) in load_curves(run_dir, metric).items():
            last = values[-max(1, int(np.ceil(FINAL_FRACTION * len(values)))) :]
            finals = _nan_mean(last, axis=0)
            scores[label] = finals[~np.isnan(finals)]
    return scores


def _metric_name(run_dirs: Sequence[str | pathlib.Path], metric: str | None) -> str:
    resolved = json.loads((pathlib.Path(run_dirs[0]) / "config.json").read_text())
    return (metric or algorithms.get(resolved["algorithm"]).headline_metric).replace("_", " ")


def iqm_figure(run_dirs: Sequence[str | pathlib.Path], metric: str | None = None) -> Any:
    """Each run's (and sweep point's) interquartile mean of its seeds' final scores,
    with the 95% stratified-bootstrap interval, one row each (Agarwal et al. 2021)."""
    plt = _matplotlib()
    scores = final_scores(run_dirs, metric)
    labels = [label for label, values in scores.items() if values.size]
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * len(labels)))
    for row, label in enumerate(labels):
        values = scores[label]
        center = stats.iqm(values)
        low, high = stats.stratified_bootstrap_ci(values)
        ax.errorbar(center, row, xerr=[[center - low], [high - center]], fmt="o", capsize=4)
    ax.set_yticks(range(len(labels)), [f"{lb} (n={scores[lb].size})" for lb in labels])
    ax.invert_yaxis()
    ax.set_xlabel(f"final {_metric_name(run_dirs, metric)}")
    ax.set_title("IQM over seeds, 95% stratified-bootstrap interval", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def profile_figure(run_dirs: Sequence[str | pathlib.Path], metric: str | None = None) -> Any:
    """Performance profiles: per run (and sweep point), the fraction of its seeds whose
    final score exceeds each threshold, over the range of every run's scores."""
    plt = _matplotlib()
    scores = {label: v for label, v in final_scores(run_dirs, metric).items() if v.size}
    every = np.concatenate(list(scores.values())) if scores else np.zeros(1)
    span = max(float(every.max() - every.min()), 1e-9)
    taus = np.linspace(every.min() - 0.05 * span, every.max() + 0.05 * span, 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in scores.items():
        ax.plot(taus, stats.performance_profile(values, taus), label=f"{label} (n={values.size})")
    name = _metric_name(run_dirs, metric)
    ax.set_xlabel(f"final {name} threshold \u03c4")
    ax.set_ylabel("fraction of seeds with score > \u03c4")
    ax.set_title(f"performance profile: {name}", fontsize=10)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
