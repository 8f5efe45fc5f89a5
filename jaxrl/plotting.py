"""Learning-curve plots from run directories (matplotlib, an optional dependency)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import numpy as np


def load_curves(
    run_dir: str | pathlib.Path, metric: str = "episode_return"
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per sweep point: `(env_steps (N,), values (N, seeds))` read from metrics.jsonl."""
    run_dir = pathlib.Path(run_dir)
    resolved = json.loads((run_dir / "config.json").read_text())
    rows = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line
    ]
    if not rows:
        raise ValueError(f"{run_dir}: metrics.jsonl is empty")
    if metric not in rows[0]:
        from jaxrl.config import ConfigError  # a ValueError that the CLI reports as a usage error

        available = sorted(k for k, v in rows[0].items() if isinstance(v, list))
        raise ConfigError(f"unknown metric {metric!r}; available: {available}")
    steps = np.asarray([r["env_steps"] for r in rows], dtype=np.float64)
    values = np.asarray(
        [[np.nan if v is None else v for v in r[metric]] for r in rows], dtype=np.float64
    )
    from jaxrl import config as cfg

    grid = cfg.expand_grid(cfg.parse_sweep(resolved["run"].get("sweep") or {}))
    seeds = resolved["run"]["num_seeds"]
    label = f"{resolved['algorithm']} {resolved['config']['env']} ({run_dir.name})"
    curves = {}
    for g, point in enumerate(grid):
        suffix = " ".join(f"{k}={v:g}" for k, v in point.items())
        curves[f"{label} {suffix}".strip()] = (steps, values[:, g * seeds : (g + 1) * seeds])
    return curves


def plot_runs(
    run_dirs: Sequence[str | pathlib.Path],
    output: str | pathlib.Path,
    metric: str = "episode_return",
) -> None:
    """Plots the mean over seeds with a +-1 std band (and min/max as thin lines)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from err
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run_dir in run_dirs:
        for label, (steps, values) in load_curves(run_dir, metric).items():
            with np.errstate(all="ignore"):
                mean, std = np.nanmean(values, axis=1), np.nanstd(values, axis=1)
            (line,) = ax.plot(steps, mean, label=f"{label} (n={values.shape[1]})")
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("environment steps (per agent)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)
