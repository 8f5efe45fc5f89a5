"""Final returns of an algorithm's per-environment presets: the long learning runs.

    python benchmarks/returns.py                          # PPO, every preset, 4 seeds
    python benchmarks/returns.py --envs CartPole-v1 Acrobot-v1 --seeds 8
    python benchmarks/returns.py --algorithm sac --envs Pendulum-v1

Prints a markdown table (paste it into benchmarks/README.md) and writes
benchmarks/results/<algorithm>_returns.json. Rows of earlier runs in that file are
kept unless this run re-measures them (same env, seeds and steps), and every row
records the command, date and load average of the run that measured it, so a
table gathered from several invocations needs no merging by hand. Returns are
`summary.json`'s `final_return_mean`/`final_return_std`: the episode-weighted mean return of
the episodes that ended in the last 10% of updates, averaged over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shlex
import sys
import time

import jax

import jaxrl
from jaxrl import algorithms

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algorithm", default="ppo", choices=algorithms.names())
    parser.add_argument("--envs", nargs="+", help="environment ids (default: every preset)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--total-steps", type=int, default=None, help="override every preset's budget"
    )
    parser.add_argument("--out", help="JSON path (default: results/<algorithm>_returns.json)")
    args = parser.parse_args()
    module = algorithms.get(args.algorithm)
    envs = args.envs or sorted(module.PRESETS)
    out = pathlib.Path(args.out or HERE / "results" / f"{args.algorithm}_returns.json")

    provenance = {
        "command": shlex.join(["python", "benchmarks/returns.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": os.getloadavg(),  # 1, 5, 15 min: how busy the host was
    }
    rows = []
    for env in envs:
        overrides = {"total_steps": args.total_steps} if args.total_steps else {}
        budget = overrides.get("total_steps", module.default_config(env).total_steps)
        t0 = time.perf_counter()
        summary = jaxrl.train(
            args.algorithm, env=env, num_seeds=args.seeds, progress=False, **overrides
        ).summary
        rows.append(
            {
                "algorithm": args.algorithm,
                "env": env,
                "seeds": args.seeds,
                "env_steps": budget,
                "final_return_mean": summary["final_return_mean"],
                "final_return_std": summary["final_return_std"],
                "steps_per_second": summary["steps_per_second"],
                "compile_seconds": summary["compile_seconds"],
                "wall_seconds": time.perf_counter() - t0,
                **provenance,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    print("\n| env | seeds | env steps | final return (mean ± std) | steps/s | compile s |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['env']} | {r['seeds']} | {r['env_steps']:,} | {r['final_return_mean']:.1f} ± "
            f"{r['final_return_std']:.1f} | {r['steps_per_second']:,.0f} | "
            f"{r['compile_seconds']:.0f} |"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    measured = {(r["env"], r["seeds"], r["env_steps"]) for r in rows}
    earlier = json.loads(out.read_text()) if out.exists() else {}
    # Rows from before per-row provenance carry their file's (as it was recorded).
    inherited = {
        k: earlier[k] for k in ("command", "commands", "date", "load_average") if k in earlier
    }
    kept = [
        {**inherited, **r}
        for r in earlier.get("results", [])
        if (r["env"], r["seeds"], r["env_steps"]) not in measured
    ]
    out.write_text(
        json.dumps(
            {
                **provenance,  # of the latest run; each row has its own
                "machine": {
                    "platform": platform.platform(),
                    "devices": [str(d) for d in jax.devices()],
                },
                "results": kept + rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
