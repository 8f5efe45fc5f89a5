"""The run directory: one writer at a time (`RunDirLock`), config.json checked before
anything is changed, metrics.jsonl cut back to the checkpoint a run resumes from, and
the checkpoints themselves (when to save, what a checkpoint holds, restoring the newest
intact one).

    run_dir/lock              flock'ed by the run writing it (pid, host, start); deleted at the end
    run_dir/config.json       algorithm, config and run options (checked on resume)
    run_dir/metrics.jsonl     one row per chunk (`summary.log_row`)
    run_dir/checkpoints/      orbax steps (`checkpoint.Checkpointer`)
    run_dir/summary.json      written by the loop at the end
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import logging
import os
import pathlib
import shutil
import socket
import sys
import time
from typing import Any

import jax

from jaxrl import config as cfg

from .checkpoint import Checkpointer, tree_fingerprint
from .contract import Algorithm
from .run_config import RunConfig, checkpoint_interval

log = logging.getLogger(__name__)


def write_json(path: pathlib.Path, value: Any) -> None:
    """Writes `value` as indented JSON to `path` through a temporary file and a rename,
    so that a reader (or a run killed mid-write) sees the old file or the new one, never
    a torn one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2) + "\n")
    os.replace(temporary, path)


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
    "check_memory",
}


class RunDirLock:
    """An exclusive `flock` on `run_dir/lock`, held by the one process writing the
    directory for the run's whole life.

    Two runs writing one directory interleave metrics.jsonl and mix their config.json
    and summary.json silently, so the second is refused before it changes anything.
    The kernel drops the lock when the holder's file descriptor closes, also on
    SIGKILL, so a killed run never leaves a stale lock (only a file whose text is
    ignored). The file names the holder (pid, host, start time) and is deleted when
    the holder releases it, so a run that stops leaves the directory as it found it;
    `acquire` checks that the file it locked is still the one at the path, since
    a holder may delete it between another process's open and flock.
    """

    FILE = "lock"

    def __init__(self, run_dir: pathlib.Path):
        self.path = run_dir / self.FILE
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        """Takes the lock; a `ConfigError` naming the holder when another process has it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: holder's text
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise cfg.ConfigError(
                    f"invalid run_dir={str(self.path.parent)!r}: another run is writing it "
                    f"({self._holder()}); wait for it to end, stop it, or choose another "
                    "run_dir (nothing was changed)"
                ) from None
            if self._is_current(fd):
                break
            os.close(fd)  # the holder deleted the file we opened: lock the new one
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
        self._fd = fd
        return self

    def _is_current(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def _holder(self) -> str:
        """The holder's line; it is empty for a moment after the holder locked."""
        for _ in range(20):
            try:
                text = self.path.read_text().strip()
            except FileNotFoundError:
                text = ""
            if text:
                return text
            time.sleep(0.05)
        return "a process that has not written its pid yet"

    def release(self) -> None:
        """Deletes the file, then drops the lock (closing the descriptor drops it)."""
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run_dir(run_dir: pathlib.Path, run: RunConfig) -> RunDirLock:
    """Creates `run_dir` (not on a resume) and locks it before anything in it is written.
    (`RunConfig.validate` has refused a `run_dir` that is a file.)"""
    if run.resume:
        _check_resumable(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunDirLock(run_dir).acquire()


def _check_resumable(run_dir: pathlib.Path) -> None:
    if not (run_dir / "config.json").exists():
        raise cfg.ConfigError(f"invalid resume=True: {run_dir} has no config.json to resume from")


def prepare_run_dir(
    run_dir: pathlib.Path, resolved: dict[str, Any], run: RunConfig, algo: Algorithm, is_main: bool
) -> None:
    """Checks the run directory against `run` before anything in it is changed (the
    main process holds its `RunDirLock` by now)."""
    config_path = run_dir / "config.json"
    checkpoints = run_dir / "checkpoints"
    if run.resume:
        _check_resumable(run_dir)
        saved = json.loads(config_path.read_text())
        _check_same_run(saved, resolved)
        algo.check_resume(saved["config"], reschedule=run.reschedule)
        if is_main and saved != {**resolved, "run": saved["run"]}:  # e.g. an extended run
            write_json(config_path, {**resolved, "run": saved["run"]})
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
        write_json(config_path, resolved)
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


def resume_metrics(run_dir: pathlib.Path, update: int, is_main: bool) -> list[dict[str, Any]]:
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


class Checkpoints:
    """When and what to checkpoint: the state minus `algo.checkpoint_exclude`, sharded as
    it is (no gather), plus the host state and progress in the JSON record.

    The excluded fields are frozen or derivable (`init` rebuilds them); their
    fingerprint is recorded so that a resume whose rebuilt frozen parts differ (a
    changed `--model`, say) fails instead of mixing two models.
    """

    def __init__(self, algo: Algorithm, run: RunConfig, run_dir: pathlib.Path, state: Any):
        self.algo, self.run = algo, run
        self.interval = checkpoint_interval(run, algo.steps_per_update)
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
