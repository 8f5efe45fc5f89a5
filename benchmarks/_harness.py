"""What the library-comparison benchmarks share: workers, peers' venvs, medians, tables.

`benchmarks/ppo_throughput.py` and `benchmarks/offpolicy_throughput.py` measure
jaxrl against other libraries the same way: every measurement is a fresh worker
process (`benchmarks/workers/`) that prints one JSON line; peers run in private
virtualenvs (`benchmarks/_venvs.py`); repeats alternate the order of the
libraries; the table shows medians and the ratio jaxrl / peer per group; the
results file records the exact command, the date and the load average. This
module holds those pieces once:

* `PEER_REQUIREMENTS` and `ensure_peer`: the peers' venvs (rejax, sbx, sb3, jaxmarl);
* `run_worker`: one worker process, its JSON line parsed (optionally on one core,
  `one_core`);
* `Recorder`: collects a benchmark's runs, prints one line per run and keeps an
  interrupted run's progress in a file outside the repository;
* `median`, `summarise`, `fmt`, `print_table`, `cell`: from runs to a table;
* `warn_if_loaded`, `run_metadata`, `write_results`: the results file's header,
  the load-average warning and the final write;
* `time_calls`: medians of repeated calls, for the workers' per-phase profiles;
* `minor_faults`: the process's page faults so far, to count a step's fresh pages.

Nothing here imports jax or jaxrl (standard library only), so workers in the
peers' venvs can import it too (`time_calls`).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"

# Requirements of the peers' private virtualenvs (see benchmarks/_venvs.py). rejax's
# algorithms use gymnax 0.0.9's 5-tuple `step` (gymnax 1.0 returns six values), with
# the same jax as ours. sbx-rl 0.28.0 supports jax < 0.12; it pulls SB3 (and so torch).
REJAX_REQUIREMENTS = ["rejax==0.1.3", "gymnax==0.0.9", "jax==0.10.2", "jaxlib==0.10.2"]
SB3_REQUIREMENTS = ["torch==2.13.0", "stable-baselines3", "gymnasium"]
SBX_REQUIREMENTS = [
    "sbx-rl==0.28.0",
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "torch==2.13.0",
    "gymnasium",
]
# JaxMARL's baselines (benchmarks/marl_throughput.py) run from a checkout of its repository
# on the jaxmarl package; its IPPO uses distrax, its config is yaml.
JAXMARL_REQUIREMENTS = [
    "jaxmarl==0.2.0",
    "distrax==0.1.9",
    "pyyaml",
    "jax==0.10.2",
    "jaxlib==0.10.2",
]
PEER_REQUIREMENTS = {
    "rejax": REJAX_REQUIREMENTS,
    "sb3": SB3_REQUIREMENTS,
    "sbx": SBX_REQUIREMENTS,
    "jaxmarl": JAXMARL_REQUIREMENTS,
}

# Display names of the libraries that train one seed per process (no vectorisation).
_PER_PROCESS_NAMES = {"sb3": "SB3", "sbx": "sbx"}

# Load average (1 min) above which a measurement is not to be trusted.
LOAD_WARNING = 1.5

# Per-run timing fields whose medians a summary cell reports.
_MEDIAN_FIELDS = (
    "steps_per_second",
    "cpu_steps_per_second",
    "compile_seconds",
    "cpu_compile_seconds",
    "train_seconds",
)


def ensure_peer(name: str) -> Path:
    """The Python of peer `name`'s venv (`PEER_REQUIREMENTS`), created on first use."""
    sys.path.insert(0, str(HERE))
    from _venvs import ensure_venv

    if name not in PEER_REQUIREMENTS:
        raise ValueError(f"unknown peer {name!r}: must be one of {sorted(PEER_REQUIREMENTS)}")
    return ensure_venv(name, PEER_REQUIREMENTS[name])


def one_core() -> set[int]:
    """One CPU this process may run on (the lowest of its affinity mask), for `run_worker`."""
    return {min(os.sched_getaffinity(0))}


def run_worker(
    python: Path | str,
    script: str,
    args: dict[str, Any],
    timeout: float,
    launcher: list[str] | None = None,
    cpus: set[int] | None = None,
) -> dict[str, Any]:
    """Runs `workers/<script>` with `args` as JSON; returns its last JSON stdout line
    (one that starts with '{"'), parsed. `launcher` replaces `python` as the command
    that runs the script (e.g. `[torchrun, "--nproc_per_node", "2"]`).

    `cpus` restricts the worker process to those cores from its start (its CPU
    affinity, set before it runs anything, as `taskset` does): XLA sizes its CPU
    thread pool from that mask, and torch its default thread count. A small
    launcher sets it and then execs the worker (no `preexec_fn`, which forks a
    possibly multithreaded caller). The result records it as `cpus` (None: every
    core this process may use).
    """
    cmd = [*(launcher or [str(python)]), str(WORKERS / script), json.dumps(args)]
    if cpus is not None:
        pin = (
            f"import os, sys; os.sched_setaffinity(0, {sorted(cpus)}); "
            "os.execvp(sys.argv[1], sys.argv[1:])"
        )
        cmd = [sys.executable, "-c", pin, *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=WORKERS)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"')]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"worker {script} {args} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    result = json.loads(lines[-1])
    result["process_seconds"] = time.perf_counter() - t0
    result["cpus"] = None if cpus is None else sorted(cpus)
    return result


class Recorder:
    """A benchmark's runs grouped by cell (`key` fields), saved as they come in.

    Each run is printed as one line; with `partial_out`, all runs so far are
    rewritten to that file after each one, so an interrupted benchmark keeps its
    progress (the file lives outside the repository and is removed at the end).
    """

    def __init__(
        self, key: tuple[str, ...] = ("library", "seeds"), partial_out: Path | None = None
    ):
        self.key = key
        self.partial_out = partial_out
        self.cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def runs(self) -> list[dict[str, Any]]:
        return [r for rs in self.cells.values() for r in rs]

    def __call__(self, result: dict[str, Any], label: str = "") -> None:
        self.cells.setdefault(tuple(result[k] for k in self.key), []).append(result)
        if self.partial_out is not None:
            self.partial_out.write_text(
                json.dumps({"partial": True, "runs": self.runs()}, indent=2) + "\n"
            )
        print(
            f"  {label}{result['library']:<6} seeds={result['seeds']:<3} "
            f"steps/s={result['steps_per_second']:>12,.0f} "
            f"cpu steps/s={fmt(result.get('cpu_steps_per_second'), ',.0f'):>12} "
            f"compile={result['compile_seconds']:.1f}s return={result['eval_return_mean']:.1f} "
            f"({result['process_seconds']:.0f}s)",
            flush=True,
        )


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None (None if there are none)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(runs: list[dict[str, Any]], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Medians of a cell's repeats (returns: mean over repeats of the per-run seed means).

    `keep` names extra fields copied from the first run (e.g. the benchmark's task).
    """
    out = {k: runs[0][k] for k in keep}
    out.update(
        library=runs[0]["library"],
        seeds=runs[0]["seeds"],
        total_steps=runs[0]["total_steps"],
        repeats=len(runs),
    )
    for key in _MEDIAN_FIELDS:
        out[key] = median(r.get(key) for r in runs)
    for key in ("eval_return_mean", "train_return_mean"):
        vals = [r.get(key) for r in runs if r.get(key) is not None]
        out[key] = statistics.fmean(vals) if vals else None
    seeds_all = [x for r in runs for x in r.get("eval_return_per_seed", [])]
    out["eval_return_std_over_seeds"] = statistics.pstdev(seeds_all) if len(seeds_all) > 1 else None
    return out


def fmt(x: float | None, spec: str) -> str:
    """`format(x, spec)`, or "n/a" for a missing value."""
    return "n/a" if x is None else format(x, spec)


def cell(cells: list[dict[str, Any]], library: str, seeds: int) -> dict[str, Any] | None:
    """The summary cell of `library` at `seeds` seeds, if measured."""
    return next((c for c in cells if c["library"] == library and c["seeds"] == seeds), None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def print_table(
    cells: list[dict[str, Any]],
    per_process: tuple[str, ...] = ("sb3",),
    matched: tuple[str, str] = ("jaxrl-matched", "rejax"),
) -> None:
    """One group per seed count, each with the ratio jaxrl / row.

    Libraries in `per_process` (no seed vectorisation) join every group at their
    1-seed rate, labelled `1*`. Then, per seed count, the matched-work ratio
    `matched[0] / matched[1]` where both were measured.
    """
    base = {c["seeds"]: c for c in cells if c["library"] == "jaxrl"}
    single = [c for c in cells if c["library"] in per_process]
    w = max([8, *(len(c["library"]) for c in cells)])
    head = (
        f"{'library':<{w}} {'seeds':>5} {'steps':>8} {'steps/s':>10} {'jaxrl/x':>8} "
        f"{'cpu st/s':>10} {'jaxrl/x':>8} {'compile s':>9} {'return':>7} {'train ret':>9}"
    )
    print(head)
    print("-" * len(head))
    for seeds in sorted(base):
        ref = base[seeds]
        group = [c for c in cells if c["seeds"] == seeds and c["library"] not in per_process]
        for c in group + single:
            ratio = _ratio(ref["steps_per_second"], c["steps_per_second"])
            cpu_ratio = _ratio(ref.get("cpu_steps_per_second"), c.get("cpu_steps_per_second"))
            label = "1*" if c["library"] in per_process else f"{c['seeds']}"
            print(
                f"{c['library']:<{w}} {label:>5} {c['total_steps']:>8} "
                f"{fmt(c['steps_per_second'], ',.0f'):>10} "
                f"{fmt(ratio, '.2f'):>8} {fmt(c.get('cpu_steps_per_second'), ',.0f'):>10} "
                f"{fmt(cpu_ratio, '.2f'):>8} {fmt(c['compile_seconds'], '.1f'):>9} "
                f"{fmt(c['eval_return_mean'], '.1f'):>7} {fmt(c['train_return_mean'], '.1f'):>9}"
            )
    print("jaxrl/x = jaxrl's throughput / this row's (same group); > 1 means jaxrl is faster.")
    for seeds in sorted(base):
        ours, theirs = cell(cells, matched[0], seeds), cell(cells, matched[1], seeds)
        if ours and theirs and ours["steps_per_second"] and theirs["steps_per_second"]:
            cpu = _ratio(ours.get("cpu_steps_per_second"), theirs.get("cpu_steps_per_second"))
            print(
                f"matched work, {seeds} seeds: {matched[0]} / {matched[1]} = "
                f"{ours['steps_per_second'] / theirs['steps_per_second']:.2f} "
                f"(cpu {fmt(cpu, '.2f')})"
            )
    present = [lib for lib in per_process if any(c["library"] == lib for c in single)]
    if present:
        names = " and ".join(_PER_PROCESS_NAMES.get(lib, lib) for lib in present)
        verb = "runs" if len(present) == 1 else "run"
        print(
            f"1* {names} {verb} one seed per process (no vectorisation); "
            "N seeds one after another run at its 1-seed rate."
        )


def settle(max_wait: float = 90.0, poll: float = 5.0) -> float:
    """Sleeps until the 1-minute load average is at most `LOAD_WARNING` (at most
    `max_wait` seconds); returns the seconds waited.

    A worker that has just finished keeps the 1-minute average up for a while (two busy
    threads leave ~2.0, which decays by e^-t/60), so without a pause a quiet machine
    looks loaded to the next worker's check."""
    start = time.monotonic()
    while os.getloadavg()[0] > LOAD_WARNING and time.monotonic() - start < max_wait:
        time.sleep(poll)
    return time.monotonic() - start


def warn_if_loaded(reason: str) -> float:
    """Warns on stderr when the 1-minute load average exceeds `LOAD_WARNING`; returns it."""
    load = os.getloadavg()[0]
    if load > LOAD_WARNING:
        print(f"warning: load average {load:.1f} > {LOAD_WARNING}: {reason}", file=sys.stderr)
    return load


def run_metadata(benchmark: str, script: str, argv: list[str] | None) -> dict[str, Any]:
    """The results file's header: what ran, when, and how busy the machine was."""
    return {
        "benchmark": benchmark,
        # The command as typed (the --out path included), so the file says how it was made.
        "command": " ".join(
            [
                "python",
                "benchmarks/" + Path(script).name,
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_at_start": list(os.getloadavg()),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
    }


def partial_path(out: Path) -> Path:
    """Where an unfinished run of a benchmark writing `out` keeps its progress."""
    return Path(tempfile.gettempdir()) / f"{out.stem}.partial.json"


def previous_results(out: Path) -> dict[str, Any]:
    """The results file as it is now ({} if there is none)."""
    return json.loads(out.read_text()) if out.exists() else {}


def write_results(out: Path, result: dict[str, Any]) -> None:
    """Writes the results file (creating its directory) and says where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def minor_faults() -> int:
    """Minor page faults of this process so far (first touches of fresh pages).

    XLA's CPU runtime allocates a program's temporaries at every call, and glibc returns
    blocks that large to the kernel when they are freed, so each call of a jitted step
    touches fresh pages: the difference around calls counts them."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_calls(call: Callable[[], object], iters: int) -> dict[str, float]:
    """Times `iters` calls of `call` (which must block until its work is done) after
    one warm-up call: median and minimum wall seconds, median process-CPU seconds.
    On a shared machine the minimum is the least load-sensitive estimate."""
    call()
    walls, cpus = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {
        "wall": statistics.median(walls),
        "wall_min": min(walls),
        "cpu": statistics.median(cpus),
    }
