"""Final returns of PPO's per-environment presets: the long learning runs.

    python benchmarks/ppo_returns.py                      # every preset, 4 seeds
    python benchmarks/ppo_returns.py --envs CartPole-v1 Acrobot-v1 --seeds 8

Prints a markdown table (paste it into benchmarks/README.md) and writes
benchmarks/results/ppo_returns.json. Returns are `summary.json`'s
`final_return_mean`/`final_return_std`: the episode-weighted mean return of
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
from jaxrl.algorithms.ppo import PRESETS, default_config

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=sorted(PRESETS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--total-steps", type=int, default=None, help="override every preset's budget"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "ppo_returns.json"))
    args = parser.parse_args()

    rows = []
    for env in args.envs:
        overrides = {"total_steps": args.total_steps} if args.total_steps else {}
        budget = overrides.get("total_steps", default_config(env).total_steps)
        t0 = time.perf_counter()
        summary = jaxrl.train(
            "ppo", env=env, num_seeds=args.seeds, progress=False, **overrides
        ).summary
        rows.append(
            {
                "env": env,
                "seeds": args.seeds,
                "env_steps": budget,
                "final_return_mean": summary["final_return_mean"],
                "final_return_std": summary["final_return_std"],
                "steps_per_second": summary["steps_per_second"],
                "compile_seconds": summary["compile_seconds"],
                "wall_seconds": time.perf_counter() - t0,
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
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": shlex.join(["python", "benchmarks/ppo_returns.py", *sys.argv[1:]]),
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "load_average": os.getloadavg(),  # 1, 5, 15 min: how busy the host was
                "machine": {
                    "platform": platform.platform(),
                    "devices": [str(d) for d in jax.devices()],
                },
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
