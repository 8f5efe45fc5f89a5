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

import contextlib
import json
import pathlib
import signal
import sys
import threading
import time
from typing import Any

import jax
import numpy as np

from jaxrl import config as cfg

from .agents import initial_state, make_agents
from .async_stages import AsyncStagedStepper
from .contract import Algorithm, check_algorithm
from .progress import Clock, Progress
from .run_config import RunConfig, TrainResult, chunk_length, run_dict
from .run_dir import Checkpoints, lock_run_dir, prepare_run_dir, resume_metrics, write_json
from .steppers import check_agent_execution, make_stepper
from .summary import check_finite, log_row, run_summary, tensorboard_writer, write_tensorboard


class TrainingInterrupted(RuntimeError):
    """SIGINT or SIGTERM stopped the run after a chunk; a checkpoint was written first."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


# ---------------------------------------------------------------------------- the story
def train(algo: Algorithm, run: RunConfig, *, init_params: Any = None) -> TrainResult:
    """Trains `algo` as `run` says; see the module docstring for the story.

    `init_params` warm-starts every agent from given parameters (default:
    `algo.load_params()`, e.g. a language model's `--model` directory).
    """
    wall_start = time.perf_counter()
    check_algorithm(algo)
    run = run.validate(algo.sweepable)
    check_agent_execution(algo, run)
    agents = make_agents(algo, run)
    chunk = chunk_length(run, algo.steps_per_update, algo.num_updates)
    mesh = algo.make_mesh(run.num_devices)  # a bad device count fails before any I/O
    run_dir = pathlib.Path(run.run_dir) if run.run_dir else None
    is_main = jax.process_index() == 0
    resolved = {"algorithm": algo.name, "config": cfg.to_dict(algo.config), "run": run_dict(run)}
    # From here on a first SIGINT/SIGTERM asks the run to stop at the next safe point
    # (the end of a chunk, or before the first one: compilation is never interrupted, as
    # a KeyboardInterrupt inside XLA's compiler left the process to crash at exit).
    with _StopSignals() as stop, _run_dir_lock(run_dir, run, is_main):
        if run_dir is not None:
            prepare_run_dir(run_dir, resolved, run, algo, is_main)
        return _train_locked(
            algo, run, agents, chunk, mesh, run_dir, is_main, init_params, wall_start, stop
        )


def _run_dir_lock(
    run_dir: pathlib.Path | None, run: RunConfig, is_main: bool
) -> contextlib.AbstractContextManager:
    """The main process locks the run directory for the run's life (`RunDirLock`); the
    other processes of a multi-process run write nothing there and do not lock, but
    learn whether the main process got the lock, so that all of them stop together."""
    if run_dir is None:
        return contextlib.nullcontext()
    error, lock = None, None
    if is_main:
        try:
            lock = lock_run_dir(run_dir, run)
        except cfg.ConfigError as err:
            error = err
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        locked = multihost_utils.broadcast_one_to_all(np.int32(error is None))
        if error is None and not int(locked):
            error = cfg.ConfigError(
                f"invalid run_dir={str(run_dir)!r}: the main process (0) refused it (see its error)"
            )
    if error is not None:
        raise error
    return lock or contextlib.nullcontext()


def _train_locked(
    algo, run, agents, chunk, mesh, run_dir, is_main, init_params, wall_start, stop
) -> TrainResult:
    """The run itself, once the run directory (if any) is locked and checked."""
    compile_clock, train_clock = Clock(), Clock()
    with compile_clock:  # counted as compilation: rejax and PureJaxRL compile init too
        params = init_params if init_params is not None else algo.load_params()
        state, shardings = initial_state(algo, agents, mesh, params, run.check_memory)
    host_state = algo.init_host_state(run.seed, agents.num_agents)

    checkpoints = Checkpoints(algo, run, run_dir, state) if run_dir is not None else None
    start_update, history = 0, []
    if run.resume:
        start_update, state, host_state = checkpoints.restore(state)
        history = resume_metrics(run_dir, start_update, is_main)

    if algo.async_staleness:  # the sampler on its own devices (async_stages.py)
        stepper = AsyncStagedStepper(
            algo, agents.num_agents, mesh, shardings, compile_clock, run.num_devices,
            run.check_memory,
        )  # fmt: skip
    else:
        stepper = make_stepper(
            algo,
            agents.num_agents,
            mesh,
            shardings,
            compile_clock,
            run.agent_execution,
            run.check_memory,
        )
    if start_update < algo.num_updates and not algo.staged:
        stepper.compile(state, min(chunk, algo.num_updates - start_update))

    loop = _Loop(algo, run, agents, run_dir, is_main, checkpoints, stepper, stop)
    state, host_state, updates_run, stopped_early_at = loop.run_chunks(
        state, host_state, start_update, chunk, history, train_clock, compile_clock
    )

    summary = run_summary(
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
        write_json(run_dir / "summary.json", summary)
    return TrainResult(
        state=state, metrics=history, summary=summary, algorithm=algo, run_dir=run_dir
    )


# ---------------------------------------------------------------------------- the loop
class _Loop:
    """The host loop over chunks: run, check, log, checkpoint, stop cleanly on a signal."""

    def __init__(self, algo, run, agents, run_dir, is_main, checkpoints, stepper, stop):
        self.algo, self.run, self.agents = algo, run, agents
        self.run_dir, self.is_main = run_dir, is_main
        self.checkpoints, self.stepper, self.stop = checkpoints, stepper, stop
        self.multi_process = jax.process_count() > 1

    def run_chunks(self, state, host_state, update, chunk, history, clock, compile_clock):
        """Runs chunks from `update` to the end (or until `early_stop` ends the run);
        appends their rows to `history`. `clock` times the chunks, less any compilation
        inside them (`compile_clock`). Returns `(state, host_state, updates run, the
        update at which early_stop ended the run or None)`."""
        algo, n = self.algo, self.agents.num_agents
        spu = algo.steps_per_update
        writer = tensorboard_writer(self.run_dir, self.run.tensorboard) if self.is_main else None
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
        stop = self.stop
        try:
            if update < algo.num_updates and stopped_early_at is None:
                self._stop_if_signalled_before_training(update, state, host_state)
            while update < algo.num_updates and stopped_early_at is None:
                length = min(chunk, algo.num_updates - update)
                compiled = compile_clock.wall, compile_clock.cpu
                with clock:
                    state, host_state, metrics = self.stepper.run(state, host_state, length)
                clock.discount(compile_clock.wall - compiled[0], compile_clock.cpu - compiled[1])
                check_finite(metrics, update, algo)
                update += length
                updates_run += length
                row = log_row(metrics, update, algo, n * spu * length / clock.last)
                row["seconds"] = clock.last
                if "tokens" in row:
                    row["tokens_per_second"] = sum(row["tokens"]) / clock.last
                history.append(row)
                self._write_row(row, writer)
                progress.update(spu * length, row)
                state, done = algo.early_stop(state)
                if done and update < algo.num_updates:
                    stopped_early_at = update
                    progress.stopped_early()
                    self._say_stopped_early(update)
                elif done:
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

    def _stop_if_signalled_before_training(self, update: int, state: Any, host_state: Any):
        """A signal during set-up or compilation stops the run before its first chunk:
        a fresh run first saves its initial state (so that `--resume` continues it, as
        after any other stop); a resumed one already has its checkpoint at `update`."""
        _, signum = _agreed(False, self.stop.signum, self.multi_process)
        if not signum:
            return
        if self.checkpoints is not None and not self.run.resume:
            self.checkpoints.save(update, state, host_state)
        raise TrainingInterrupted(self._stop_message(signum, update), signum)

    def _say_stopped_early(self, update: int) -> None:
        if self.is_main:
            print(
                f"jaxrl: {self.algo.name} ended the run at update {update} of "
                f"{self.algo.num_updates}: {self.algo.early_stop_reason}",
                file=sys.stderr,
                flush=True,
            )

    def _write_row(self, row: dict[str, Any], writer: Any) -> None:
        if self.is_main and self.run_dir is not None:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if writer is not None:
            write_tensorboard(writer, row, self.algo.progress_unit)

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
    signal stops at once: through the handler that was installed before the run when
    there is one (the CLI's leaves the process), else as a KeyboardInterrupt (in a
    notebook, the cell stops and the kernel lives). Outside the main thread (where
    Python cannot install handlers) signals keep their default behaviour.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            previous = self._previous.get(signum)
            if callable(previous) and previous is not signal.default_int_handler:
                previous(signum, frame)  # the CLI's: leave the process at once
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
