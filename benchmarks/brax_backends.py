"""Brax's physics backends on one environment: random-policy steps per second and compile
time through jaxrl's adapter (`brax:<name>@<backend>`), to choose the backend of a dataset
recipe (benchmarks/offline_datasets.py's Hopper; docs/offline.md says which and why).

    python benchmarks/brax_backends.py                                   # hopper, every backend
    python benchmarks/brax_backends.py --env hopper --backends positional spring --copies 1 16

For each backend and number of vmapped copies, one jitted program runs `--steps` steps of
uniformly random actions from a reset (benchmarks/env_throughput.py's `build_rollout`: one
`lax.scan` of a vmapped step, our auto-reset included); the first call's extra time is the
compile, then the median of `--repeats` calls is timed. Prints one JSON line per row and
writes them all to `--out` when given. Needs brax (not a jaxrl dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import jax

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from env_throughput import build_rollout  # noqa: E402

from jaxrl import envs  # noqa: E402
from jaxrl.envs.adapters.brax import BACKENDS  # noqa: E402


def measure(env_id: str, copies: int, steps: int, repeats: int) -> dict[str, float]:
    """Compile seconds and the median steps per second (all copies) of one rollout."""
    env, params = envs.make(env_id)
    rollout = build_rollout(env, params, copies, steps)
    start = time.perf_counter()
    jax.block_until_ready(rollout(jax.random.key(0)))
    first = time.perf_counter() - start
    seconds = []
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        jax.block_until_ready(rollout(jax.random.key(seed)))
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    return {
        "compile_seconds": round(first - median, 2),
        "steps_per_second": round(copies * steps / median, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="hopper", help="Brax environment name")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--copies", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--steps", type=int, default=1_000, help="steps per copy per call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON")
    args = parser.parse_args(argv)
    rows = []
    for backend in args.backends:
        for copies in args.copies:
            env_id = f"brax:{args.env}@{backend}"
            row = {"env": env_id, "copies": copies, "steps": args.steps}
            row.update(measure(env_id, copies, args.steps, args.repeats))
            row["load_average"] = round(os.getloadavg()[0], 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
