"""Runs a list of `jaxrl.train` calls in a fresh process and reports what they produced.

Used by tests/training/test_multidevice.py and test_multihost.py: the device
count (`XLA_FLAGS=--xla_force_host_platform_device_count=N`) must be set
before JAX initialises, so each scenario runs here, in a subprocess, and the
test session itself keeps its single device.

    python run_training.py SPEC.json

SPEC (JSON):
    out_dir:      where `<run name>.p<process>.npz` (final params) go
    devices:      expected `jax.device_count()` (global), checked
    distributed:  optional {"coordinator", "num_processes", "process_id"}, or
                  "env" to call `initialize_distributed()` with no arguments
                  (it then reads JAXRL_COORDINATOR / JAXRL_NUM_PROCESSES /
                  JAXRL_PROCESS_ID)
    runs:         list of {"name", "kwargs" (for jaxrl.train),
                  "keep_checkpoints_upto": optional int}; the latter deletes,
                  before the run, every checkpoint step above it (process 0
                  only, between barriers): a run "interrupted" after that step;
                  "expect_error": true: the run must raise; its error is reported;
                  "process_kwargs": optional {"<process index>": kwargs added on that
                  process only}; "sigterm_process": optional process index that sends
                  itself SIGTERM once the run's first checkpoint is finalised.

The last stdout line is `RESULT <json>`: per run its metrics rows (timings
dropped), summary, per-field shardings of the final state and the files this
process wrote through `open` (in the driver's modules) or `Path.write_text`, the
driver's log messages (every `jaxrl.training` logger) and the warnings raised.
"""

from __future__ import annotations

import builtins
import json
import os
import pathlib
import shutil
import sys
import time

# Metrics that measure time, which differs between runs by nature.
TIMING_METRICS = (
    "steps_per_second",
    "seconds",
    "tokens_per_second",
    "sample_seconds",
    "learn_seconds",
    "sample_tokens_per_second",
)


def main() -> None:
    spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
    out_dir = pathlib.Path(spec["out_dir"])

    from jaxrl.training import mesh

    dist = spec.get("distributed")
    if dist == "env":
        assert mesh.initialize_distributed(), "JAXRL_* variables did not trigger initialisation"
    elif dist:
        mesh.initialize_distributed(dist["coordinator"], dist["num_processes"], dist["process_id"])

    import dataclasses
    import logging
    import warnings

    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    import jaxrl
    from jaxrl.training import loop, run_dir

    assert jax.device_count() == spec["devices"], (jax.device_count(), spec["devices"])
    pid = jax.process_index()
    writes = _audit_writes(loop, run_dir)
    log_records: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: log_records.append(record.getMessage())
    logging.getLogger("jaxrl.training").addHandler(handler)
    logging.getLogger("jaxrl.training").setLevel(logging.INFO)
    report: dict = {
        "process_index": pid,
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
        "runs": {},
    }
    for run in spec["runs"]:
        name = run["name"]
        kwargs = {**run["kwargs"], **run.get("process_kwargs", {}).get(str(pid), {})}
        if run.get("sigterm_process") == pid:
            _sigterm_after_first_checkpoint(pathlib.Path(kwargs["run_dir"]))
        if "keep_checkpoints_upto" in run:
            _drop_checkpoints_after(
                pathlib.Path(kwargs["run_dir"]), run["keep_checkpoints_upto"], pid
            )
        writes.clear()
        log_records.clear()
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if "expect_error" in run:
                try:
                    jaxrl.train(**kwargs)
                except Exception as err:  # noqa: BLE001 - reported to the test
                    report["runs"][name] = {"error": f"{type(err).__name__}: {err}"}
                    continue
                raise AssertionError(f"run {name!r} did not fail")
            result = jaxrl.train(**kwargs)
        wall = time.perf_counter() - t0
        state = result.state
        # Global params on every process (gathered across hosts when sharded over them).
        params = multihost_utils.process_allgather(state.params, tiled=True)
        leaves = jax.tree_util.tree_leaves_with_path(params)
        np.savez(
            out_dir / f"{name}.p{pid}.npz",
            **{jax.tree_util.keystr(p): np.asarray(x) for p, x in leaves},
        )
        report["runs"][name] = {
            "wall_seconds": wall,
            "metrics": [
                {k: v for k, v in row.items() if k not in TIMING_METRICS} for row in result.metrics
            ],
            "summary": result.summary,
            "shardings": {
                f.name: _field_shardings(getattr(state, f.name)) for f in dataclasses.fields(state)
            },
            "writes": sorted(set(writes)),
            "log": list(log_records),
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        }
    print("RESULT " + json.dumps(report), flush=True)


def _field_shardings(value) -> list[dict]:
    """Distinct (spec, global shape, local shard shape, replicated) of a field's leaves."""
    import jax

    seen = {}
    for leaf in jax.tree.leaves(value):
        shard = leaf.addressable_shards[0].data.shape
        entry = {
            "spec": [None if a is None else a for a in leaf.sharding.spec],
            "ndim": leaf.ndim,
            "env_axis": leaf.shape[1] if leaf.ndim > 1 else None,
            "shard_shape_vs_global": [[s, g] for s, g in zip(shard, leaf.shape, strict=True)][:2],
            "fully_replicated": leaf.sharding.is_fully_replicated,
            "mesh_devices": leaf.sharding.mesh.devices.size,
        }
        seen[json.dumps(entry, sort_keys=True)] = entry
    return list(seen.values())


def _sigterm_after_first_checkpoint(run_dir: pathlib.Path) -> None:
    """What a scheduler does to one host of a job: SIGTERM, here once training is under
    way (its first checkpoint is finalised), from a thread of this process."""
    import signal
    import threading

    def wait_and_signal() -> None:
        checkpoints = run_dir / "checkpoints"
        while not (checkpoints.exists() and any(p.name.isdigit() for p in checkpoints.iterdir())):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait_and_signal, daemon=True).start()


def _drop_checkpoints_after(run_dir: pathlib.Path, step: int, pid: int) -> None:
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("scenario: before dropping checkpoints")
    if pid == 0:
        for path in (run_dir / "checkpoints").iterdir():
            if path.name.isdigit() and int(path.name) > step:
                shutil.rmtree(path)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("scenario: checkpoints dropped")


def _audit_writes(*driver_modules) -> list[str]:
    """Records files opened for writing by the driver's modules (`open`) or via
    `Path.write_text`."""
    writes: list[str] = []
    real_open, real_write_text = builtins.open, pathlib.Path.write_text

    def open_(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            writes.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    def write_text(self, *args, **kwargs):
        writes.append(str(self))
        return real_write_text(self, *args, **kwargs)

    for module in driver_modules:  # a module global shadows the builtin there only
        module.open = open_
    pathlib.Path.write_text = write_text
    return writes


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
