"""What a run reports: one metrics row per chunk, the NaN check, summary.json, and
the TensorBoard events.

Rows are per agent (lists) and averaged over the chunk's updates; the summary's
`final_return_*` fields come from the logged rows, which a resumed run has exactly
as an uninterrupted one.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxrl import config as cfg

from .agents import Agents
from .checkpoint import tree_fingerprint
from .contract import Algorithm
from .progress import Clock
from .run_config import RunConfig

# Fraction of the final updates whose episodes define `final_return_mean`.
FINAL_RETURN_WINDOW = 0.1


class NaNLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stopped before saving that state."""


def check_finite(metrics: dict[str, np.ndarray], first_update: int, algo: Algorithm) -> None:
    """Raises `NaNLossError` naming the first non-finite `algo.nan_metrics` value."""
    unit = algo.progress_unit.rstrip("s").replace("_", " ")
    for name in algo.nan_metrics:
        values = metrics.get(name)
        if values is None:
            continue
        bad = ~np.isfinite(values)  # (updates, agents)
        if bad.any():
            i, agent = np.argwhere(bad)[0]
            update = first_update + int(i) + 1
            raise NaNLossError(
                f"{name} is {values[i, agent]} at update {update} ({unit} "
                f"{update * algo.steps_per_update} per agent), agent {agent}; the run stopped "
                "and the last good checkpoint is kept"
            )


def log_row(
    metrics: dict[str, np.ndarray], update: int, algo: Algorithm, sps: float
) -> dict[str, Any]:
    """One metrics.jsonl row: per-agent lists averaged over the chunk's updates.

    `episodes` and `tokens` are summed; `episode_*` are averaged over episodes
    (weighted by each update's `episodes`); everything else is the plain mean.
    """
    row: dict[str, Any] = {
        "update": update,
        algo.progress_unit: update * algo.steps_per_update,
        "steps_per_second": sps,
    }
    counts = metrics["episodes"].astype(np.float64) if "episodes" in metrics else None
    for name, values in metrics.items():
        if name in ("episodes", "tokens"):
            row[name] = values.sum(axis=0).astype(int).tolist()
        elif name.startswith("episode_") and counts is not None:
            total = (values * counts).sum(axis=0)
            n = counts.sum(axis=0)
            row[name] = [float(t / c) if c > 0 else None for t, c in zip(total, n, strict=True)]
        else:
            row[name] = [float(v) for v in values.mean(axis=0)]
    return row


def run_summary(
    algo: Algorithm,
    state: Any,
    history: list[dict[str, Any]],
    *,
    agents: Agents,
    run: RunConfig,
    final_update: int,
    steps_run: int,
    train_clock: Clock,
    compile_clock: Clock,
) -> dict[str, Any]:
    """summary.json: throughput of this process's training calls, the parameters'
    fingerprint and, for algorithms that report episodes, the final returns (from
    the logged rows, which a resumed run has exactly as an uninterrupted one)."""
    token_rows = [r for r in history if "tokens" in r]
    tokens = sum(sum(r["tokens"]) for r in token_rows)
    elapsed = sum(r["seconds"] for r in token_rows)
    summary: dict[str, Any] = {
        "progress_unit": algo.progress_unit,
        "steps_per_second": steps_run / train_clock.wall if train_clock.wall else None,
        "compile_seconds": compile_clock.wall,
        "train_seconds": train_clock.wall,
        # Process CPU time (all threads): steadier than wall time on a shared machine.
        "train_cpu_seconds": train_clock.cpu,
        "compile_cpu_seconds": compile_clock.cpu,
        "params_fingerprint": tree_fingerprint(state.params),
        "num_agents": agents.num_agents,
        "num_seeds": run.num_seeds,
        f"{algo.progress_unit}_per_agent": final_update * algo.steps_per_update,
        "num_devices": len(jax.devices()) if run.num_devices is None else run.num_devices,
    }
    if tokens and elapsed:
        summary["tokens_per_second"] = tokens / elapsed
    if history and algo.headline_metric == "episode_return":
        summary.update(final_returns_summary(history, algo.num_updates, agents))
    return summary


def final_returns_summary(
    history: list[dict[str, Any]], num_updates: int, agents: Agents
) -> dict[str, Any]:
    """The `final_return_*` fields of summary.json.

    Definition: for each agent, the mean undiscounted return of the episodes that
    ended in the logged rows covering the last `FINAL_RETURN_WINDOW` (10%) of
    updates (at least the last row), each episode weighing the same. Rows are whole
    chunks, so with a coarse log interval the window is wider:
    `final_return_window` gives the exact updates it covers. `final_return_mean`
    and `_std` are over the agents that finished at least one episode in the window;
    `final_return_agents` says how many did (an agent that finished none is left
    out, and reported as None in `final_return_per_agent`). With a sweep, the mean,
    std and count are per sweep point, in `sweep`, and not over all agents
    (`aggregate`).
    """
    first = num_updates - max(1, int(math.ceil(num_updates * FINAL_RETURN_WINDOW)))
    rows = [r for r in history if r["update"] > first] or history[-1:]
    counts = np.asarray([r["episodes"] for r in rows], dtype=np.float64)
    returns = np.asarray(
        [[0.0 if v is None else v for v in r["episode_return"]] for r in rows], dtype=np.float64
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        final = (returns * counts).sum(0) / counts.sum(0)
    first_row = history.index(rows[0])
    start = history[first_row - 1]["update"] if first_row > 0 else 0
    out: dict[str, Any] = {
        "final_return_per_agent": [None if math.isnan(v) else float(v) for v in final],
        "final_return_window": [start, rows[-1]["update"]],
    }
    out.update(aggregate(final, agents.grid, agents.num_seeds, "final_return"))
    return out


def aggregate(
    values: np.ndarray, grid: Sequence[Mapping[str, Any]], num_seeds: int, prefix: str
) -> dict[str, Any]:
    """`mean_std` of per-agent `values`: over all agents for one configuration; with a
    sweep, per sweep point in `sweep` and no top-level mean (agents trained with other
    hyperparameters are not seeds of one experiment, so their mean measures nothing)."""
    if len(grid) > 1:
        return {"sweep": per_sweep_point(values, grid, num_seeds, prefix)}
    return mean_std(values, prefix)


def mean_std(values: np.ndarray, prefix: str) -> dict[str, Any]:
    """`{prefix}_mean`, `_std` over the finite (per-agent) entries, and `_agents`: how many."""
    finite = values[~np.isnan(values)]
    return {
        f"{prefix}_mean": float(finite.mean()) if finite.size else None,
        f"{prefix}_std": float(finite.std()) if finite.size else None,
        f"{prefix}_agents": int(finite.size),
    }


def per_sweep_point(
    values: np.ndarray, grid: Sequence[Mapping[str, Any]], num_seeds: int, prefix: str
) -> list[dict[str, Any]]:
    """`mean_std` of each sweep point's agents, with the point's hyperparameters. Agents
    are stacked point by point: point g owns agents `g * num_seeds ... (g + 1) * num_seeds
    - 1` (`agents.make_agents`)."""
    return [
        {**point, **mean_std(values[g * num_seeds : (g + 1) * num_seeds], prefix)}
        for g, point in enumerate(grid)
    ]


def tensorboard_writer(run_dir: pathlib.Path | None, enabled: bool) -> Any:
    if not enabled:
        return None
    if run_dir is None:
        raise cfg.ConfigError("invalid tensorboard=True: needs run_dir to write events into")
    try:
        from tensorboardX import SummaryWriter
    except ImportError as err:
        raise cfg.ConfigError(
            "invalid tensorboard=True: TensorBoard logging needs tensorboardX "
            "(pip install tensorboardX)"
        ) from err
    return SummaryWriter(str(run_dir / "tensorboard"))


def write_tensorboard(writer: Any, row: dict[str, Any], progress_unit: str) -> None:
    step = row[progress_unit]
    for name, values in row.items():
        if isinstance(values, list):
            vals = [v for v in values if v is not None]
            if vals:
                writer.add_scalar(name, float(np.mean(vals)), step)
    writer.add_scalar("steps_per_second", row["steps_per_second"], step)
