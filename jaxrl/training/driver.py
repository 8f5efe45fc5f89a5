"""The training driver: compiles chunks of updates and runs them, logging between.

Data flow of one run:

    config ──validate──> algorithm (static structure)
    keys x sweep grid ──jit(vmap(init))──> state   (leading agent axis, sharded on the mesh)
    repeat:  state ──jit(scan(vmap(update)), K updates)──> state, metrics (K, agents)
             host: NaN check, metrics.jsonl, progress bar, checkpoint
    summary.json

Only the host loop is Python; each chunk of K updates is one compiled XLA
program with no host synchronisation inside. Chunk boundaries depend only on
the config (log and checkpoint intervals), so an interrupted and resumed run
executes exactly the same sequence of programs as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import pathlib
import shutil
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import algorithms
from jaxrl import config as cfg

from . import mesh as mesh_lib
from .checkpoint import Checkpointer, tree_fingerprint
from .progress import Progress

log = logging.getLogger(__name__)

# Fraction of the final updates whose episodes define `final_return_mean`.
FINAL_RETURN_WINDOW = 0.1


# `init` runs once per run, so its machine code need not be fast; on CPU, skipping
# LLVM's optimisations saves 1-2 s of its ~5 s compile (6 orthogonal initialisers,
# each a QR decomposition). Numerically it is still deterministic, but not
# bit-identical to an optimised compile (e.g. fused multiply-adds differ).
_INIT_COMPILER_OPTIONS = {"cpu": {"xla_backend_optimization_level": 0}}


class NaNLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stopped before saving that state."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How to run an algorithm (not what it learns).

    Attributes:
        num_seeds: Independent agents per sweep point, trained in one program (vmap).
        seed: Base seed; agent i of every sweep point uses `fold_in(key(seed), i)`.
        sweep: Grid over sweepable hyperparameters, e.g. `{"lr": [1e-3, 3e-4]}`.
        run_dir: Where config, metrics, checkpoints and summary go (None: nothing written).
        checkpoint_every: Save every this many environment steps per agent (None: only at the end).
        keep_checkpoints: How many recent checkpoints to keep.
        resume: Continue from the latest intact checkpoint in `run_dir`.
        log_every: Log metrics every this many environment steps per agent
            (default: about 50 points over the run).
        num_devices: Devices of the mesh (default: all).
        progress: Show a progress bar.
        tensorboard: Also write TensorBoard events (needs `tensorboardX`).
    """

    num_seeds: int = 1
    seed: int = 0
    sweep: Mapping[str, Sequence[float]] = dataclasses.field(default_factory=dict)
    run_dir: str | None = None
    checkpoint_every: int | None = None
    keep_checkpoints: int = 3
    resume: bool = False
    log_every: int | None = None
    num_devices: int | None = None
    progress: bool = True
    tensorboard: bool = False

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
        for name, values in self.sweep.items():
            cfg.check(
                name in sweepable,
                "sweep",
                name,
                f"one of the sweepable hyperparameters {list(sweepable)}",
            )
            cfg.check(len(values) > 0, f"sweep {name}", values, "a non-empty list of values")
        if self.resume:
            cfg.check(self.run_dir is not None, "resume", self.resume, "used together with run_dir")
        if self.checkpoint_every is not None:
            cfg.check(
                self.run_dir is not None,
                "checkpoint_every",
                self.checkpoint_every,
                "used together with run_dir",
            )
        return self


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: the final state, a metrics table and the summary."""

    state: Any
    metrics: list[dict[str, Any]]
    summary: dict[str, Any]
    algorithm: Any
    run_dir: pathlib.Path | None

    def returns(self) -> np.ndarray:
        """Episode-return curve, shape (log points, agents)."""
        return np.asarray([row["episode_return"] for row in self.metrics], dtype=np.float64)


def train(algorithm: str, config: Any, run: RunConfig) -> TrainResult:
    """Trains `algorithm` with `config` as described by `run`. See the module docstring."""
    wall_start = time.perf_counter()
    module = algorithms.get(algorithm)
    config = config.validate()
    run = run.validate(module.SWEEPABLE)
    algo = module.make(config)
    steps_per_update = config.num_envs * config.num_steps
    num_updates = config.num_updates
    grid = cfg.expand_grid(cfg.parse_sweep(run.sweep))
    for point in grid:  # invalid sweep values fail before the run directory is touched
        cfg.replace(config, **point).validate()
    num_agents = len(grid) * run.num_seeds
    chunk = _chunk_length(run, steps_per_update, num_updates)

    mesh = mesh_lib.make_mesh(run.num_devices)  # a bad device count fails before any I/O
    run_dir = pathlib.Path(run.run_dir) if run.run_dir else None
    is_main = jax.process_index() == 0
    resolved = {"algorithm": algorithm, "config": cfg.to_dict(config), "run": _run_dict(run)}
    if run_dir is not None:
        _prepare_run_dir(run_dir, resolved, run.resume, is_main)

    keys = jnp.stack(
        [
            jax.random.fold_in(jax.random.key(run.seed), i)
            for _ in grid
            for i in range(run.num_seeds)
        ]
    )
    hparams = jax.tree.map(
        lambda *xs: jnp.stack(xs),
        *[algo.hyperparams(**point) for point in grid for _ in range(run.num_seeds)],
    )
    abstract = jax.eval_shape(jax.vmap(algo.init), keys, hparams)
    shardings = mesh_lib.state_sharding(
        abstract, mesh, num_agents, config.num_envs, algo.ENV_FIELDS
    )
    compile_clock, train_clock = _Clock(), _Clock()
    with compile_clock:  # counted as compilation: rejax and PureJaxRL compile init too
        init_fn = (
            jax.jit(functools.partial(init_agents, algo), out_shardings=shardings)
            .lower(keys, hparams)
            .compile(compiler_options=_INIT_COMPILER_OPTIONS.get(jax.default_backend()))
        )
    state = init_fn(keys, hparams)

    host_readable, reshard = _host_transfer_fns(mesh, shardings)
    checkpointer = Checkpointer(run_dir / "checkpoints", run.keep_checkpoints) if run_dir else None
    start_update = 0
    if run.resume and checkpointer is not None:
        restored = checkpointer.restore_latest(host_readable(state))
        if restored is not None:
            start_update, state, _ = restored
            state = reshard(state)
            log.info("resumed from update %d", start_update)
        _truncate_metrics(run_dir, start_update, is_main)
        if jax.process_count() > 1:  # other processes read metrics.jsonl only once it is truncated
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("jaxrl: metrics.jsonl truncated")
    history = _read_metrics(run_dir) if (run_dir and run.resume) else []

    metrics_sharding = mesh_lib.replicated(mesh)

    update_fn = _agents_update(algo, num_agents)

    state_spec = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    programs: dict[int, Any] = {}  # chunk length -> compiled program

    def program(length: int):
        """The compiled program for a chunk of `length` updates: one `lax.scan`, no host
        sync inside. Compiled once per length; a run needs at most two lengths (the
        chunk and, when the chunk does not divide the run, the tail)."""
        if length not in programs:

            def run_updates(state):
                return jax.lax.scan(lambda s, _: update_fn(s), state, None, length=length)

            programs[length] = (
                jax.jit(
                    run_updates,
                    in_shardings=(shardings,),
                    out_shardings=(shardings, metrics_sharding),
                    donate_argnums=0,
                )
                .lower(state_spec)
                .compile()
            )
        return programs[length]

    if start_update < num_updates:
        with compile_clock:
            program(min(chunk, num_updates - start_update))

    writer = _tensorboard_writer(run_dir, run.tensorboard) if is_main else None
    progress = Progress(
        total=num_updates * steps_per_update * num_agents,
        initial=start_update * steps_per_update * num_agents,
        enabled=run.progress and is_main,
    )
    updates_run = 0  # by this process (a resumed run starts after its checkpoint)
    update = start_update
    try:
        while update < num_updates:
            length = min(chunk, num_updates - update)
            if length not in programs:  # the tail of a run the chunk does not divide
                with compile_clock:
                    program(length)
            with train_clock:
                new_state, metrics = programs[length](state)
                metrics = jax.tree.map(np.asarray, metrics)  # host sync: (length, agents)
            elapsed = train_clock.last
            _check_finite(metrics, update, steps_per_update)
            state = new_state
            update += length
            updates_run += length
            row = _log_row(
                metrics,
                update,
                steps_per_update,
                num_agents * steps_per_update * length / elapsed,
                elapsed,
            )
            history.append(row)
            if is_main and run_dir is not None:
                with open(run_dir / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(row) + "\n")
            if writer is not None:
                _write_tensorboard(writer, row)
            progress.update(num_agents * steps_per_update * length, row)
            if checkpointer is not None and _should_checkpoint(
                run, update, steps_per_update, num_updates
            ):
                checkpointer.save(
                    update, host_readable(state), {"env_steps": update * steps_per_update}
                )
    finally:
        progress.close()
        if writer is not None:
            writer.close()
        if checkpointer is not None:
            checkpointer.close()

    summary = _summary(
        algo,
        host_readable(state),
        history,
        grid=grid,
        run=run,
        num_agents=num_agents,
        steps_run=updates_run * steps_per_update * num_agents,
        train_clock=train_clock,
        compile_clock=compile_clock,
        wall_seconds=time.perf_counter() - wall_start,
    )
    if is_main and run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return TrainResult(
        state=state, metrics=history, summary=summary, algorithm=algo, run_dir=run_dir
    )


# ---------------------------------------------------------------------------- helpers
class _Clock:
    """Accumulates wall and process-CPU seconds over `with` blocks."""

    def __init__(self) -> None:
        self.wall = self.cpu = self.last = 0.0

    def __enter__(self) -> _Clock:
        self._start = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc: object) -> None:
        self.last = time.perf_counter() - self._start[0]
        self.wall += self.last
        self.cpu += time.process_time() - self._start[1]


def init_agents(algo: Any, keys: jax.Array, hparams: Any) -> Any:
    """Initial states of all agents, stacked on a leading axis.

    `lax.map` (a loop) rather than `vmap`: initialisation runs once, and on
    jaxlib 0.10.2's CPU backend a vmapped GRU initialisation deadlocks at run
    time (reproduced with recurrent PPO; unbatched and looped inits are fine).
    A loop also makes each agent's initial state bit-identical to a run with
    a single seed.
    """
    return jax.lax.map(lambda args: algo.init(*args), (keys, hparams))


def _agents_update(algo: Any, num_agents: int):
    """`update` over the leading agent axis: `vmap` for several agents, a plain call
    for one. On CPU, XLA's kernels for batched matmuls with a batch of one are
    slower than the plain ones (measured 1.4x per update for PPO), so a single
    agent's axis is dropped inside the program and restored around it."""
    if num_agents > 1:
        return jax.vmap(algo.update)

    def single(state):
        state, metrics = algo.update(jax.tree.map(lambda x: x[0], state))
        return jax.tree.map(lambda x: x[None], (state, metrics))

    return single


def _host_transfer_fns(mesh, shardings):
    """`(host_readable, reshard)` for checkpoints and the summary's fingerprint.

    In a multi-process run a sharded global array spans other processes'
    devices and cannot be fetched by this one (`np.asarray` raises), so the
    state is read (fingerprinted, saved, restored) as a fully replicated copy,
    and a restored copy is resharded to `shardings`. One process: both are
    the identity.
    """
    if jax.process_count() == 1:
        return (lambda tree: tree), (lambda tree: tree)
    return (
        jax.jit(lambda tree: tree, out_shardings=mesh_lib.replicated(mesh)),
        jax.jit(lambda tree: tree, out_shardings=shardings),
    )


def _chunk_length(run: RunConfig, steps_per_update: int, num_updates: int) -> int:
    """Updates per compiled call (= per metrics row).

    An explicit `log_every` is honoured (reduced to a divisor of the
    checkpoint interval, so every checkpoint falls on a chunk boundary). The
    default interval (about 50 rows per run) is only a target: the chunk is
    the largest length up to it that divides the checkpoint interval and,
    when one lies within a factor of two, the number of updates too, so the
    whole run is one compiled program. Otherwise the last, shorter chunk is a
    second program. Boundaries depend only on the config, so a resumed run
    executes exactly the same programs as an uninterrupted one.
    """
    ckpt = _checkpoint_interval(run, steps_per_update)
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


def _should_checkpoint(
    run: RunConfig, update: int, steps_per_update: int, num_updates: int
) -> bool:
    if update >= num_updates:
        return True
    ckpt = _checkpoint_interval(run, steps_per_update)
    return ckpt is not None and update % ckpt == 0


def _checkpoint_interval(run: RunConfig, steps_per_update: int) -> int | None:
    """Updates between checkpoints (None: only at the end)."""
    if run.checkpoint_every is None:
        return None
    return max(1, run.checkpoint_every // steps_per_update)


def _check_finite(metrics: dict[str, np.ndarray], first_update: int, steps_per_update: int) -> None:
    loss = metrics["loss"]  # (updates, agents)
    bad = ~np.isfinite(loss)
    if bad.any():
        i, agent = np.argwhere(bad)[0]
        update = first_update + int(i) + 1
        raise NaNLossError(
            f"loss is {loss[i, agent]} at update {update} (env step {update * steps_per_update} "
            f"per agent), agent {agent}; the run stopped and the last good checkpoint is kept"
        )


def _log_row(metrics, update, steps_per_update, sps, elapsed) -> dict[str, Any]:
    """One metrics.jsonl row: per-agent lists averaged over the chunk's updates."""
    row: dict[str, Any] = {
        "update": update,
        "env_steps": update * steps_per_update,
        "steps_per_second": sps,
    }
    counts = metrics["episodes"].astype(np.float64)
    for name, values in metrics.items():
        if name == "episodes":
            row[name] = values.sum(axis=0).astype(int).tolist()
        elif name.startswith("episode_"):
            total = (values * counts).sum(axis=0)
            n = counts.sum(axis=0)
            row[name] = [float(t / c) if c > 0 else None for t, c in zip(total, n, strict=True)]
        else:
            row[name] = [float(v) for v in values.mean(axis=0)]
    row["seconds"] = elapsed
    return row


def _summary(
    algo: Any,
    state: Any,
    history: list[dict[str, Any]],
    *,
    grid: list[dict[str, float]],
    run: RunConfig,
    num_agents: int,
    steps_run: int,
    train_clock: _Clock,
    compile_clock: _Clock,
    wall_seconds: float,
) -> dict[str, Any]:
    """summary.json: final returns from the logged rows (which a resumed run has exactly as
    an uninterrupted one), throughput of this process's training calls, the fingerprint."""
    final = _final_returns(history, algo.config.num_updates, num_agents)
    steps_per_update = algo.config.num_envs * algo.config.num_steps
    summary: dict[str, Any] = {
        "final_return_mean": _nan_mean(final),
        "final_return_std": _nan_std(final),
        "final_return_per_agent": [_nan_to_none(v) for v in final],
        "steps_per_second": steps_run / train_clock.wall if train_clock.wall else None,
        "compile_seconds": compile_clock.wall,
        "wall_seconds": wall_seconds,
        "train_seconds": train_clock.wall,
        # Process CPU time (all threads): steadier than wall time on a shared machine.
        "train_cpu_seconds": train_clock.cpu,
        "compile_cpu_seconds": compile_clock.cpu,
        "params_fingerprint": tree_fingerprint(state.params),
        "num_agents": num_agents,
        "num_seeds": run.num_seeds,
        "env_steps_per_agent": int(np.asarray(state.update_step).reshape(-1)[0]) * steps_per_update,
        "num_devices": len(jax.devices()) if run.num_devices is None else run.num_devices,
    }
    if len(grid) > 1:
        summary["sweep"] = [
            {
                **point,
                "final_return_mean": _nan_mean(final[g * run.num_seeds : (g + 1) * run.num_seeds]),
                "final_return_std": _nan_std(final[g * run.num_seeds : (g + 1) * run.num_seeds]),
            }
            for g, point in enumerate(grid)
        ]
    return summary


def _final_returns(history: list[dict[str, Any]], num_updates: int, num_agents: int) -> np.ndarray:
    """Per agent: mean return of the episodes that ended in the last `FINAL_RETURN_WINDOW`
    of updates (episode-weighted; whole logged rows, at least the last one)."""
    first = num_updates - max(1, int(math.ceil(num_updates * FINAL_RETURN_WINDOW)))
    rows = [r for r in history if r["update"] > first] or history[-1:]
    if not rows:
        return np.full((num_agents,), np.nan)
    counts = np.asarray([r["episodes"] for r in rows], dtype=np.float64)
    returns = np.asarray(
        [[0.0 if v is None else v for v in r["episode_return"]] for r in rows], dtype=np.float64
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        return (returns * counts).sum(0) / counts.sum(0)


def _nan_mean(x: np.ndarray) -> float | None:
    """Mean over agents that finished an episode (None if none did)."""
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else None


def _nan_std(x: np.ndarray) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.std()) if x.size else None


def _nan_to_none(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _run_dict(run: RunConfig) -> dict[str, Any]:
    d = dataclasses.asdict(run)
    d["sweep"] = {k: list(v) for k, v in run.sweep.items()}
    return d


# Fields of the run config that may differ between the original run and its resumption.
_RESUME_MAY_DIFFER = {"resume", "progress", "num_devices", "tensorboard", "run_dir"}


def _prepare_run_dir(
    run_dir: pathlib.Path, resolved: dict[str, Any], resume: bool, is_main: bool
) -> None:
    config_path = run_dir / "config.json"
    if resume:
        if not config_path.exists():
            raise cfg.ConfigError(
                f"invalid resume=True: {run_dir} has no config.json to resume from"
            )
        saved = json.loads(config_path.read_text())
        _check_same_config(saved, resolved)
        if is_main:  # written again when the resumed run finishes
            (run_dir / "summary.json").unlink(missing_ok=True)
        return
    if (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
        raise cfg.ConfigError(
            f"invalid run_dir={str(run_dir)!r}: it already holds checkpoints; pass resume=True "
            "(--resume) to continue that run, or choose another run_dir (nothing was deleted)"
        )
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("metrics.jsonl", "summary.json"):
            if (run_dir / stale).exists():
                (run_dir / stale).unlink()
        config_path.write_text(json.dumps(resolved, indent=2) + "\n")


def _check_same_config(saved: dict[str, Any], resolved: dict[str, Any]) -> None:
    diffs = []
    if saved["algorithm"] != resolved["algorithm"]:
        diffs.append(f"algorithm: {saved['algorithm']!r} != {resolved['algorithm']!r}")
    for section in ("config", "run"):
        for key, value in resolved[section].items():
            if section == "run" and key in _RESUME_MAY_DIFFER:
                continue
            old = saved[section].get(key)
            if json.loads(json.dumps(value)) != old:
                diffs.append(f"{key}: saved {old!r}, now {value!r}")
    if diffs:
        raise cfg.ConfigError(
            "cannot resume with a different config (results would not match an uninterrupted run): "
            + "; ".join(diffs)
        )


def _truncate_metrics(run_dir: pathlib.Path, update: int, is_main: bool) -> None:
    """Drops metrics rows logged after the checkpoint we resume from."""
    path = run_dir / "metrics.jsonl"
    if not is_main or not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # empty, or torn by a crash mid-write
            continue
        if row["update"] <= update:
            kept.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    shutil.move(tmp, path)


def _read_metrics(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _tensorboard_writer(run_dir: pathlib.Path | None, enabled: bool):
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


def _write_tensorboard(writer, row: dict[str, Any]) -> None:
    step = row["env_steps"]
    for name, values in row.items():
        if isinstance(values, list):
            vals = [v for v in values if v is not None]
            if vals:
                writer.add_scalar(name, float(np.mean(vals)), step)
    writer.add_scalar("steps_per_second", row["steps_per_second"], step)
