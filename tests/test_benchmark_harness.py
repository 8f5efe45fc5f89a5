"""`benchmarks/_harness.run_worker`: a worker's JSON line, and the cores it runs on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _harness  # noqa: E402

# A worker that reports its arguments and the CPUs it may run on.
AFFINITY_WORKER = """
import json, os, sys
print("not json")
print(json.dumps({"affinity": sorted(os.sched_getaffinity(0)), "args": json.loads(sys.argv[1])}))
"""


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "affinity.py").write_text(AFFINITY_WORKER)
    monkeypatch.setattr(_harness, "WORKERS", tmp_path)
    return "affinity.py"


def test_run_worker_returns_the_last_json_line_and_keeps_every_core(worker: str) -> None:
    result = _harness.run_worker(sys.executable, worker, {"x": 1}, timeout=60)
    assert result["args"] == {"x": 1}
    assert result["affinity"] == sorted(os.sched_getaffinity(0))
    assert result["cpus"] is None
    assert result["process_seconds"] > 0


def test_run_worker_pins_the_worker_to_the_given_cores(worker: str) -> None:
    core = _harness.one_core()
    assert len(core) == 1 and core <= os.sched_getaffinity(0)
    result = _harness.run_worker(sys.executable, worker, {}, timeout=60, cpus=core)
    assert result["affinity"] == sorted(core) == result["cpus"]


def test_a_failing_worker_is_an_error_with_its_stderr(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "fails.py").write_text("import sys; sys.exit('bad input')")
    monkeypatch.setattr(_harness, "WORKERS", tmp_path)
    with pytest.raises(RuntimeError, match="bad input"):
        _harness.run_worker(sys.executable, "fails.py", {}, timeout=60)
