"""Learning targets of SAC and TD3 on CPU with fixed seeds, and a SAC run killed with
SIGKILL and resumed through the CLI that ends where an uninterrupted one does.

Two tiers: `-m slow` (CI) trains 4 seeds in one program at half the preset's budget
and asserts a mean return of -600 or better, half of a random policy's (about -1200 on
Pendulum); `-m full` is the issue's target, the preset with 4 seeds, >= -250 (measured
results in benchmarks/README.md). Why 4 seeds and -600: at half the budget single seeds
spread widely (SAC seeds 0-3 alone: -480, -225, -187, -162 with per-leaf Adam on an
AVX-512 CPU, -165 for seed 0 on another CPU and after Adam moved onto one flat vector),
and so do 4-seed means: measured on the AVX-512 CPU with flat Adam for seed bases 0 /
1 / 2, SAC -254 / -190 / -, TD3 -371 / -450 / -234 (TD3's worst single seed -828),
~37 s each. A threshold near those means would test the seed and the CPU's rounding,
not the algorithm.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import sac, td3
from jaxrl.training.driver import RunConfig, train


def _summary(module, num_seeds: int, **overrides) -> dict:
    config = cfg.replace(module.default_config("Pendulum-v1"), **overrides)
    return train(
        module.make(config), RunConfig(num_seeds=num_seeds, seed=0, progress=False)
    ).summary


HALF_BUDGET = {"total_steps": 6_000, "buffer_size": 6_000}


@pytest.mark.slow
@pytest.mark.parametrize("module", [sac, td3], ids=["sac", "td3"])
def test_learns_pendulum_in_half_the_preset_budget_over_four_seeds(module):
    summary = _summary(module, num_seeds=4, **HALF_BUDGET)
    assert summary["final_return_agents"] == 4, summary
    assert summary["final_return_mean"] >= -600, summary


@pytest.mark.full
@pytest.mark.parametrize("module", [sac, td3], ids=["sac", "td3"])
def test_pendulum_reaches_minus_250_over_four_seeds(module):
    summary = _summary(module, num_seeds=4)
    assert summary["final_return_agents"] == 4, summary
    assert summary["final_return_mean"] >= -250, summary


# ----------------------------------------------------------------------------- kill and resume


# A short SAC run on Pendulum through the CLI (3000 updates of one step: 60 chunks of
# 50, a checkpoint every 250 steps), started fresh or resumed in RUN_DIR.
def _command(run_dir: pathlib.Path, mode: str) -> list[str]:
    command = [
        sys.executable, "-m", "jaxrl.cli", "train", "sac", "--env", "Pendulum-v1",
        "--total-steps", "3000", "--learning-starts", "500", "--buffer-size", "3000",
        "--batch-size", "64", "--hidden-sizes", "32,32", "--num-seeds", "2",
        "--checkpoint-every", "250", "--no-progress", "--run-dir", str(run_dir),
    ]  # fmt: skip
    return command + (["--resume"] if mode == "resume" else [])


def _start(run_dir: pathlib.Path, mode: str, env: dict, log: pathlib.Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            _command(run_dir, mode),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _finish(proc: subprocess.Popen, log: pathlib.Path) -> None:
    assert proc.wait(timeout=600) == 0, log.read_text()


def _checkpoints(run_dir: pathlib.Path) -> list[int]:
    """Finalised checkpoint steps (orbax's temporary directories are not digits)."""
    folder = run_dir / "checkpoints"
    return (
        sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []
    )


@pytest.mark.slow
def test_sac_killed_and_resumed_ends_like_an_uninterrupted_run(tmp_path):
    # One persistent compilation cache for the three processes: they run the same programs.
    env = {
        **os.environ,
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "PYTHONUNBUFFERED": "1",
    }
    whole = tmp_path / "whole"
    _finish(_start(whole, "fresh", env, tmp_path / "whole.log"), tmp_path / "whole.log")

    run_dir, log = tmp_path / "killed", tmp_path / "killed.log"
    proc = _start(run_dir, "fresh", env, log)
    deadline = time.monotonic() + 600
    while not _checkpoints(run_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _checkpoints(run_dir)
    assert killed_at and max(killed_at) < 3000, f"no checkpoint before the kill: {killed_at}"
    assert not (run_dir / "summary.json").exists()

    _finish(_start(run_dir, "resume", env, tmp_path / "resumed.log"), tmp_path / "resumed.log")
    resumed = json.loads((run_dir / "summary.json").read_text())
    reference = json.loads((whole / "summary.json").read_text())
    assert resumed["params_fingerprint"] == reference["params_fingerprint"]
    assert resumed["final_return_per_agent"] == reference["final_return_per_agent"]
