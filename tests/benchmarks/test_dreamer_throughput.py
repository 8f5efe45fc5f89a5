"""benchmarks/dreamer_throughput.py's matched table keeps a worker that failed or ran
past its limit as a failed row (a lower bound the docs show), instead of dropping it or
hanging the benchmark."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks import docs as bench_docs

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS)]  # the scripts import their helpers by bare name
import dreamer_throughput  # noqa: E402


def _run(row: str, seconds: float, repeat: int) -> dict:
    return {
        "row": row,
        "library": row,
        "repeat": repeat,
        "train_step_seconds": seconds,
        "train_step_cpu_seconds": 2 * seconds,
        "train_step_flops": 1e9,
        "params": 10,
        "dtype": "float32",
        "compile_seconds": {"train_step": 1.0},
        "load_average_at_start": 0.5,
    }


def test_a_timed_out_worker_is_a_failed_row_not_a_missing_one():
    timed_out = {
        "error": "Command '[...]' timed out after 600 seconds",
        "failed_row": "jaxrl-xla-conv",
        "timeout_seconds": 600.0,
        "repeat": 0,
        "load_average_at_start": 0.5,
    }
    runs = [_run("jaxrl", 0.1, 0), _run("dreamerv3", 0.4, 0), timed_out]
    summary = dreamer_throughput.summarise_matched(runs, peak=100.0)
    assert [r["row"] for r in summary["rows"]] == ["jaxrl", "dreamerv3"]
    assert summary["ratio"] == 4.0
    (failed,) = summary["failed_rows"]
    assert failed["row"] == "jaxrl-xla-conv" and "timed out after 600" in failed["error"]
    _, rows = bench_docs._speed_rows("dreamer_throughput", {"matched": summary})
    assert rows[-1][:2] == ["jaxrl-xla-conv", "did not finish (worker limit 600 s)"]
