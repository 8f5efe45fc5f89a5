"""One writer per run directory (issue 36, item 1): a second run on a directory in use is
refused before it changes anything, naming the run that holds it; the lock dies with its
process (SIGKILL leaves no stale lock) and is gone once a run ends.

The CLI runs use the STD config of conftest.py (one compiled program, shared through
the persistent compilation cache) with 1-update chunks, as test_cli_runs.py does.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

import jaxrl
from jaxrl import config as cfg
from jaxrl.training.run_dir import RunDirLock

from ._scenarios.harness import run_group, two_process_jobs
from .conftest import (
    checkpoint_steps,
    jaxrl_command,
    read_metrics,
    std_api_kwargs,
    std_train_args,
    subprocess_env,
)

# 256 updates of 256 steps, one per chunk, a checkpoint every 2 updates: the run is still
# going when the second one starts, and has a checkpoint to resume from once killed.
LONG = ["--total-steps", "65536", "--log-every", "256", "--checkpoint-every", "512"]


def _args(run_dir: pathlib.Path, *extra: str, seed: int = 0) -> list[str]:
    args = std_train_args(run_dir, checkpoint_every=None, seed=seed)
    i = args.index("--total-steps")
    del args[i : i + 2]
    return [*args, *LONG, *extra]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        jaxrl_command(*args), env=subprocess_env(), capture_output=True, text=True, timeout=900
    )


def _snapshot(root: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _wait_for_checkpoint(proc: subprocess.Popen, run_dir: pathlib.Path) -> None:
    """Until a row after the first checkpoint (update 2) is logged."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= 3:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no metrics row within 10 minutes")


def test_a_second_run_is_refused_unchanged_and_a_killed_run_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        jaxrl_command(*_args(run_dir)),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_checkpoint(first, run_dir)
        first.send_signal(signal.SIGSTOP)  # frozen mid-run, still holding the lock
        time.sleep(0.5)  # let an in-flight checkpoint write settle
        before = _snapshot(run_dir)
        # --fresh would delete the checkpoints, a plain start rewrite config.json and
        # metrics.jsonl: both are refused first.
        for extra in (["--fresh"], []):
            second = _run(*_args(run_dir, *extra))
            assert second.returncode == 2, second.stderr
            assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
            assert "another run is writing it" in second.stderr, second.stderr
            assert f"pid {first.pid} on " in second.stderr and "started" in second.stderr
            assert _snapshot(run_dir) == before
        assert checkpoint_steps(run_dir), "no checkpoint yet: the resume below tests nothing"
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()  # SIGKILL: the lock must die with the process
        first.communicate(timeout=60)
    assert (run_dir / "lock").exists()  # left behind by the killed run, unlocked

    done = _run(*_args(run_dir, "--resume"))
    assert done.returncode == 0, done.stderr
    assert "resuming from update" in done.stderr
    assert [r["update"] for r in read_metrics(run_dir)] == list(range(1, 257))
    assert not (run_dir / "lock").exists()


def test_a_finished_run_resumes_and_a_held_directory_is_refused_in_process(tmp_path):
    run_dir = tmp_path / "run"
    kwargs = std_api_kwargs(run_dir=str(run_dir), checkpoint_every=1024)
    jaxrl.train("ppo", **kwargs)
    assert not (run_dir / "lock").exists()
    resumed = jaxrl.train("ppo", **kwargs, resume=True)  # nothing left to train: no refusal
    assert resumed.summary["params_fingerprint"]

    before = _snapshot(run_dir)
    refusal = f"another run is writing it .pid {os.getpid()} on "
    with RunDirLock(run_dir).acquire(), pytest.raises(cfg.ConfigError, match=refusal):
        jaxrl.train("ppo", **kwargs, fresh=True)  # as if another run held the directory
    assert _snapshot(run_dir) == before


def test_run_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "run"
    path.write_text("x")
    with pytest.raises(cfg.ConfigError, match="is an existing file"):
        jaxrl.train("ppo", **std_api_kwargs(run_dir=str(path)))


def test_two_runs_started_together_one_writes_the_other_is_refused(tmp_path):
    """The issue's case: two `train` started at once on one directory both exited 0 and
    left duplicated rows; now exactly one runs, and its rows are the only ones. (The
    run is long enough that the loser cannot start after the winner has ended.)"""
    run_dir = tmp_path / "run"
    procs = [
        subprocess.Popen(
            jaxrl_command(*_args(run_dir, seed=seed)),
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    results = [(p.wait(900), p.communicate()[1]) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    winner = [code for code, _ in results].index(0)
    refusal = results[1 - winner][1]
    assert "another run is writing it (pid " in refusal and "Traceback" not in refusal
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["run"]["seed"] == winner  # config.json is the winner's
    assert [r["update"] for r in read_metrics(run_dir)] == list(range(1, 257))
    assert not (run_dir / "lock").exists()


def test_a_multi_process_run_on_a_held_directory_stops_on_every_process(tmp_path):
    """Only process 0 locks; process 1, which does not, must stop too rather than wait
    for process 0 at the next collective."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    kwargs = {
        "algorithm": "ppo",
        "env": "CartPole-v1",
        "total_steps": 4096,
        "num_envs": 8,
        "num_steps": 32,
        "num_seeds": 4,
        "progress": False,
        "run_dir": str(run_dir),
    }
    runs = [{"name": "held", "kwargs": kwargs, "expect_error": True}]
    spec = {"out_dir": str(tmp_path), "devices": 4, "runs": runs}
    with RunDirLock(run_dir).acquire():
        p0, p1 = run_group(two_process_jobs(spec, local_devices=2), tmp_path)
    assert p0["runs"]["held"]["error"].startswith("ConfigError: invalid run_dir=")
    assert f"another run is writing it (pid {os.getpid()} on " in p0["runs"]["held"]["error"]
    assert "the main process (0) refused it" in p1["runs"]["held"]["error"]
    assert sorted(p.name for p in run_dir.iterdir()) == []  # the holder's lock file is gone
