"""Dreamer speed: gradient updates/s and environment steps/s per backbone and sequence
length, and jaxrl vs the official DreamerV3 at its smallest preset's shapes.

    python benchmarks/dreamer_throughput.py                    # everything (see the README)
    python benchmarks/dreamer_throughput.py --skip-official --skip-matched      # lengths only
    python benchmarks/dreamer_throughput.py --skip-lengths --repeats 3          # matched only

Two parts, each measurement a fresh worker process printing one JSON line:

1. **Lengths** (`workers/jaxrl_dreamer.py`, workload "length"): jaxrl's Dreamer on
   CartPole-v1 at the `xs` size, batch 16 x L for L in `--lengths` (64, 256, 1024),
   for each backbone in `--variants`: `gru` (the RSSM, posterior from the history:
   trained one step at a time), `transformer` (its default 16-step sliding window:
   linear in L), `transformer-full` (the window equal to L: full causal attention,
   quadratic in L) and `ssm` (LRU layers, parallel scan: linear in L). Per cell: the
   gradient step (`Dreamer._train_step`, compiled ahead of time, median of `--iters`
   calls) as updates/s and its cost in ms, XLA's FLOPs per step (loop-weighted) and
   the GFLOP/s they imply; the fused `update` at DreamerV3's train ratio of 32 (one
   gradient step per `16 L / 32` environment steps) as environment steps/s. The plot
   (`--plot`) shows ms per gradient step against L, log-log, one line per variant,
   with slope-1 and slope-2 guides.
2. **Matched shapes**: the official DreamerV3 (`workers/dreamer_official.py`, PyPI
   `dreamer==3.3.1` in the venv `benchmarks/.venvs/dreamer` with the jax it pins,
   0.4.33, CPU) at its `size1m` preset with 64x64x3 images, 4 actions, batch 16 x 64,
   float32; against jaxrl at the same shapes (workload "matched": the `1m` size,
   `image_net="dreamerv3"` at depth 4, GRU, imagination from all 1,024 replayed
   steps), once with the convolution forms `jaxrl.nn.conv` picked (`jaxrl`) and once
   with the plain convolutions the official code runs (`jaxrl-xla-conv`). Repeats
   alternate who goes first; the table shows medians, the ratio jaxrl / official of
   updates/s as each trains (jaxrl's step in a scan of 8, as its driver runs a chunk
   of updates; the official step called once per update, as its training loop does)
   against the target of 3x, the same ratio with both steps called alone, FLOPs per
   update (XLA's cost analysis of each compiled train step, loop-weighted) and GFLOP/s
   against this machine's float32 matmul peak (a jitted 2048^3 matmul, best of 7,
   before and after the workers: `grpo_step.matmul_peak`).

The 1-minute load average is checked before every worker (after letting the previous
worker's load decay, `_harness.settle`); above 1.5 a warning is printed, every run
records it, and a table measured under load says so. Writes JSON to `--out`
(default benchmarks/results/dreamer_throughput.json) and the plot beside it (.png).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _harness import (
    HERE,
    LOAD_WARNING,
    fmt,
    median,
    partial_path,
    run_metadata,
    run_worker,
    settle,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "dreamer_throughput.json"
# The official DreamerV3's venv: the dependencies dreamer 3.3.1's setup declares (its
# `jax[cuda12]==0.4.33` as the CPU build; numpy < 2 as it pins), the versions of
# elements, ninjax and portal current at its release, and optax/chex versions that
# support jax 0.4.33. The package itself cannot be pip-installed (see `official_python`).
DREAMER_REQUIREMENTS = [
    "jax==0.4.33",
    "jaxlib==0.4.33",
    "numpy<2",
    "elements==3.18.1",
    "ninjax==3.5.1",
    "portal==3.5.0",
    "optax==0.2.4",
    "chex==0.1.87",
    "einops",
    "ruamel.yaml",
    "cloudpickle",
]
DREAMER_PACKAGE = "dreamer==3.3.1"
VARIANTS = ("gru", "transformer", "transformer-full", "ssm")
TARGET = 3.0  # jaxrl / official updates per second at matched shapes (the issue's)
LOADED_REASON = "other work on the machine slows every worker; measure on a quiet machine"


def official_python() -> Path:
    """The Python of the official DreamerV3's venv, made on first use.

    `pip install dreamer==3.3.1` fails: its sdist's setup.py reads a requirements.txt
    the sdist does not contain. So the venv gets the dependencies
    (`DREAMER_REQUIREMENTS`), and the package's own source comes from the same sdist,
    fetched by pip (`pip download --no-clean` leaves the unpacked sdist behind when the
    metadata step fails) and put on the venv's path with a .pth file.
    """
    from _venvs import VENV_ROOT, ensure_venv

    python = ensure_venv("dreamer", DREAMER_REQUIREMENTS)
    source = VENV_ROOT / "dreamer" / "src" / DREAMER_PACKAGE.replace("==", "-")
    if not (source / "dreamerv3" / "agent.py").exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [str(python), "-m", "pip", "download", "--no-deps", "--no-clean"]
                + ["--no-build-isolation", "--quiet", "-d", f"{tmp}/dl", DREAMER_PACKAGE],
                env={**os.environ, "TMPDIR": tmp},
                capture_output=True,
            )
            found = glob.glob(f"{tmp}/pip-*/dreamer*/dreamerv3/agent.py")
            if not found:
                raise RuntimeError(f"could not fetch the source of {DREAMER_PACKAGE} with pip")
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(Path(found[0]).parents[1], source)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "dreamer_source.pth").write_text(f"{source}\n")
    return python


def length_job(variant: str, length: int, iters: int) -> dict[str, Any]:
    backbone = "transformer" if variant.startswith("transformer") else variant
    job: dict[str, Any] = {"backbone": backbone, "batch_length": length, "iters": iters}
    if variant == "transformer-full":
        job["window"] = length
    return job


SETTLE_SECONDS = [90.0]  # the longest wait for the load to settle before a worker


def run_one(python, script: str, job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One worker after the load settles; a failed worker (e.g. out of memory) becomes a
    row with its error instead of ending the benchmark."""
    settle(max_wait=SETTLE_SECONDS[0])
    load = warn_if_loaded(LOADED_REASON)
    try:
        res = run_worker(python, script, job, timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"  failed: {str(error)[-600:]}", flush=True)
        res = {"error": str(error)[-2000:]}
    res["load_average_at_start"] = load
    res["job"] = job
    return res


def run_lengths(args: argparse.Namespace) -> list[dict[str, Any]]:
    runs = []
    for length in args.lengths:
        for variant in args.variants:
            print(f"[lengths] {variant} L={length}", flush=True)
            res = run_one(
                sys.executable,
                "jaxrl_dreamer.py",
                length_job(variant, length, args.iters),
                args.timeout,
            )
            res["variant"] = variant
            res["batch_length"] = length
            runs.append(res)
            progress = partial_path(args.out.with_name(args.out.stem + "_lengths.json"))
            write_results(progress, {"partial": True, "lengths": runs})
            if "error" in res:
                print(f"  {res['error'][-300:]}", flush=True)
            else:
                print(
                    f"  {1e3 * res['train_step_seconds']:9.1f} ms/step "
                    f"{res['updates_per_second']:7.2f} upd/s "
                    f"{res['env_steps_per_second']:9.0f} env steps/s "
                    f"{fmt(res['gflop_per_s'], '.1f')} GFLOP/s "
                    f"(load {res['load_average_at_start']:.2f}, {res['process_seconds']:.0f}s)",
                    flush=True,
                )
    return runs


def run_matched(args: argparse.Namespace) -> list[dict[str, Any]]:
    matched = {"workload": "matched", "update": False}  # the gradient step only
    jobs = [(sys.executable, "jaxrl_dreamer.py", {**matched, "conv": "fast"})]
    if not args.skip_xla_conv:
        jobs.append((sys.executable, "jaxrl_dreamer.py", {**matched, "conv": "xla"}))
    if not args.skip_official:
        jobs.append((official_python(), "dreamer_official.py", {}))
    runs = []
    for rep in range(args.repeats):
        for python, script, job in jobs[:: -1 if rep % 2 else 1]:
            job = {**job, "iters": args.iters}
            xla_conv = job.get("conv") == "xla"
            print(f"[matched repeat {rep + 1}/{args.repeats}] {script} {job}", flush=True)
            # The plain-convolution row only explains the gap; on some CPUs XLA's
            # convolution gradients are so slow that it gets a shorter limit of its own.
            timeout = args.xla_conv_timeout if xla_conv else args.timeout
            res = run_one(python, script, job, timeout)
            res["repeat"] = rep
            if "error" in res:
                res["failed_row"] = "jaxrl-xla-conv" if xla_conv else script.removesuffix(".py")
                res["timeout_seconds"] = timeout
            else:
                res["row"] = "jaxrl-xla-conv" if xla_conv else res["library"]
                print(
                    f"  {res['row']:<15} {1e3 * res['train_step_seconds']:8.1f} ms/step "
                    f"{res['updates_per_second']:6.2f} upd/s "
                    f"{fmt(res['gflop_per_s'], '.1f')} GFLOP/s "
                    f"(load {res['load_average_at_start']:.2f}, {res['process_seconds']:.0f}s)",
                    flush=True,
                )
            runs.append(res)
    return runs


def summarise_matched(runs: list[dict[str, Any]], peak: float | None) -> dict[str, Any]:
    """Medians per row; the ratio jaxrl / official and whether it meets the target."""
    rows: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["row"] for r in runs if "row" in r):
        mine = [r for r in runs if r.get("row") == name]
        seconds = statistics.median(r["train_step_seconds"] for r in mine)
        flops = mine[0]["train_step_flops"]
        in_loop = median(r.get("train_step_in_loop_seconds") for r in mine)
        rows[name] = {
            "row": name,
            "repeats": len(mine),
            "train_step_ms": 1e3 * seconds,
            # process CPU seconds (all threads): steadier than wall time on a shared machine
            "train_step_cpu_ms": 1e3 * statistics.median(r["train_step_cpu_seconds"] for r in mine),
            "updates_per_second": 1.0 / seconds,
            # the step inside a lax.scan, as jaxrl's training runs it (None: not measured)
            "train_step_in_loop_ms": None if in_loop is None else 1e3 * in_loop,
            "loop_length": mine[0].get("loop_length"),
            # its products timed alone x their trip counts (benchmarks/matmul_floor.py)
            "matmul_floor_ms": median(
                1e3 * r["train_step_matmul_floor"]["seconds"]
                for r in mine
                if r.get("train_step_matmul_floor")
            ),
            "gflop_per_update": None if flops is None else flops / 1e9,
            "gflop_per_s": None if flops is None else flops / seconds / 1e9,
            "percent_of_peak": None
            if flops is None or not peak
            else 100 * flops / seconds / 1e9 / peak,
            # fresh temporaries' pages touched per step (alone; in the scan for jaxrl)
            "minor_faults_per_step": mine[0].get("minor_faults_per_step"),
            "params": mine[0]["params"],
            "dtype": mine[0]["dtype"],
            "compile_seconds": mine[0]["compile_seconds"],
            "load_average_max": max(r["load_average_at_start"] for r in mine),
        }
    ours, theirs = rows.get("jaxrl"), rows.get("dreamerv3")
    ratio = cpu_ratio = loop_ratio = None
    if ours and theirs:
        ratio = ours["updates_per_second"] / theirs["updates_per_second"]
        cpu_ratio = theirs["train_step_cpu_ms"] / ours["train_step_cpu_ms"]
        if ours["train_step_in_loop_ms"]:
            # as each library trains: jaxrl's step in its scan, the official one alone
            loop_ratio = theirs["train_step_ms"] / ours["train_step_in_loop_ms"]
    failed = [
        {
            "row": r["failed_row"],
            "repeat": r["repeat"],
            "timeout_seconds": r["timeout_seconds"],
            "error": r["error"].strip().splitlines()[-1][:200] if r["error"].strip() else "",
        }
        for r in runs
        if "failed_row" in r
    ]
    return {
        "rows": list(rows.values()),
        # workers that failed or ran past their limit (e.g. the plain convolutions'
        # gradients on a CPU where XLA runs them slowly): a lower bound, not a row
        "failed_rows": failed,
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
        "ratio_as_trained": loop_ratio,
        "target": TARGET,
        # The target is judged as each library trains: jaxrl's driver runs a chunk of
        # updates as one program, the official loop calls its step once per update.
        "target_met": None if loop_ratio is None else loop_ratio >= TARGET,
    }


def print_lengths(runs: list[dict[str, Any]]) -> None:
    print("\nGradient step (batch 16 x L, CartPole, xs) and fused update (train ratio 32)")
    head = (
        f"{'variant':<17} {'L':>5} {'ms/step':>9} {'upd/s':>7} {'x L=64':>7} "
        f"{'GFLOP/step':>10} {'GFLOP/s':>8} {'env st/s':>9} {'compile s':>9} {'load':>5}"
    )
    print(head)
    print("-" * len(head))
    base = {
        r["variant"]: r
        for r in runs
        if r["batch_length"] == min(x["batch_length"] for x in runs) and "error" not in r
    }
    for variant in dict.fromkeys(r["variant"] for r in runs):
        for r in [x for x in runs if x["variant"] == variant]:
            if "error" in r:
                print(
                    f"{variant:<17} {r['batch_length']:>5}  failed: "
                    f"{r['error'].strip().splitlines()[-1][:60]}"
                )
                continue
            growth = (
                r["train_step_seconds"] / base[variant]["train_step_seconds"]
                if variant in base
                else None
            )
            flops = r["train_step_flops"]
            print(
                f"{variant:<17} {r['batch_length']:>5} {1e3 * r['train_step_seconds']:>9.1f} "
                f"{r['updates_per_second']:>7.2f} {fmt(growth, '.1f'):>7} "
                f"{fmt(None if flops is None else flops / 1e9, '.2f'):>10} "
                f"{fmt(r['gflop_per_s'], '.1f'):>8} {r['env_steps_per_second']:>9.0f} "
                f"{r['compile_seconds']['train_step']:>9.1f} {r['load_average_at_start']:>5.2f}"
            )
    print("x L=64 = this step's time / the same variant's at the shortest length (L x4 per row).")


def print_matched(summary: dict[str, Any], peak: float | None) -> None:
    print(
        "\nMatched shapes (DreamerV3 size1m: 64x64x3, batch 16 x 64, float32); "
        f"float32 matmul peak {fmt(peak, '.1f')} GFLOP/s"
    )
    head = (
        f"{'row':<15} {'ms/step':>9} {'cpu ms':>8} {'upd/s':>7} {'GFLOP/upd':>9} {'GFLOP/s':>8} "
        f"{'% peak':>6} {'in loop ms':>10} {'params':>9} {'dtype':>8} {'load':>5}"
    )
    print(head)
    print("-" * len(head))
    for r in summary["rows"]:
        print(
            f"{r['row']:<15} {r['train_step_ms']:>9.1f} {r['train_step_cpu_ms']:>8.0f} "
            f"{r['updates_per_second']:>7.3f} "
            f"{fmt(r['gflop_per_update'], '.1f'):>9} {fmt(r['gflop_per_s'], '.1f'):>8} "
            f"{fmt(r['percent_of_peak'], '.0f'):>6} {fmt(r['train_step_in_loop_ms'], '.1f'):>10} "
            f"{r['params']:>9,} {r['dtype']:>8} "
            f"{r['load_average_max']:>5.2f}"
        )
    for f in summary.get("failed_rows", []):
        print(
            f"{f['row']:<15} failed in repeat {f['repeat'] + 1} (limit "
            f"{f['timeout_seconds']:.0f} s per worker): {f['error'][:100]}"
        )
    if summary.get("ratio_as_trained") is not None:
        ours = next(r for r in summary["rows"] if r["row"] == "jaxrl")
        print(
            f"jaxrl / official updates/s as each trains = {summary['ratio_as_trained']:.2f} "
            f"(target >= {TARGET:.0f}: {'met' if summary['target_met'] else 'NOT met'}): "
            f"jaxrl's step inside a scan of {ours['loop_length']} steps, as its driver runs "
            "a chunk of updates; the official one called once per step, as its loop does"
        )
    if summary["ratio"] is not None:
        print(
            f"with both steps called alone: {summary['ratio']:.2f}x (by process CPU time "
            f"{summary['cpu_ratio']:.2f}); a call alone also faults in its temporaries' "
            "pages (minor_faults_per_step in the JSON)"
        )
    official = next((r for r in summary["rows"] if r["row"] == "dreamerv3"), None)
    for r in summary["rows"]:
        if r.get("matmul_floor_ms"):
            best = (
                f"; at that floor {official['train_step_ms'] / r['matmul_floor_ms']:.2f}x "
                "the official step"
                if official
                else ""
            )
            print(
                f"{r['row']}: matmul floor (every product timed alone x its trip count) "
                f"{r['matmul_floor_ms']:.1f} ms{best}"
            )


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """ms per gradient step against the sequence length, log-log, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for variant in dict.fromkeys(r["variant"] for r in runs):
        ok = [r for r in runs if r["variant"] == variant and "error" not in r]
        if ok:
            xs = [r["batch_length"] for r in ok]
            ax.plot(xs, [1e3 * r["train_step_seconds"] for r in ok], "o-", label=variant)
    lengths = sorted({r["batch_length"] for r in runs})
    first = [
        1e3 * r["train_step_seconds"]
        for r in runs
        if "error" not in r and r["batch_length"] == lengths[0]
    ]
    if first and len(lengths) > 1:
        y0 = min(first)
        for slope, style in ((1, ":"), (2, "--")):
            ax.plot(
                lengths,
                [y0 * (x / lengths[0]) ** slope for x in lengths],
                "k" + style,
                lw=0.8,
                label=f"slope {slope}",
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L (batch 16 x L)")
    ax.set_ylabel("ms per gradient step")
    ax.set_title("jaxrl Dreamer: cost of a gradient step vs length (CPU)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--iters", type=int, default=5, help="timed calls per measurement (median)")
    p.add_argument("--repeats", type=int, default=2, help="matched-shape runs per row")
    p.add_argument("--skip-lengths", action="store_true")
    p.add_argument("--skip-matched", action="store_true")
    p.add_argument("--skip-official", action="store_true")
    p.add_argument(
        "--skip-xla-conv", action="store_true", help="no jaxrl row with plain convolutions"
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker process")
    p.add_argument(
        "--xla-conv-timeout",
        type=float,
        default=600.0,
        help="seconds for the plain-convolution worker (a failed row past it, not a hang)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=90.0,
        help="longest wait (s) for the load average to fall below 1.5 before a worker",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    SETTLE_SECONDS[0] = args.settle
    warn_if_loaded(LOADED_REASON)
    sys.path.insert(0, str(HERE))
    from grpo_step import matmul_peak

    result: dict[str, Any] = run_metadata("dreamer_throughput", __file__, argv)
    peaks = [matmul_peak()]
    print(f"float32 matmul peak: {peaks[0]['gflop_per_s_best']:.1f} GFLOP/s", flush=True)
    if not args.skip_matched:
        result["matched_runs"] = run_matched(args)
        write_results(partial_path(args.out), result)  # progress, outside the repository
    if not args.skip_lengths:
        result["lengths"] = run_lengths(args)
    peaks.append(matmul_peak())
    peak = max(x["gflop_per_s_best"] for x in peaks)
    result["matmul_peak"] = peaks
    result["matmul_peak_gflop_per_s"] = peak
    loads = [
        r["load_average_at_start"]
        for r in result.get("lengths", []) + result.get("matched_runs", [])
    ]
    result["load_average_max"] = max(loads, default=None)
    result["loaded"] = bool(loads) and max(loads) > LOAD_WARNING
    result["load_average_at_end"] = list(os.getloadavg())
    if result["loaded"]:
        print(
            "\n*** MEASURED UNDER LOAD (1-min load average up to "
            f"{max(loads):.1f} > {LOAD_WARNING}) ***"
        )
    if "lengths" in result:
        print_lengths(result["lengths"])
        plot(result["lengths"], args.out.with_suffix(".png"))
    if "matched_runs" in result:
        result["matched"] = summarise_matched(result["matched_runs"], peak)
        if result["loaded"] and result["matched"]["ratio"] is not None:
            result["matched"]["note"] = "measured under load"
        print_matched(result["matched"], peak)
    print(
        f"load average: start {result['load_average_at_start'][0]:.2f}, max before a worker "
        f"{fmt(result['load_average_max'], '.2f')}, end {result['load_average_at_end'][0]:.2f}"
    )
    write_results(args.out, result)
    partial_path(args.out).unlink(missing_ok=True)
    partial_path(args.out.with_name(args.out.stem + "_lengths.json")).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
