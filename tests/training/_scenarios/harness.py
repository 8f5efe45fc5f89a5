"""Starts `run_training.py` scenarios in subprocesses and compares what they produced.

Every subprocess has a deadline; on expiry, or as soon as one process of a
group fails, the whole group is killed with SIGKILL (a process that called
`jax.distributed.initialize` catches SIGTERM in JAX's preemption notifier and
keeps running), so a hung collective can never stall the test session.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

SCRIPT = pathlib.Path(__file__).with_name("run_training.py")
# Generous: one scenario compiles 2-3 PPO programs, which takes minutes on a
# loaded 2-core machine. Override with JAXRL_TEST_SUBPROCESS_TIMEOUT (seconds).
TIMEOUT = float(os.environ.get("JAXRL_TEST_SUBPROCESS_TIMEOUT", "900"))
# A tiny Llama on 2-digit addition (jaxrl.train keyword arguments): the language-model
# runs of the multi-device and multi-host scenarios, with the algorithm's own fields.
TINY_LM = {
    "task": "addition",
    "digits": 2,
    "num_layers": 1,
    "hidden_size": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "mlp_size": 64,
    "progress": False,
}
# 2 processes against 1: the same global program, but the cross-process collectives
# (gloo) may sum in another order than the in-process ones.
PARAMS_TOL = {"rtol": 1e-5, "atol": 1e-6}
METRICS_TOL = {"rtol": 1e-4, "atol": 1e-5}
_DISTRIBUTED_VARS = (
    "JAXRL_COORDINATOR",
    "JAXRL_NUM_PROCESSES",
    "JAXRL_PROCESS_ID",
    "JAXRL_DISTRIBUTED",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def scenario_env(local_devices: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a scenario process with `local_devices` emulated CPU devices."""
    from ..conftest import CACHE_ENV  # the training tests' shared compilation cache

    env = {k: v for k, v in os.environ.items() if k not in _DISTRIBUTED_VARS}
    flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if "xla_force_host_platform_device_count" not in f
    ]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={local_devices}"])
    env.update(CACHE_ENV)
    env.update({"JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def two_process_jobs(
    spec: dict[str, Any], local_devices: int, *, second_by_env: bool = False
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """`run_group` jobs of `spec` run by 2 processes with `local_devices` emulated
    devices each, joined in one distributed runtime at a fresh coordinator port.
    Process 0 is told so by `spec["distributed"]` arguments; process 1 the same way,
    or with `second_by_env` by the JAXRL_* environment variables."""
    coordinator = f"localhost:{free_port()}"
    jobs = []
    for pid in range(2):
        by_args = {"coordinator": coordinator, "num_processes": 2, "process_id": pid}
        by_env = {
            "JAXRL_COORDINATOR": coordinator,
            "JAXRL_NUM_PROCESSES": "2",
            "JAXRL_PROCESS_ID": str(pid),
        }
        if pid == 1 and second_by_env:
            jobs.append(({**spec, "distributed": "env"}, scenario_env(local_devices, by_env)))
        else:
            jobs.append(({**spec, "distributed": by_args}, scenario_env(local_devices)))
    return jobs


def run_group(
    jobs: Sequence[tuple[dict[str, Any], dict[str, str]]],
    workdir: pathlib.Path,
    timeout: float = TIMEOUT,
) -> list[dict[str, Any]]:
    """Runs `(spec, env)` jobs concurrently; returns their `RESULT` reports in order."""
    procs, logs = [], []
    for i, (spec, env) in enumerate(jobs):
        spec_path = workdir / f"spec{i}.json"
        spec_path.write_text(json.dumps(spec))
        out, err = open(workdir / f"job{i}.out", "w+"), open(workdir / f"job{i}.err", "w+")  # noqa: SIM115
        logs.append((out, err))
        procs.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT), str(spec_path)],
                env=env,
                stdout=out,
                stderr=err,
                cwd=workdir,
            )
        )
    deadline = time.monotonic() + timeout
    failure = None
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                failure = f"timed out after {timeout:.0f} s"
                break
            if any(p.returncode not in (None, 0) for p in procs):
                failure = "a process failed"
                break
            time.sleep(0.5)
        if failure is None and any(p.returncode != 0 for p in procs):
            failure = "a process failed"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reports, details = [], []
    for i, (p, (out, err)) in enumerate(zip(procs, logs, strict=True)):
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
        out.close(), err.close()
        details.append(f"--- job {i} (exit {p.returncode}) stderr tail:\n{stderr[-3000:]}")
        lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        reports.append(json.loads(lines[-1][len("RESULT ") :]) if lines else None)
    if failure or any(r is None for r in reports):
        raise AssertionError(f"scenario {failure or 'printed no RESULT'}\n" + "\n".join(details))
    return reports


def load_params(out_dir: pathlib.Path, name: str, process: int = 0) -> dict[str, np.ndarray]:
    with np.load(out_dir / f"{name}.p{process}.npz") as data:
        return {k: data[k] for k in data.files}


def params_max_diff(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], rtol: float, atol: float
) -> float:
    """Asserts every leaf is close; returns the largest absolute difference."""
    assert a.keys() == b.keys()
    worst = 0.0
    for key in a:
        assert a[key].shape == b[key].shape, key
        np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=key)
        worst = max(worst, float(np.max(np.abs(a[key].astype(np.float64) - b[key]))))
    return worst


def metrics_max_diff(
    rows_a: list[dict],
    rows_b: list[dict],
    rtol: float,
    atol: float,
    exact: Sequence[str] = ("update", "env_steps", "episodes"),
) -> dict[str, float]:
    """Asserts logged metrics agree (fields in `exact` exactly); returns max abs diff per field."""
    assert len(rows_a) == len(rows_b)
    worst: dict[str, float] = {}
    for i, (a, b) in enumerate(zip(rows_a, rows_b, strict=True)):
        assert a.keys() == b.keys()
        for key in a:
            if key in exact:
                assert a[key] == b[key], (i, key, a[key], b[key])
                continue
            x = np.asarray(
                [np.nan if v is None else v for v in np.atleast_1d(a[key])], dtype=np.float64
            )
            y = np.asarray(
                [np.nan if v is None else v for v in np.atleast_1d(b[key])], dtype=np.float64
            )
            np.testing.assert_allclose(
                x, y, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"row {i} {key}"
            )
            finite = np.isfinite(x) & np.isfinite(y)
            diff = float(np.max(np.abs(x - y)[finite])) if finite.any() else 0.0
            worst[key] = max(worst.get(key, 0.0), diff)
    return worst


def concat_params(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stacks per-run params along the agent axis (sweep point after sweep point)."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def concat_metrics(parts: Sequence[list[dict]]) -> list[dict]:
    """Concatenates the per-agent lists of metrics rows of separate runs."""
    rows = []
    for group in zip(*parts, strict=True):
        row = {}
        for key in group[0]:
            values = [g[key] for g in group]
            row[key] = sum(values, []) if isinstance(values[0], list) else values[0]
        rows.append(row)
    return rows
