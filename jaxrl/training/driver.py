"""The training driver: one loop for every algorithm, fused or staged.

`train(algo, run)` takes an algorithm object (the contract is in `contract.py`)
and a `RunConfig` (how to run: seeds, sweep, run directory, checkpoints, devices)
and tells this story:

    agents   = seeds x sweep points, each with its key and hyperparameters
    mesh     = algo.make_mesh(...);  shardings = algo.state_sharding(...)
    state    = jit(init) of every agent, stacked on a leading agent axis
    resume   : restore the newest intact checkpoint (state, host state), or fail clearly
    repeat   : run one chunk of K updates
                 fused : one compiled program, lax.scan of K `update`s
                 staged: K x ([host prepare ->] jit collect [-> host respond ->
                         jit collect ...] -> host process -> jit learn)
               host: NaN check, metrics.jsonl, progress, TensorBoard, checkpoint,
               and a clean stop on SIGINT/SIGTERM (checkpoint first)
    summary.json (+ algo.finish(...))

Chunk boundaries depend only on the config (update count, log and checkpoint
intervals), so an interrupted and resumed run executes exactly the same
programs on the same data as an uninterrupted one and ends with the same
`params_fingerprint`. Time-based checkpoints are taken at chunk boundaries
too, so they never change what is computed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pathlib
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import config as cfg

from . import mesh as mesh_lib
from .checkpoint import Checkpointer, tree_fingerprint
from .contract import Algorithm, check_algorithm
from .progress import Progress

log = logging.getLogger(__name__)

# How a device runs its agents (`RunConfig.agent_execution`): batched or one by one.
AGENT_EXECUTIONS = ("vmap", "map")

# Fraction of the final updates whose episodes define `final_return_mean`.
FINAL_RETURN_WINDOW = 0.1

# `init` runs once per run, so its machine code need not be fast; on CPU, skipping
# LLVM's optimisations saves 1-2 s of its ~5 s compile (6 orthogonal initialisers,
# each a QR decomposition). Numerically it is still deterministic, but not
# bit-identical to an optimised compile (e.g. fused multiply-adds differ).
_INIT_COMPILER_OPTIONS = {"cpu": {"xla_backend_optimization_level": 0}}


class NaNLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stopped before saving that state."""


class TrainingInterrupted(RuntimeError):
    """SIGINT or SIGTERM stopped the run after a chunk; a checkpoint was written first."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


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
            products gain nothing (SAC's 64-64 MLPs: 15% less time per update).
            On accelerators, and for large per-agent batches (PPO), keep "vmap".
            Staged algorithms (language models) accept only "vmap".
        progress: Show a progress bar.
        tensorboard: Also write TensorBoard events (needs `tensorboardX`).
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


@dataclasses.dataclass(frozen=True)
class Agents:
    """The seeds x sweep points of a run, in the order of the state's agent axis."""

    grid: list[dict[str, float]]
    num_seeds: int
    keys: jax.Array  # (num_agents,) typed PRNG keys
    hparams: Any  # the algorithm's HyperParams, stacked (num_agents, ...)

    @property
    def num_agents(self) -> int:
        return len(self.grid) * self.num_seeds


def make_agents(algo: Algorithm, run: RunConfig) -> Agents:
    """Keys and hyperparameters of every agent. Invalid sweep values fail here,
    before anything is written (`algo.hyperparams` validates each point)."""
    grid = cfg.expand_grid(cfg.parse_sweep(run.sweep))
    points = [algo.hyperparams(**point) for point in grid]
    keys = jnp.stack(
        [
            jax.random.fold_in(jax.random.key(run.seed), i)
            for _ in grid
            for i in range(run.num_seeds)
        ]
    )
    hparams = jax.tree.map(
        lambda *xs: jnp.stack(xs), *[hp for hp in points for _ in range(run.num_seeds)]
    )
    return Agents(grid=grid, num_seeds=run.num_seeds, keys=keys, hparams=hparams)


def initial_state(
    algo: Algorithm, agents: Agents, mesh: jax.sharding.Mesh, params: Any = None
) -> tuple[Any, Any]:
    """`(state, shardings)`: every agent's initial state, stacked and placed on `mesh`.

    Used by the driver and by `jaxrl.evaluation.load_run` (as the restore target).
    """
    abstract = jax.eval_shape(
        lambda k, h, p: init_agents(algo, k, h, p), agents.keys, agents.hparams, params
    )
    shardings = algo.state_sharding(abstract, mesh, agents.num_agents)
    on_one_device = _init_on_one_device(mesh)
    init_fn = (
        jax.jit(
            lambda k, h, p: init_agents(algo, k, h, p),
            out_shardings=None if on_one_device else shardings,
        )
        .lower(agents.keys, agents.hparams, params)
        .compile(compiler_options=_INIT_COMPILER_OPTIONS.get(jax.default_backend()))
    )
    state = init_fn(agents.keys, agents.hparams, params)
    return (jax.device_put(state, shardings) if on_one_device else state), shardings


def _init_on_one_device(mesh: jax.sharding.Mesh) -> bool:
    """Whether `initial_state` computes on one device and then places the state: on
    several CPU devices of one process.

    There, jaxlib 0.10.2's LAPACK QR (every orthogonal initialiser) deadlocks when the
    devices run their init at once: each call splits its batch into tasks on XLA's
    CPU thread pool and blocks until they finish, from a thread of that same pool,
    until no thread is left to run them (SAC and TD3 on two devices hung;
    benchmarks/README.md, "SAC and TD3 hung on several CPU devices"). CPU devices
    share the host's memory, so one of them holds the whole state as cheaply.
    """
    return jax.default_backend() == "cpu" and mesh.devices.size > 1 and jax.process_count() == 1


def init_agents(algo: Algorithm, keys: jax.Array, hparams: Any, params: Any = None) -> Any:
    """Initial states of all agents, stacked on a leading axis.

    `lax.map` (a loop) rather than `vmap`: initialisation runs once, and on
    jaxlib 0.10.2's CPU backend a vmapped GRU initialisation deadlocks at run
    time (reproduced with recurrent PPO; unbatched and looped inits are fine).
    A loop also makes each agent's initial state bit-identical to a run with
    a single seed. Warm-start `params` are shared by every agent.
    """
    return jax.lax.map(lambda args: algo.init(*args, params), (keys, hparams))


# ---------------------------------------------------------------------------- the story
def train(algo: Algorithm, run: RunConfig, *, init_params: Any = None) -> TrainResult:
    """Trains `algo` as `run` says; see the module docstring for the story.

    `init_params` warm-starts every agent from given parameters (default:
    `algo.load_params()`, e.g. a language model's `--model` directory).
    """
    wall_start = time.perf_counter()
    check_algorithm(algo)
    run = run.validate(algo.sweepable)
    cfg.check(
        not (algo.staged and run.agent_execution != "vmap"),
        "agent_execution",
        run.agent_execution,
        f"'vmap' for {algo.name}, a staged algorithm (only fused algorithms map their agents)",
    )
    agents = make_agents(algo, run)
    chunk = _chunk_length(run, algo.steps_per_update, algo.num_updates)
    mesh = algo.make_mesh(run.num_devices)  # a bad device count fails before any I/O
    run_dir = pathlib.Path(run.run_dir) if run.run_dir else None
    is_main = jax.process_index() == 0
    resolved = {"algorithm": algo.name, "config": cfg.to_dict(algo.config), "run": _run_dict(run)}
    if run_dir is not None:
        _prepare_run_dir(run_dir, resolved, run, algo, is_main)

    compile_clock, train_clock = _Clock(), _Clock()
    with compile_clock:  # counted as compilation: rejax and PureJaxRL compile init too
        params = init_params if init_params is not None else algo.load_params()
        state, shardings = initial_state(algo, agents, mesh, params)
    host_state = algo.init_host_state(run.seed, agents.num_agents)

    checkpoints = _Checkpoints(algo, run, run_dir, state) if run_dir is not None else None
    start_update, history = 0, []
    if run.resume:
        start_update, state, host_state = checkpoints.restore(state)
        history = _resume_metrics(run_dir, start_update, is_main)

    if algo.staged:
        stepper = _StagedStepper(algo, agents.num_agents, mesh, shardings, compile_clock)
    else:
        stepper = _FusedStepper(
            algo, agents.num_agents, mesh, shardings, compile_clock, run.agent_execution
        )
    if start_update < algo.num_updates and not algo.staged:
        stepper.compile(state, min(chunk, algo.num_updates - start_update))

    loop = _Loop(algo, run, agents, run_dir, is_main, checkpoints, stepper)
    state, host_state, updates_run, stopped_early_at = loop.run_chunks(
        state, host_state, start_update, chunk, history, train_clock, compile_clock
    )

    summary = _summary(
        algo,
        state,
        history,
        agents=agents,
        run=run,
        final_update=start_update + updates_run,
        steps_run=updates_run * algo.steps_per_update * agents.num_agents,
        train_clock=train_clock,
        compile_clock=compile_clock,
    )
    if stopped_early_at is not None:
        summary["stopped_early_at_update"] = stopped_early_at
    summary.update(algo.finish(state, run_dir) or {})
    summary["wall_seconds"] = time.perf_counter() - wall_start
    if is_main and run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return TrainResult(
        state=state, metrics=history, summary=summary, algorithm=algo, run_dir=run_dir
    )


# ---------------------------------------------------------------------------- the loop
class _Loop:
    """The host loop over chunks: run, check, log, checkpoint, stop cleanly on a signal."""

    def __init__(self, algo, run, agents, run_dir, is_main, checkpoints, stepper):
        self.algo, self.run, self.agents = algo, run, agents
        self.run_dir, self.is_main = run_dir, is_main
        self.checkpoints, self.stepper = checkpoints, stepper
        self.multi_process = jax.process_count() > 1

    def run_chunks(self, state, host_state, update, chunk, history, clock, compile_clock):
        """Runs chunks from `update` to the end (or until `early_stop` ends the run);
        appends their rows to `history`. `clock` times the chunks, less any compilation
        inside them (`compile_clock`). Returns `(state, host_state, updates run, the
        update at which early_stop ended the run or None)`."""
        algo, n = self.algo, self.agents.num_agents
        spu = algo.steps_per_update
        writer = _tensorboard_writer(self.run_dir, self.run.tensorboard) if self.is_main else None
        progress = Progress(
            total=algo.num_updates * spu,
            initial=update * spu,
            enabled=self.run.progress and self.is_main,
            unit=algo.progress_unit,
            num_agents=n,
        )
        updates_run, stopped_early_at = 0, None
        if update > 0:  # a resumed run that its algorithm had already ended trains no more
            state, done = algo.early_stop(state)
            stopped_early_at = update if done else None
        try:
            with _StopSignals() as stop:
                while update < algo.num_updates and stopped_early_at is None:
                    length = min(chunk, algo.num_updates - update)
                    compiled = compile_clock.wall, compile_clock.cpu
                    with clock:
                        state, host_state, metrics = self.stepper.run(state, host_state, length)
                    clock.discount(
                        compile_clock.wall - compiled[0], compile_clock.cpu - compiled[1]
                    )
                    _check_finite(metrics, update, algo)
                    update += length
                    updates_run += length
                    row = _log_row(metrics, update, algo, n * spu * length / clock.last)
                    row["seconds"] = clock.last
                    if "tokens" in row:
                        row["tokens_per_second"] = sum(row["tokens"]) / clock.last
                    history.append(row)
                    self._write_row(row, writer)
                    progress.update(spu * length, row)
                    state, done = algo.early_stop(state)
                    if done:
                        stopped_early_at = update
                    finished = update >= algo.num_updates or done
                    due = self.checkpoints is not None and self.checkpoints.due(update)
                    due, signum = _agreed(due, stop.signum, self.multi_process)
                    if self.checkpoints is not None and (finished or signum or due):
                        self.checkpoints.save(update, state, host_state)
                    if signum and not finished:
                        raise TrainingInterrupted(self._stop_message(signum, update), signum)
        finally:
            progress.close()
            if writer is not None:
                writer.close()
            if self.checkpoints is not None:
                self.checkpoints.close()
        return state, host_state, updates_run, stopped_early_at

    def _write_row(self, row: dict[str, Any], writer: Any) -> None:
        if self.is_main and self.run_dir is not None:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if writer is not None:
            _write_tensorboard(writer, row, self.algo.progress_unit)

    def _stop_message(self, signum: int, update: int) -> str:
        name = signal.Signals(signum).name
        where = f"update {update} of {self.algo.num_updates}"
        if self.run_dir is None:
            return f"{name} received: stopped at {where} (no run_dir, so nothing was saved)"
        return (
            f"{name} received: stopped at {where} after writing a checkpoint; continue with "
            f"`jaxrl train {self.algo.name} --run-dir {self.run_dir} --resume`"
        )


def _agreed(due: bool, signum: int | None, multi_process: bool) -> tuple[bool, int | None]:
    """`(checkpoint now, stop signal)` as every process of the run will act on them.

    A checkpoint save is collective, so in a multi-process run all processes must
    decide alike at each chunk boundary: process 0's clock decides time-based
    checkpoints (the step interval is the same everywhere), and a signal to any
    process (a scheduler or a preempted host may signal only one) stops them all.
    One small host all-gather per chunk, only when there are several processes.
    """
    if not multi_process:
        return due, signum
    from jax.experimental import multihost_utils

    flags = np.asarray(
        multihost_utils.process_allgather(np.asarray([int(due), signum or 0], np.int32))
    ).reshape(-1, 2)
    return bool(flags[0, 0]), int(flags[:, 1].max()) or None


class _StopSignals:
    """Turns the first SIGINT/SIGTERM into a request to stop after the current chunk.

    Schedulers and preemptible TPU VMs send SIGTERM; Ctrl-C sends SIGINT. A second
    signal stops at once (KeyboardInterrupt). Outside the main thread (where Python
    cannot install handlers) signals keep their default behaviour.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping now")
        self.signum = signum
        print(
            f"\njaxrl: {signal.Signals(signum).name} received, stopping after the current "
            "chunk (send it again to stop now)",
            file=sys.stderr,
            flush=True,
        )

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------------------- steps
def agents_fn(fn: Callable, num_agents: int) -> Callable:
    """`fn` over the leading agent axis of all its arguments: `vmap` for several
    agents, a plain call for one. On CPU, XLA's kernels for batched matmuls with a
    batch of one are slower than the plain ones (measured 1.4x per update for PPO),
    so a single agent's axis is dropped inside the program and restored around it."""
    if num_agents > 1:
        return jax.vmap(fn)

    def single(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    return single


def agents_update(algo: Algorithm, num_agents: int) -> Callable:
    """The fused `update` over the agent axis (also used by the benchmark workers)."""
    return agents_fn(algo.update, num_agents)


def scan_updates(
    algo: Algorithm, num_agents: int, length: int, execution: str = "vmap"
) -> Callable:
    """`length` fused updates of every agent; returns `(state, metrics)` with metrics
    `(length, agents, ...)`.

    `execution="vmap"`: one `lax.scan` whose body is the update vmapped over agents.
    `execution="map"`: `lax.map` over agents of each agent's own `lax.scan` of
    `length` updates (`RunConfig.agent_execution`): every agent runs exactly the
    program of a one-agent run, and its `lax.cond`s stay branches (under `vmap` a
    per-agent predicate turns them into selects that compute both sides).

    A single agent's axis is dropped once around the whole scan, not inside every
    update: dropping and restoring it per update (`agents_update` in the scan body)
    copies the loop-carried state at every step, replay buffer included, which cost
    DQN on CartPole 270 instead of 121 microseconds per update (2.2x) on one seed."""

    def one_agent(state):
        return jax.lax.scan(lambda s, _: algo.update(s), state, None, length=length)

    if num_agents == 1:

        def run(state):
            one, metrics = one_agent(jax.tree.map(lambda x: x[0], state))
            return jax.tree.map(lambda x: x[None], one), jax.tree.map(lambda x: x[:, None], metrics)

        return run
    if execution == "map":

        def run(state):
            state, metrics = jax.lax.map(one_agent, state)  # metrics (agents, length, ...)
            return state, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics)

        return run
    update = agents_update(algo, num_agents)
    return lambda state: jax.lax.scan(lambda s, _: update(s), state, None, length=length)


def _agents_program(
    algo: Algorithm,
    num_agents: int,
    length: int,
    execution: str,
    mesh: jax.sharding.Mesh,
    shardings: Any,
) -> Callable:
    """`scan_updates` as the function to jit under `mesh`.

    A `lax.map` over an agent axis sharded over the devices would make XLA gather
    the agents (the loop's dynamic slices cross the shards), so with
    `execution="map"` and agents sharded, each device maps over its own agents
    inside `shard_map`; the agents never communicate, so nothing else changes.
    Otherwise (one device, or agents not sharded) XLA partitions the loop itself.
    """
    specs = jax.tree.map(lambda s: s.spec, shardings)
    agents_sharded = mesh.devices.size > 1 and all(
        len(spec) > 0 and spec[0] == mesh_lib.DATA_AXIS for spec in jax.tree.leaves(specs)
    )
    if execution != "map" or num_agents == 1 or not agents_sharded:
        return scan_updates(algo, num_agents, length, execution)
    per_device = scan_updates(algo, num_agents // mesh.devices.size, length, execution)
    metrics_spec = jax.sharding.PartitionSpec(None, mesh_lib.DATA_AXIS)  # (length, agents)
    # check_vma=False: the per-device program has no collectives, so shard_map's
    # tracking of which values vary over devices only gets in the way (it would make
    # every algorithm's `lax.cond` cast constant branch outputs to "varying").
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(specs,), out_specs=(specs, metrics_spec), check_vma=False
    )


def _spec(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _to_host(metrics: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in metrics.items()}


def _shapes(tree: Any) -> Any:
    """The (shape, dtype) of every leaf of a host pytree, as a comparable pytree."""
    return jax.tree.map(lambda x: (tuple(np.shape(x)), str(np.asarray(x).dtype)), tree)


class _FusedStepper:
    """K `update`s as one compiled program (`lax.scan`), one program per chunk length."""

    def __init__(self, algo, num_agents, mesh, shardings, compile_clock, execution):
        self.algo, self.num_agents, self.mesh = algo, num_agents, mesh
        self.shardings, self.replicated = shardings, mesh_lib.replicated(mesh)
        self.compile_clock, self.execution = compile_clock, execution
        self.programs: dict[int, Any] = {}

    def compile(self, state: Any, length: int) -> None:
        """Compiles the program for chunks of `length` updates. A run needs at most two
        lengths (the chunk and, when the chunk does not divide the run, the tail)."""
        if length in self.programs:
            return

        with self.compile_clock:
            self.programs[length] = (
                jax.jit(
                    _agents_program(
                        self.algo,
                        self.num_agents,
                        length,
                        self.execution,
                        self.mesh,
                        self.shardings,
                    ),
                    in_shardings=(self.shardings,),
                    out_shardings=(self.shardings, self.replicated),
                    donate_argnums=0,
                )
                .lower(_spec(state))
                .compile()
            )

    def run(self, state, host_state, length):
        self.compile(state, length)  # the tail of a run the chunk does not divide
        state, metrics = self.programs[length](state)
        return state, host_state, _to_host(metrics)  # host sync: (length, agents)


class _StagedStepper:
    """K x ([host `prepare` ->] jit `collect` [-> host `respond` -> jit `collect` ...] ->
    host `process` -> jit `learn`); each jitted phase compiled once, for the shapes of
    the first inputs and batch (`prepare`, `respond` and `process` must keep them fixed).
    With `respond`, one update runs rounds of `collect` until `respond` returns None
    (at most `algo.max_rounds`): multi-turn episodes, all inside the update."""

    def __init__(self, algo, num_agents, mesh, shardings, compile_clock):
        self.algo, self.num_agents, self.mesh = algo, num_agents, mesh
        self.shardings, self.replicated = shardings, mesh_lib.replicated(mesh)
        self.compile_clock = compile_clock
        self.has_collect = type(algo).collect is not Algorithm.collect
        self.has_prepare = type(algo).prepare is not Algorithm.prepare
        self.has_respond = type(algo).respond is not Algorithm.respond
        self.collect_fn = self.learn_fn = self.batch_shardings = self.input_shardings = None
        self.input_shapes = None

    def _compile_collect(self, state: Any, inputs: Any) -> None:
        """`collect(state)`, or `collect(state, inputs)` after a `prepare`."""
        with self.compile_clock, jax.set_mesh(self.mesh):
            in_shardings, specs = (self.shardings,), (_spec(state),)
            if self.has_prepare:
                self.input_shapes = _shapes(inputs)
                self.input_shardings, input_spec = self._host_batch_spec(inputs)
                in_shardings, specs = (*in_shardings, self.input_shardings), (*specs, input_spec)
            self.collect_fn = (
                jax.jit(
                    agents_fn(self.algo.collect, self.num_agents),
                    in_shardings=in_shardings,
                    out_shardings=(self.shardings, self.replicated),
                    donate_argnums=0,
                )
                .lower(*specs)
                .compile()
            )

    def _host_batch_spec(self, batch: Any) -> tuple[Any, Any]:
        """Shardings (`algo.batch_sharding`) and sharded abstract values of a host batch."""
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch)
        shardings = self.algo.batch_sharding(abstract, self.mesh, self.num_agents)
        spec = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
        )
        return shardings, spec

    def _compile_learn(self, state: Any, batch: Any) -> None:
        with self.compile_clock, jax.set_mesh(self.mesh):
            self.batch_shardings, batch_spec = self._host_batch_spec(batch)
            self.learn_fn = (
                jax.jit(
                    agents_fn(self.algo.learn, self.num_agents),
                    in_shardings=(self.shardings, self.batch_shardings),
                    out_shardings=(self.shardings, self.replicated),
                    donate_argnums=0,
                )
                .lower(_spec(state), batch_spec)
                .compile()
            )

    def _collect(self, state: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any]:
        """One `collect` round: `(state, collected)`, `collected` on the host."""
        if self.collect_fn is None:
            self._compile_collect(state, *inputs)
        if inputs:
            inputs = (jax.device_put(inputs[0], self.input_shardings),)
        with jax.set_mesh(self.mesh):
            state, collected = self.collect_fn(state, *inputs)
        return state, jax.tree.map(np.asarray, collected)  # host sync

    def _rounds(self, state: Any, collected: Any, host_state: Any) -> tuple[Any, Any, Any]:
        """`respond` -> `collect` rounds until `respond` returns None; the last output."""
        algo, rounds = self.algo, 1
        while True:
            inputs, host_state = algo.respond(collected, host_state)
            if inputs is None:
                return state, collected, host_state
            if rounds >= algo.max_rounds:
                raise RuntimeError(
                    f"{type(algo).__name__}.respond asked for round {rounds + 1} of an update "
                    f"whose max_rounds is {algo.max_rounds}; it must return None by then"
                )
            if _shapes(inputs) != self.input_shapes:
                raise ValueError(
                    f"{type(algo).__name__}.respond returned inputs {_shapes(inputs)}, but "
                    f"collect was compiled for prepare's {self.input_shapes}: every round "
                    "must keep the same shapes and dtypes"
                )
            state, collected = self._collect(state, (inputs,))
            rounds += 1

    def run(self, state, host_state, length):
        rows = []
        for _ in range(length):
            collected, inputs = None, ()
            if self.has_prepare:
                inputs, host_state = self.algo.prepare(host_state)
                inputs = (inputs,)
            if self.has_collect:
                state, collected = self._collect(state, inputs)
                if self.has_respond:
                    state, collected, host_state = self._rounds(state, collected, host_state)
            batch, host_state, host_metrics = self.algo.process(collected, host_state)
            if self.learn_fn is None:
                self._compile_learn(state, batch)
            with jax.set_mesh(self.mesh):
                state, metrics = self.learn_fn(state, jax.device_put(batch, self.batch_shardings))
            row = _to_host(metrics)
            for name, value in host_metrics.items():
                row[name] = np.broadcast_to(np.asarray(value, np.float64), (self.num_agents,))
            rows.append(row)
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # (length, agents)
        return state, host_state, stacked


# ---------------------------------------------------------------------------- checkpoints
class _Checkpoints:
    """When and what to checkpoint: the state minus `algo.checkpoint_exclude`, sharded as
    it is (no gather), plus the host state and progress in the JSON record.

    The excluded fields are frozen or derivable (`init` rebuilds them); their
    fingerprint is recorded so that a resume whose rebuilt frozen parts differ (a
    changed `--model`, say) fails instead of mixing two models.
    """

    def __init__(self, algo: Algorithm, run: RunConfig, run_dir: pathlib.Path, state: Any):
        self.algo, self.run = algo, run
        self.interval = _checkpoint_interval(run, algo.steps_per_update)
        self.checkpointer = Checkpointer(run_dir / "checkpoints", run.keep_checkpoints)
        self.frozen_fingerprint = tree_fingerprint(self._frozen(state))
        self.last_save = time.monotonic()

    def _saved(self, state: Any) -> dict[str, Any]:
        return checkpointed_fields(self.algo, state)

    def _frozen(self, state: Any) -> dict[str, Any]:
        return {name: getattr(state, name) for name in self.algo.checkpoint_exclude}

    def due(self, update: int) -> bool:
        """At the configured step interval, or when `checkpoint_minutes` have passed."""
        if self.interval is not None and update % self.interval == 0:
            return True
        minutes = self.run.checkpoint_minutes
        return minutes is not None and time.monotonic() - self.last_save >= 60 * minutes

    def save(self, update: int, state: Any, host_state: Any) -> None:
        meta = {
            self.algo.progress_unit: update * self.algo.steps_per_update,
            "host_state": host_state,
            "frozen_fingerprint": self.frozen_fingerprint,
        }
        self.checkpointer.save(update, self._saved(state), meta)
        self.last_save = time.monotonic()

    def restore(self, fresh_state: Any) -> tuple[int, Any, Any]:
        """`(update, state, host_state)` from the newest intact checkpoint; a
        `ConfigError` naming what was found when there is none (nothing overwritten)."""
        found = self.checkpointer.steps()
        restored = self.checkpointer.restore_latest(self._saved(fresh_state))
        directory = self.checkpointer.directory
        if restored is None:
            self.close()  # orbax's threads must not outlive the error
            what = (
                f"{len(found)} checkpoint(s), all damaged ({found})"
                if found
                else "no checkpoint (the run was stopped before its first one)"
            )
            raise cfg.ConfigError(
                f"invalid resume=True: {directory} holds {what}; nothing was changed. "
                "Start over in the same directory with fresh=True (--fresh), or choose "
                "another run_dir"
            )
        update, saved, meta = restored
        if meta.get("frozen_fingerprint", self.frozen_fingerprint) != self.frozen_fingerprint:
            self.close()
            raise cfg.ConfigError(
                f"invalid resume=True: the frozen parts of the state "
                f"({list(self.algo.checkpoint_exclude)}) differ from the ones checkpoint "
                f"{update} was trained with (was the model changed?); nothing was changed"
            )
        skipped = [s for s in found if s > update]
        note = f" (skipped damaged {skipped})" if skipped else ""
        log.info("resumed from update %d%s", update, note)
        print(f"jaxrl: resuming from update {update}{note}", file=sys.stderr, flush=True)
        return update, fresh_state.replace(**saved), meta.get("host_state")

    def close(self) -> None:
        self.checkpointer.close()


def checkpointed_fields(algo: Algorithm, state: Any) -> dict[str, Any]:
    """The top-level state fields a checkpoint holds: all but `algo.checkpoint_exclude`."""
    return {
        f.name: getattr(state, f.name)
        for f in dataclasses.fields(state)
        if f.name not in algo.checkpoint_exclude
    }


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

    def discount(self, wall: float, cpu: float) -> None:
        """Removes time another clock counted inside this clock's last block."""
        self.wall -= wall
        self.cpu -= cpu
        self.last -= wall


def _chunk_length(run: RunConfig, steps_per_update: int, num_updates: int) -> int:
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


def _checkpoint_interval(run: RunConfig, steps_per_update: int) -> int | None:
    """Updates between step-interval checkpoints (None: by time and at the end only)."""
    if run.checkpoint_every is None:
        return None
    return max(1, run.checkpoint_every // steps_per_update)


def _check_finite(metrics: dict[str, np.ndarray], first_update: int, algo: Algorithm) -> None:
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


def _log_row(metrics: dict[str, np.ndarray], update: int, algo: Algorithm, sps: float):
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


def _summary(
    algo, state, history, *, agents, run, final_update, steps_run, train_clock, compile_clock
):
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
    if history and "episode_return" in history[-1]:
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
    out, and reported as None in `final_return_per_agent`). With a sweep, the same
    fields per sweep point are in `sweep`.
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
        **mean_std(final, "final_return"),
        "final_return_per_agent": [None if math.isnan(v) else float(v) for v in final],
        "final_return_window": [start, rows[-1]["update"]],
    }
    if len(agents.grid) > 1:
        s = agents.num_seeds
        out["sweep"] = [
            {**point, **mean_std(final[g * s : (g + 1) * s], "final_return")}
            for g, point in enumerate(agents.grid)
        ]
    return out


def mean_std(values: np.ndarray, prefix: str) -> dict[str, Any]:
    """`{prefix}_mean`, `_std` over the finite (per-agent) entries, and `_agents`: how many."""
    finite = values[~np.isnan(values)]
    return {
        f"{prefix}_mean": float(finite.mean()) if finite.size else None,
        f"{prefix}_std": float(finite.std()) if finite.size else None,
        f"{prefix}_agents": int(finite.size),
    }


def _run_dict(run: RunConfig) -> dict[str, Any]:
    d = dataclasses.asdict(run)
    d["sweep"] = {k: list(v) for k, v in run.sweep.items()}
    return d


# Fields of the run config that may differ between the original run and its resumption.
_RESUME_MAY_DIFFER = {
    "resume",
    "fresh",
    "reschedule",
    "progress",
    "num_devices",
    "agent_execution",
    "tensorboard",
    "run_dir",
    "checkpoint_minutes",
    "keep_checkpoints",
}


def _prepare_run_dir(
    run_dir: pathlib.Path, resolved: dict[str, Any], run: RunConfig, algo: Algorithm, is_main: bool
) -> None:
    """Checks the run directory against `run` before anything in it is changed."""
    config_path = run_dir / "config.json"
    checkpoints = run_dir / "checkpoints"
    if run.resume:
        if not config_path.exists():
            raise cfg.ConfigError(
                f"invalid resume=True: {run_dir} has no config.json to resume from"
            )
        saved = json.loads(config_path.read_text())
        _check_same_run(saved, resolved)
        algo.check_resume(saved["config"], reschedule=run.reschedule)
        if is_main and saved != {**resolved, "run": saved["run"]}:  # e.g. an extended run
            config_path.write_text(json.dumps({**resolved, "run": saved["run"]}, indent=2) + "\n")
        return
    if checkpoints.exists() and any(checkpoints.iterdir()) and not run.fresh:
        raise cfg.ConfigError(
            f"invalid run_dir={str(run_dir)!r}: it already holds checkpoints; pass resume=True "
            "(--resume) to continue that run, fresh=True (--fresh) to start it over, or "
            "choose another run_dir (nothing was deleted)"
        )
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if run.fresh and checkpoints.exists():
            shutil.rmtree(checkpoints)
        for stale in ("metrics.jsonl", "summary.json", "eval.json"):
            (run_dir / stale).unlink(missing_ok=True)
        config_path.write_text(json.dumps(resolved, indent=2) + "\n")
    if jax.process_count() > 1:  # other processes must not see the old checkpoints
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("jaxrl: run directory prepared")


def _check_same_run(saved: dict[str, Any], resolved: dict[str, Any]) -> None:
    """The run section of config.json must match (but for `_RESUME_MAY_DIFFER`)."""
    diffs = cfg.field_diffs(saved["run"], resolved["run"], ignore=_RESUME_MAY_DIFFER)
    if saved["algorithm"] != resolved["algorithm"]:
        diffs.insert(0, f"algorithm: {saved['algorithm']!r} != {resolved['algorithm']!r}")
    if diffs:
        raise cfg.ConfigError(
            "cannot resume with a different config (results would not match an uninterrupted run): "
            + "; ".join(diffs)
        )


def _resume_metrics(run_dir: pathlib.Path, update: int, is_main: bool) -> list[dict[str, Any]]:
    """The metrics rows up to the checkpoint we resume from; later rows are dropped
    from metrics.jsonl (they will be logged again), and summary.json is removed."""
    path = run_dir / "metrics.jsonl"
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # empty, or torn by a crash mid-write
                continue
            if row["update"] <= update:
                kept.append(row)
    if is_main:
        (run_dir / "summary.json").unlink(missing_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
        shutil.move(tmp, path)
    if jax.process_count() > 1:  # other processes read metrics.jsonl only once it is truncated
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("jaxrl: metrics.jsonl truncated")
    return kept


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


def _write_tensorboard(writer, row: dict[str, Any], progress_unit: str) -> None:
    step = row[progress_unit]
    for name, values in row.items():
        if isinstance(values, list):
            vals = [v for v in values if v is not None]
            if vals:
                writer.add_scalar(name, float(np.mean(vals)), step)
    writer.add_scalar("steps_per_second", row["steps_per_second"], step)
