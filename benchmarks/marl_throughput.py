"""IPPO on MPE simple_spread: jaxrl against JaxMARL's own `ippo_ff_mpe.py`, side by side.

    python benchmarks/marl_throughput.py --jaxmarl-repo ~/JaxMARL       # 2M steps, 5 seeds
    python benchmarks/marl_throughput.py --jaxmarl-repo ~/JaxMARL --total-steps 16384 \\
        --seeds 2 --repeats 1                                            # a smoke test

The issue-35 target: IPPO's return within one standard deviation of JaxMARL's at the
same budget and seeds, at no fewer environment steps per second. Both train with
JaxMARL's `ippo_ff_mpe.yaml` (16 environments x 128 steps, 4 epochs x 4 minibatches,
lr 2.5e-4 annealed, 64-64 tanh networks with parameters shared by the agents, clip
0.2, entropy 0.01, grad norm 0.5), the seeds vmapped in one program; each measurement
is a fresh worker process printing one JSON line (benchmarks/workers/):

* jaxrl (project venv, `workers/jaxrl_ippo.py`): `ippo` on the built-in SimpleSpread-MPE
  with JaxMARL's episodes (26 steps) and time limits as terminal, as its baseline; the
  driver's `steps_per_second` (compile excluded).
* JaxMARL (`workers/jaxmarl_ippo.py`, in the peer venv `benchmarks/.venvs/jaxmarl`,
  `_harness.JAXMARL_REQUIREMENTS`, or `--peer-python`): `make_train` of
  `baselines/IPPO/ippo_ff_mpe.py` from a checkout of JaxMARL's repository
  (`--jaxmarl-repo`, or the `JAXMARL_REPO` environment variable: `git clone
  https://github.com/FLAIROx/JaxMARL`; the baselines are not in its package), its own
  config with the budget and seeds replaced; compile timed apart.

Returns are each agent's return (JaxMARL's logger multiplies it by the number of agents;
the worker divides), over the episodes that ended in the last 10% of updates, per seed.
Repeats alternate which library goes first; speeds are medians over repeats, returns
the first repeat's seeds (the seeds are the same in every repeat). Writes a table to
stdout and JSON to `--out` (default benchmarks/results/marl_throughput.json). Speed
ratios need a quiet machine (load average below 1.5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from _harness import (
    HERE,
    ensure_peer,
    fmt,
    median,
    run_metadata,
    run_worker,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "marl_throughput.json"
BATCH = 16 * 128  # environment steps per IPPO update (ippo_ff_mpe.yaml)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A library's cell: median speeds over repeats, the first repeat's returns per seed."""
    returns = runs[0]["final_return_per_seed"]
    return {
        "library": runs[0]["library"],
        "seeds": runs[0]["seeds"],
        "total_steps": runs[0]["total_steps"],
        "repeats": len(runs),
        "steps_per_second": median(r["steps_per_second"] for r in runs),
        "compile_seconds": median(r["compile_seconds"] for r in runs),
        "final_return_per_seed": returns,
        "final_return_mean": statistics.fmean(returns),
        "final_return_std": statistics.pstdev(returns) if len(returns) > 1 else None,
    }


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The target's two numbers: jaxrl's mean return minus JaxMARL's in JaxMARL's standard
    deviations over seeds (within one: |x| <= 1), and jaxrl's steps/s over JaxMARL's."""
    std = theirs["final_return_std"]
    gap = ours["final_return_mean"] - theirs["final_return_mean"]
    return {
        "return_gap_in_jaxmarl_std": gap / std if std else None,
        "speed_ratio_jaxrl_over_jaxmarl": ours["steps_per_second"] / theirs["steps_per_second"],
    }


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    total = (args.total_steps // BATCH) * BATCH  # whole updates, the same for both
    peer = None
    if not args.skip_jaxmarl:
        if not args.jaxmarl_repo:
            raise SystemExit(
                "marl_throughput needs a checkout of JaxMARL's repository for its baseline: "
                "--jaxmarl-repo PATH or JAXMARL_REPO (git clone https://github.com/FLAIROx/JaxMARL)"
            )
        peer = args.peer_python or ensure_peer("jaxmarl")
    common = {"total_steps": total, "seeds": args.seeds, "seed": 0}
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.repeats):
        jobs = [("jaxrl", sys.executable, "jaxrl_ippo.py", common)]
        if peer is not None:
            repo = str(Path(args.jaxmarl_repo).expanduser().resolve())
            jobs.append(("jaxmarl", peer, "jaxmarl_ippo.py", {**common, "repo": repo}))
        if rep % 2:  # alternate who goes first
            jobs.reverse()
        for library, python, script, job in jobs:
            result = run_worker(python, script, job, args.timeout)
            runs.setdefault(library, []).append(result)
            print(
                f"  [{rep + 1}/{args.repeats}] {library:<8} steps/s="
                f"{result['steps_per_second']:>10,.0f} compile={result['compile_seconds']:.1f}s "
                f"return={statistics.fmean(result['final_return_per_seed']):.2f}",
                flush=True,
            )
    cells = {library: summarise(rs) for library, rs in runs.items()}
    out: dict[str, Any] = {"total_steps": total, "cells": cells, "runs": runs}
    if "jaxmarl" in cells:
        out["comparison"] = compare(cells["jaxrl"], cells["jaxmarl"])
    return out


def print_table(result: dict[str, Any]) -> None:
    head = (
        f"{'library':<8} {'seeds':>5} {'steps':>9} {'steps/s':>10} {'compile s':>9} {'return':>16}"
    )
    print(head)
    print("-" * len(head))
    for c in result["cells"].values():
        ret = f"{c['final_return_mean']:.2f} +- {fmt(c['final_return_std'], '.2f')}"
        print(
            f"{c['library']:<8} {c['seeds']:>5} {c['total_steps']:>9} "
            f"{fmt(c['steps_per_second'], ',.0f'):>10} {fmt(c['compile_seconds'], '.1f'):>9} "
            f"{ret:>16}"
        )
    if "comparison" in result:
        cmp = result["comparison"]
        print(
            f"return gap (jaxrl - JaxMARL) / JaxMARL's std: "
            f"{fmt(cmp['return_gap_in_jaxmarl_std'], '+.2f')}; steps/s jaxrl / JaxMARL: "
            f"{cmp['speed_ratio_jaxrl_over_jaxmarl']:.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--total-steps", type=int, default=2_000_000, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=5, help="seeds, vmapped in one program each")
    p.add_argument("--repeats", type=int, default=2, help="runs per library (speed medians)")
    p.add_argument(
        "--jaxmarl-repo",
        default=os.environ.get("JAXMARL_REPO"),
        help="a checkout of github.com/FLAIROx/JaxMARL (default: $JAXMARL_REPO)",
    )
    p.add_argument(
        "--peer-python",
        default=None,
        help="a Python with jaxmarl and distrax (default: the venv benchmarks/.venvs/jaxmarl)",
    )
    p.add_argument("--skip-jaxmarl", action="store_true", help="measure jaxrl only")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per worker process")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    warn_if_loaded("speed ratios measured now mislead")
    result = {**run_metadata("marl_throughput", __file__, argv), **run_benchmark(args)}
    print()
    print_table(result)
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
