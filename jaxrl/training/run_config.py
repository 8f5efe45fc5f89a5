"""What a run is: `RunConfig` (how to train, not what is learned), how it is cut into
chunks, and `TrainResult` (what `train` returns).

The chunking lives here because both the loop (`loop.py`) and `jaxrl plan` need it:
the plan compiles the program of the driver's first chunk.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxrl import config as cfg

# How a device runs its agents (`RunConfig.agent_execution`): batched or one by one.
AGENT_EXECUTIONS = ("vmap", "map")


# Run options that change the compiled programs: the agents (seeds, devices), how they
# run, and the chunk length (log and checkpoint intervals). `run_dir` is kept only
# because `checkpoint_every` needs one; nothing is written.
PLANNED_RUN_FIELDS = (
    "num_seeds",
    "seed",
    "num_devices",
    "agent_execution",
    "log_every",
    "checkpoint_every",
    "run_dir",
)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How to run an algorithm (not what it learns).

    Attributes:
        num_seeds: Independent agents per sweep point, trained in one program (vmap).
        seed: Base seed; agent i of every sweep point uses `fold_in(key(seed), i)`.
        sweep: Grid over sweepable hyperparameters, e.g. `{"lr": [1e-3, 3e-4]}`.
        run_dir: Where config, metrics, checkpoints and summary go (None: nothing written).
        checkpoint_every: Also checkpoint every this many steps per agent (in the
            algorithm's progress unit; None: by time only).
        checkpoint_minutes: Checkpoint at the first chunk boundary after this many
            minutes of wall clock since the last checkpoint (None: never by time).
            Runs with a run_dir always checkpoint at the end.
        keep_checkpoints: How many recent checkpoints to keep.
        resume: Continue from the newest intact checkpoint in `run_dir`; an error if
            there is none (nothing is overwritten).
        fresh: Start from step 0 in a `run_dir` that already holds a run, replacing
            its checkpoints and metrics.
        reschedule: When resuming with a larger `total_steps`, accept that schedules
            defined by the total (an annealed learning rate) follow the new total.
        log_every: Log metrics every this many steps per agent (default: about 50
            points over the run).
        num_devices: Devices of the mesh (default: all).
        agent_execution: How a device runs its agents in a fused algorithm's program:
            "vmap" (the default) batches them into one computation, "map" runs them
            one after another (`lax.map`), each agent's chunk of updates as its own
            scan. Both compute the same updates; "map" gives every agent exactly its
            one-seed program (the same numbers, bit for bit, however many agents
            run), keeps an algorithm's `lax.cond` a branch (vmapped, a per-agent
            predicate computes both sides: an off-policy agent's warm-up steps cost
            a learning step), and on CPU is faster for small networks, where batched
            products gain nothing (`benchmarks/agent_execution.py` measures both per case).
            On accelerators, and for large per-agent batches (PPO), keep "vmap".
            Staged algorithms (language models) accept only "vmap".
        progress: Show a progress bar.
        tensorboard: Also write TensorBoard events (needs `tensorboardX`).
        check_memory: Refuse a run whose state or compiled step needs more memory than
            the machine has available, before allocating or running it
            (`jaxrl.training.memory`); False runs it anyway.
    """

    num_seeds: int = 1
    seed: int = 0
    sweep: Mapping[str, Sequence[float]] = dataclasses.field(default_factory=dict)
    run_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = 10.0
    keep_checkpoints: int = 3
    resume: bool = False
    fresh: bool = False
    reschedule: bool = False
    log_every: int | None = None
    num_devices: int | None = None
    agent_execution: str = "vmap"
    progress: bool = True
    tensorboard: bool = False
    check_memory: bool = True

    def validate(self, sweepable: Sequence[str]) -> RunConfig:
        cfg.check_positive(self, "num_seeds", "keep_checkpoints")
        cfg.check(
            isinstance(self.seed, int) and self.seed >= 0, "seed", self.seed, "an integer >= 0"
        )
        for name in ("checkpoint_every", "log_every"):
            value = getattr(self, name)
            cfg.check(
                value is None or (isinstance(value, int) and value > 0),
                name,
                value,
                "a positive integer",
            )
        minutes = self.checkpoint_minutes
        cfg.check(
            minutes is None or (cfg.is_finite_number(minutes) and minutes > 0),
            "checkpoint_minutes",
            minutes,
            "a positive number of minutes or None",
        )
        for name, values in self.sweep.items():
            cfg.check(
                name in sweepable,
                "sweep",
                name,
                f"one of the sweepable hyperparameters {list(sweepable)}",
            )
            cfg.check(len(values) > 0, f"sweep {name}", values, "a non-empty list of values")
        _check_run_dir(self.run_dir)
        for flag in ("resume", "fresh", "checkpoint_every"):
            if getattr(self, flag) not in (None, False):
                cfg.check(
                    self.run_dir is not None,
                    flag,
                    getattr(self, flag),
                    "used together with run_dir",
                )
        cfg.check(not (self.resume and self.fresh), "fresh", self.fresh, "not combined with resume")
        cfg.check(
            self.agent_execution in AGENT_EXECUTIONS,
            "agent_execution",
            self.agent_execution,
            f"one of {list(AGENT_EXECUTIONS)}",
        )
        return self


def _check_run_dir(run_dir: str | None) -> None:
    """`run_dir` is None (write nothing) or a path that is, or can become, a directory:
    not empty (it would silently write nothing) and not an existing file, nor inside one."""
    if run_dir is None:
        return
    allowed = "a directory path (or None to write nothing)"
    cfg.check(isinstance(run_dir, str) and run_dir.strip() != "", "run_dir", run_dir, allowed)
    path = pathlib.Path(run_dir)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            cfg.check(False, "run_dir", run_dir, f"{allowed}; {str(part)!r} is an existing file")


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: the final state, a metrics table and the summary."""

    state: Any
    metrics: list[dict[str, Any]]
    summary: dict[str, Any]
    algorithm: Any
    run_dir: pathlib.Path | None

    def curve(self, metric: str | None = None) -> np.ndarray:
        """A logged metric per row and agent, shape (log points, agents), NaN where an
        agent has no value; default: the algorithm's declared `headline_metric`."""
        metric = metric or self.algorithm.headline_metric
        return np.asarray([row[metric] for row in self.metrics], dtype=np.float64)

    def returns(self) -> np.ndarray:
        """The headline metric's curve: the episode return, for an algorithm in an
        environment (`curve()`)."""
        return self.curve()


def run_dict(run: RunConfig) -> dict[str, Any]:
    """The run config as JSON values (config.json's `run` section)."""
    d = dataclasses.asdict(run)
    d["sweep"] = {k: list(v) for k, v in run.sweep.items()}
    return d


def chunk_length(run: RunConfig, steps_per_update: int, num_updates: int) -> int:
    """Updates per chunk (= per metrics row; per compiled program for fused steps).

    An explicit `log_every` is honoured (reduced to a divisor of the
    checkpoint interval, so every checkpoint falls on a chunk boundary). The
    default interval (about 50 rows per run) is only a target: the chunk is
    the largest length up to it that divides the checkpoint interval and,
    when one lies within a factor of two, the number of updates too, so the
    whole run is one compiled program. Otherwise the last, shorter chunk is a
    second program. Boundaries depend only on the config, so a resumed run
    executes exactly the same programs as an uninterrupted one.
    """
    ckpt = checkpoint_interval(run, steps_per_update)
    if run.log_every is not None:
        chunk = max(1, run.log_every // steps_per_update)
        return min(math.gcd(chunk, ckpt) if ckpt else chunk, num_updates)
    target = min(max(1, num_updates // 50), num_updates)
    fits_checkpoints = [c for c in range(target, 0, -1) if not ckpt or ckpt % c == 0]
    for c in fits_checkpoints:
        if c <= target // 2:
            break
        if num_updates % c == 0:
            return c
    return fits_checkpoints[0]


def checkpoint_interval(run: RunConfig, steps_per_update: int) -> int | None:
    """Updates between step-interval checkpoints (None: by time and at the end only)."""
    if run.checkpoint_every is None:
        return None
    return max(1, run.checkpoint_every // steps_per_update)
