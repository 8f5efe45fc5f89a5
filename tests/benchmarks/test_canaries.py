"""Stale results are found here: each results file's canary, recomputed at this commit.

A results file records the canary of its algorithm (benchmarks/canaries.py: the metrics
of the last updates of a tiny run of a few updates) as the code that measured it gave
them. This recomputes each canary once and fails, naming every results file it
covers, when the numbers moved beyond CPU-to-CPU rounding (`canaries.RTOL`; the
evidence for it is in benchmarks/notes/2026-11-27-canary-tolerance.md). The fix is to
rerun those results (`python -m benchmarks.reproduce --only NAME ...`) and commit the
files with the change that moved them, not to loosen this test.

Results files measured before canaries existed carry `"canary": null` and a
`canary_note`; they are listed by `test_results_without_a_canary_say_why`.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import canaries  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _recorded() -> dict[str, list[tuple[str, dict]]]:
    """canary name -> [(results file, its recorded canary metrics)]."""
    by_canary: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for path in sorted(RESULTS.glob("*.json")):
        canary = json.loads(path.read_text()).get("canary")
        if canary:
            by_canary[canary["name"]].append((path.name, canary["metrics"]))
    return dict(by_canary)


RECORDED = _recorded()


@pytest.mark.parametrize("name", sorted(RECORDED) or [None])
def test_results_files_match_their_algorithms_canary(name: str | None) -> None:
    if name is None:
        pytest.skip("no results file records a canary yet")
    now = canaries.compute(name)  # once for every file of this algorithm
    stale = {}
    for file, recorded in RECORDED[name]:
        problems = canaries.compare(now, recorded)
        if problems:
            stale[file] = problems[:3]
    assert not stale, (
        f"{name}'s numbers changed since these results were measured; rerun them "
        f"(python -m benchmarks.reproduce --only "
        f"{' '.join(f.removesuffix('.json') for f in stale)}):\n"
        + "\n".join(f"  {file}: {'; '.join(p)}" for file, p in stale.items())
    )


def test_results_without_a_canary_say_why() -> None:
    for path in sorted(RESULTS.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("canary") is None and record["kind"] != "duration":
            assert (
                record.get("canary_note")
                or record.get("canary") is None
                and path.stem
                in (
                    "env_throughput",  # no algorithm: environments and sampling only
                    "suite_throughput",
                    "lm_sampling",
                    "continuous_batching",
                    "tool_batch",  # no algorithm: the tool runner's host work
                )
            ), path.name


def test_every_registered_canary_exists() -> None:
    from benchmarks import registry

    named = {e.name: e.canary for e in registry.ENTRIES if e.canary}
    assert {n: c for n, c in named.items() if c not in canaries.CANARIES} == {}


def test_compare_names_a_changed_number_and_accepts_rounding() -> None:
    old = {"loss": [[1.0, 2.0], [0.5, 0.25]], "entropy": [[0.69], [0.68]]}
    rounded = {"loss": [[1.0 + 5e-5, 2.0], [0.5, 0.25]], "entropy": [[0.69], [0.68]]}
    assert canaries.compare(rounded, old) == []
    moved = {"loss": [[1.0, 2.0], [0.5, 0.26]], "entropy": [[0.69], [0.68]]}
    (problem,) = canaries.compare(moved, old)
    assert problem.startswith("loss[update 2]")
    assert canaries.compare({"loss": old["loss"]}, old) == ["metrics differ: ['entropy']"]
    assert canaries.close(float("nan"), float("nan")) and not canaries.close(1.0, float("nan"))
