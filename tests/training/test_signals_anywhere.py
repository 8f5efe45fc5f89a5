"""Ctrl-C or SIGTERM at any moment of a run (issue 36, item 2): before, during and after
compilation, during a chunk, while a checkpoint is written, after the last chunk and
during `jaxrl eval`. Every case must end without a crash (a signal inside XLA's compiler
used to end in a segmentation fault after "jaxrl: interrupted"), with the documented exit
status and message, and leave a run directory that resumes to the uninterrupted run's
parameters.

Each case is a `jaxrl` subprocess under `_signal_harness.py`, which sends the signal from
inside the moment it names, without the persistent compilation cache (so compilation is
real and takes long enough to be interrupted).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

import jaxrl

from .conftest import checkpoint_steps, read_metrics

HARNESS = pathlib.Path(__file__).with_name("_signal_harness.py")
# 4 envs x 32 steps; 16 updates of one per chunk, a checkpoint every 4.
TINY = {"env": "CartPole-v1", "num_envs": 4, "num_steps": 32, "total_steps": 2048}
TINY_FLAGS = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
RUN_FLAGS = ["--log-every", "128", "--checkpoint-every", "512", "--no-progress"]
CRASH = ("Fatal Python error", "Segmentation fault", "Traceback", "unexpected error")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    return {**env, "JAX_ENABLE_COMPILATION_CACHE": "false", "PYTHONUNBUFFERED": "1"}


def _harness(moment: str, signame: str, count: int, *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(HARNESS), moment, signame, str(count), "--", *argv]
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)


def _train(run_dir: pathlib.Path, *extra: str) -> list[str]:
    return ["train", "ppo", *TINY_FLAGS, *RUN_FLAGS, "--run-dir", str(run_dir), *extra]


def _took(stderr: str, moment: str) -> float:
    found = re.search(rf"harness: {moment} took ([0-9.]+)", stderr)
    assert found, stderr
    return float(found[1])


def _intact(run_dir: pathlib.Path) -> None:
    """The files a stop may leave are whole: config.json and every metrics row parse."""
    json.loads((run_dir / "config.json").read_text())
    if (run_dir / "metrics.jsonl").exists():
        read_metrics(run_dir)


@pytest.fixture(scope="module")
def uninterrupted() -> str:
    result = jaxrl.train("ppo", **TINY, progress=False)
    return result.summary["params_fingerprint"]


def _resumes_to(run_dir: pathlib.Path, fingerprint: str) -> None:
    result = jaxrl.train("ppo", run_dir=str(run_dir), resume=True, progress=False)
    assert result.summary["params_fingerprint"] == fingerprint


@pytest.mark.parametrize(
    ("moment", "signame", "stopped_at"),
    [
        ("setup", "SIGINT", 0),
        ("compile", "SIGINT", 0),
        ("compile", "SIGTERM", 0),
        ("chunk", "SIGTERM", 1),
        # Signalled while update 4's checkpoint is written: the next chunk is the first
        # to see it, and checkpoints again at its end.
        ("checkpoint", "SIGINT", 5),
    ],
)
def test_one_signal_stops_cleanly_with_a_checkpoint_that_resumes(
    tmp_path, uninterrupted, moment, signame, stopped_at
):
    run_dir = tmp_path / "run"
    done = _harness(moment, signame, 1, *_train(run_dir))
    signum = getattr(signal, signame)
    assert done.returncode == 128 + signum, done.stderr
    assert not any(text in done.stderr for text in CRASH), done.stderr
    assert f"{signame} received: stopped at update {stopped_at} of 16 after writing a " in (
        done.stderr
    )
    if moment == "compile":  # the signal landed while XLA compiled
        assert _took(done.stderr, "compile") > 0.25, "compiled too fast to be interrupted"
    _intact(run_dir)
    assert checkpoint_steps(run_dir)[-1] == stopped_at
    _resumes_to(run_dir, uninterrupted)


def test_two_signals_during_compilation_stop_at_once_without_a_crash(tmp_path, uninterrupted):
    run_dir = tmp_path / "run"
    done = _harness("compile", "SIGINT", 2, *_train(run_dir))
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().endswith("jaxrl: interrupted"), done.stderr
    assert not any(text in done.stderr for text in CRASH), done.stderr
    # It left inside the compilation, which never returned to say how long it took.
    assert "harness: compile started" in done.stderr
    assert "harness: compile took" not in done.stderr
    _intact(run_dir)
    assert checkpoint_steps(run_dir) == []  # stopped at once: nothing trained, nothing saved
    fresh = jaxrl.train("ppo", **TINY, run_dir=str(run_dir), fresh=True, progress=False)
    assert fresh.summary["params_fingerprint"] == uninterrupted


def test_two_signals_while_a_checkpoint_is_written_leave_an_earlier_one_to_resume(
    tmp_path, uninterrupted
):
    """The second signal stops inside the save: the unfinished checkpoint is skipped and
    the run resumes from the last whole one (or starts over when there is none)."""
    run_dir = tmp_path / "run"
    done = _harness("checkpoint", "SIGINT", 2, *_train(run_dir))
    assert done.returncode == 130, done.stderr
    assert not any(text in done.stderr for text in CRASH), done.stderr
    _intact(run_dir)
    if checkpoint_steps(run_dir):
        _resumes_to(run_dir, uninterrupted)
    else:
        fresh = jaxrl.train("ppo", **TINY, run_dir=str(run_dir), fresh=True, progress=False)
        assert fresh.summary["params_fingerprint"] == uninterrupted


def test_a_signal_after_the_last_chunk_lets_the_finished_run_complete(tmp_path, uninterrupted):
    run_dir = tmp_path / "run"
    done = _harness("finish", "SIGTERM", 1, *_train(run_dir))
    assert done.returncode == 0, done.stderr
    assert not any(text in done.stderr for text in CRASH), done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["params_fingerprint"] == uninterrupted


def test_ctrl_c_during_eval_exits_130_and_writes_no_partial_report(tmp_path):
    run_dir = tmp_path / "run"
    jaxrl.train("ppo", **TINY, run_dir=str(run_dir), progress=False)
    done = _harness("evaluate", "SIGINT", 1, "eval", str(run_dir), "--episodes", "64")
    assert done.returncode == 130, done.stderr
    assert not any(text in done.stderr for text in CRASH), done.stderr
    assert not (run_dir / "eval.json").exists()
    assert "harness: evaluate started" in done.stderr
