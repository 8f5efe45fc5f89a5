"""Shared fixtures for the training tests (driver, checkpoints, CLI, config).

Compiling one PPO program takes 10-40 s on a small CPU, so nearly every
training run in these tests uses the *same* program: the config `STD` below,
with 2 seeds x a 2-point lr sweep (4 agents). Seeds, sweep values, run
directories and checkpoint intervals are data or host-side choices, so they
do not change the compiled program (the chunk length, which does, is one
update for every run here).

JAX's persistent compilation cache is switched on for this process and for
the `jaxrl` subprocesses the tests start, so each program is compiled once
per machine (`JAXRL_TEST_JAX_CACHE` picks the directory).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import tempfile

import jax
import pytest

CACHE_DIR = pathlib.Path(
    os.environ.get("JAXRL_TEST_JAX_CACHE")
    or pathlib.Path(tempfile.gettempdir()) / f"jaxrl-test-jax-cache-{os.getuid()}"
)

# The same settings, as environment variables, for `jaxrl` subprocesses.
CACHE_ENV = {
    "JAX_COMPILATION_CACHE_DIR": str(CACHE_DIR),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}


def _enable_compilation_cache() -> None:
    jax.config.update("jax_compilation_cache_dir", str(CACHE_DIR))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    # If something compiled before this conftest was imported, JAX has already
    # decided not to use a cache; make it look again.
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()


_enable_compilation_cache()

# ----------------------------------------------------------------------------- the config
# 8192 steps of 4 envs x 64 steps = 32 updates; the reference run checkpoints every
# 4 updates (steps 24, 28, 32 are kept), the kill-and-resume runs every 2.
STD_HPARAMS = {
    "env": "CartPole-v1",
    "total_steps": 8192,
    "num_envs": 4,
    "num_steps": 64,
    "update_epochs": 2,
    "num_minibatches": 2,
}
STD_SEEDS = 2
STD_SWEEP = {"lr": [1e-3, 3e-4]}
STD_CHECKPOINT_EVERY = 1024
STEPS_PER_UPDATE = 4 * 64
NUM_UPDATES = 8192 // STEPS_PER_UPDATE
NUM_AGENTS = STD_SEEDS * len(STD_SWEEP["lr"])
SUMMARY_KEYS = (
    "final_return_per_agent",
    "sweep",  # the STD config sweeps lr: final_return_mean/_std/_agents per point
    "steps_per_second",
    "compile_seconds",
    "wall_seconds",
    "params_fingerprint",
)
# metrics.jsonl fields that measure time rather than learning.
TIMING_FIELDS = ("steps_per_second", "seconds")


def std_train_args(
    run_dir: str | os.PathLike,
    *extra: str,
    checkpoint_every: int | None = STD_CHECKPOINT_EVERY,
    seed: int = 0,
) -> list[str]:
    """`jaxrl train ...` arguments (without the program name) for the STD config."""
    args = ["train", "ppo"]
    for name, value in STD_HPARAMS.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    args += ["--num-seeds", str(STD_SEEDS), "--seed", str(seed)]
    args += ["--sweep", "lr=" + ",".join(str(v) for v in STD_SWEEP["lr"])]
    if checkpoint_every is not None:
        args += ["--checkpoint-every", str(checkpoint_every)]
    args += ["--run-dir", str(run_dir), "--no-progress", *extra]
    return args


def std_api_kwargs(**overrides):
    """`jaxrl.train("ppo", **kwargs)` arguments for the STD config."""
    return {
        **STD_HPARAMS,
        "num_seeds": STD_SEEDS,
        "sweep": STD_SWEEP,
        "progress": False,
        **overrides,
    }


def jaxrl_command(*args: str) -> list[str]:
    """A subprocess command line running the `jaxrl` CLI of this interpreter."""
    return [sys.executable, "-m", "jaxrl.cli", *args]


def subprocess_env() -> dict[str, str]:
    return {**os.environ, **CACHE_ENV, "PYTHONUNBUFFERED": "1"}


def read_metrics(run_dir: pathlib.Path) -> list[dict]:
    return [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line
    ]


def learning_fields(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING_FIELDS}


def checkpoint_steps(run_dir: pathlib.Path) -> list[int]:
    """Finalised step directories (what orbax treats as checkpoints)."""
    return sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())


def tmp_checkpoint_dirs(run_dir: pathlib.Path) -> list[str]:
    """Orbax's temporary directories (saves that never finished)."""
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if "tmp" in p.name)


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> pathlib.Path:
    """An uninterrupted CLI run of the STD config (compiles the shared program).

    Read-only for tests: copy it (`copy_run`) before changing anything.
    """
    from jaxrl import cli

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    assert cli.main(std_train_args(run_dir)) == 0
    return run_dir


@pytest.fixture(scope="session")
def reference_summary(reference_run) -> dict:
    return json.loads((reference_run / "summary.json").read_text())


@pytest.fixture
def copy_run(reference_run, tmp_path):
    """Returns a fresh, writable copy of the reference run directory."""

    def make(name: str = "run") -> pathlib.Path:
        dest = tmp_path / name
        shutil.copytree(reference_run, dest)
        return dest

    return make


@pytest.fixture(scope="session")
def restore_target(reference_run):
    """`(algo, fields)`: what a checkpoint of the STD config holds (the state's fields
    but `checkpoint_exclude`, as a dict), from the reference's latest checkpoint."""
    from jaxrl.evaluation import load_run
    from jaxrl.training.driver import checkpointed_fields

    algo, state, _ = load_run(reference_run)
    return algo, checkpointed_fields(algo, state)
