"""benchmarks/tool_batch.py (host seconds per turn of a tool task, its calls one by one or
concurrent) runs end to end on a tiny turn, checks that both modes give the same turns,
and its results file makes the docs' table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
import tool_batch  # noqa: E402

from benchmarks import docs  # noqa: E402


def test_the_benchmark_times_both_modes_and_the_docs_table_reads_it(tmp_path):
    out = tmp_path / "tool_batch.json"
    argv = ["--cases", "calculator", "wait", "--rows", "4", "--repeats", "1"]
    assert (
        tool_batch.main([*argv, "--latency", "0.2", "--concurrency", "4", "--out", str(out)]) == 0
    )
    raw = json.loads(out.read_text())
    assert [c["case"] for c in raw["cases"]] == ["calculator", "wait"]
    for case in raw["cases"]:
        assert case["rows"] == 4 and case["concurrency"] == 4 and case["failed_calls"] == 0
        assert set(case["modes"]) == {"one by one", "concurrent"}
        assert case["speedup"] > 0
    waiting = raw["cases"][1]["modes"]
    # Four calls of 0.2 s: at least 0.8 s one by one; side by side well under that.
    assert waiting["one by one"]["seconds_per_turn"] >= 0.8
    assert waiting["concurrent"]["seconds_per_turn"] < 0.7
    header, rows = docs._speed_rows("tool_batch", raw)
    assert header[0] == "tool" and rows[0][:2] == ["calculator (at most 4 at once)", "4"]
