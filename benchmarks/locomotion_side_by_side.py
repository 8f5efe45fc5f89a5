"""PPO on a MuJoCo Playground locomotion task: jaxrl against Brax's own PPO trainer.

    python benchmarks/locomotion_side_by_side.py                     # the registry's budget
    python benchmarks/locomotion_side_by_side.py --total-steps 30720 --seeds 1   # a smoke run

Issue 35's locomotion target: one locomotion task from MuJoCo Playground with PPO, its
learning curve and steps/s recorded against Brax's PPO trainer on the same task and
budget. The task is Playground's `CheetahRun` (the DeepMind Control Suite's cheetah,
rewarded for running forward; 1,000-step episodes), physics in MJX written in JAX
(`impl="jax"`) on both sides. Playground's legged robots (Go1, Berkeley Humanoid, ...)
need MuJoCo Menagerie, which Playground fetches with git on first use: not here.

* ours: `jaxrl.train("ppo", env="playground:CheetahRun")` with its preset
  (jaxrl/algorithms/ppo/config.py), in `workers/jaxrl_ppo_locomotion.py`;
* theirs: `brax.training.agents.ppo.train` on the task wrapped by Playground's
  `wrap_for_brax_training`, with Playground's DM Control PPO hyperparameters
  (`dm_control_suite_params.brax_ppo_config`) and `BRAX_SIZING`, which gives it our
  preset's batch: `num_envs` environments, `num_minibatches` minibatches of `batch_size`
  sequences of `unroll_length` steps per update (= our `num_envs x num_steps` steps),
  `num_updates_per_batch` epochs (= our `update_epochs`), the same networks (hidden
  sizes, activation, tanh-squashed Gaussian with a state-independent scale starting at
  1) and the same gradient-norm cap, in `workers/brax_ppo_playground.py`.

What each trainer keeps of its own: Brax scales rewards by 10 (Playground's
`reward_scaling`), ours normalises them by the running std of the discounted return;
Brax treats the time limit as terminal (`bootstrap_on_timeout=False`), ours bootstraps
it; Brax computes GAE within each 30-step unroll, ours over the whole rollout. The
learning-rate, clipping, discount, GAE lambda and entropy values are the same
(`tests/benchmarks/test_locomotion_side_by_side.py` checks every pair).

Brax runs Playground's `num_resets_per_eval` (10) epochs per evaluation interval, each
after a reset of every environment; `brax_num_evals` refuses a budget that does not split
into them (Brax would round it up: the smallest exact budget with two intervals is 20
updates), and the Brax worker checks the steps it ran.

Each seed is a process of its own on both sides (Brax's trainer has no seed axis), one
library after the other, theirs first. Reported per library: environment steps per
second of training over all seeds (compilation and evaluation excluded), and per seed
the final policy's deterministic return over `--eval-episodes` fresh episodes (the same
protocol on both sides) and a learning curve (ours: training episodes' return per
logged chunk; theirs: its deterministic evaluation after each of its epochs). Writes
JSON to `--out` (default `benchmarks/results/locomotion_side_by_side.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import run_metadata, run_worker, warn_if_loaded, write_results  # noqa: E402

DEFAULT_OUT = HERE / "results" / "locomotion_side_by_side.json"
TASK = "CheetahRun"
ENV_ID = f"playground:{TASK}"
# The registry entry's budget: 320 updates of 128 x 120 steps per seed, 3 seeds.
DEFAULT_TOTAL_STEPS = 4_915_200
DEFAULT_SEEDS = 3
# Brax's sizing for our preset's batch (module docstring): 128 x 30 x 4 = 128 x 120.
BRAX_SIZING = {
    "num_envs": 128,
    "batch_size": 128,
    "num_minibatches": 4,
    "unroll_length": 30,
    "num_updates_per_batch": 16,
    "max_grad_norm": 1.0,
}


# Playground's `num_resets_per_eval` for the DM Control tasks (the optional test reads it).
BRAX_RESETS_PER_EVAL = 10


def brax_num_evals(total_steps: int, steps_per_update: int, evaluations: int = 4) -> int:
    """Brax's `num_evals` for `evaluations` equal intervals covering `total_steps` exactly.

    Brax trains `num_evals - 1` intervals (an evaluation after each and one before the
    first). An interval is `num_resets_per_eval` epochs (the environments reset before
    each) of ceil(total / (intervals x resets x steps per update)) updates each: the
    budget must split into whole updates per epoch, or Brax runs more steps than ours."""
    per_epoch = evaluations * BRAX_RESETS_PER_EVAL
    updates, rest = divmod(total_steps, steps_per_update)
    if rest or updates % per_epoch:
        raise ValueError(
            f"--total-steps {total_steps}: must be a multiple of {steps_per_update * per_epoch} "
            f"({evaluations} evaluation intervals of {BRAX_RESETS_PER_EVAL} epochs of whole "
            f"updates of {steps_per_update} steps)"
        )
    return evaluations + 1


def run_library(args: argparse.Namespace, library: str, seed: int) -> dict[str, Any]:
    """One seed of one library, in a process of its own."""
    steps_per_update = (
        BRAX_SIZING["num_envs"]
        * BRAX_SIZING["unroll_length"]
        * (BRAX_SIZING["batch_size"] * BRAX_SIZING["num_minibatches"] // BRAX_SIZING["num_envs"])
    )
    if library == "brax":
        sizing = {
            **BRAX_SIZING,
            "num_evals": brax_num_evals(args.total_steps, steps_per_update, args.brax_evaluations),
        }
        return run_worker(
            sys.executable,
            "brax_ppo_playground.py",
            {
                "env": TASK,
                "seed": seed,
                "total_steps": args.total_steps,
                "eval_episodes": args.eval_episodes,
                "ppo": sizing,
                "hidden_sizes": list(PRESET["hidden_sizes"]),
                "activation": PRESET["activation"],
            },
            timeout=args.timeout,
        )
    return run_worker(
        sys.executable,
        "jaxrl_ppo_locomotion.py",
        {
            "env": ENV_ID,
            "seed": seed,
            "eval_episodes": args.eval_episodes,
            "overrides": {"total_steps": args.total_steps},
        },
        timeout=args.timeout,
    )


def _preset() -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parent))
    from jaxrl.algorithms.ppo.config import PRESETS

    return PRESETS[ENV_ID]


PRESET = _preset()


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One library's seeds: steps/s over all training seconds, final returns and their
    mean and (population) std over seeds."""
    steps = sum(c["env_steps"] for c in cells)
    seconds = sum(c["env_steps"] / c["steps_per_second"] for c in cells)
    finals = [c["final_return"] for c in cells]
    return {
        "env_steps": steps,
        "steps_per_second": steps / seconds,
        "final_return_per_seed": finals,
        "final_return_mean": statistics.fmean(finals),
        "final_return_std": statistics.pstdev(finals),
        "compile_seconds": [c.get("compile_seconds") for c in cells],
    }


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The recorded comparison: steps/s ratio, and the return gap in Brax's std over seeds."""
    gap = ours["final_return_mean"] - theirs["final_return_mean"]
    std = theirs["final_return_std"]
    return {
        "steps_per_second_ratio": ours["steps_per_second"] / theirs["steps_per_second"],
        "final_return_gap": gap,
        "final_return_gap_in_brax_std": gap / std if std > 0 else None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-steps", type=int, default=DEFAULT_TOTAL_STEPS, help="per seed")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds, one process each")
    parser.add_argument("--seed", type=int, default=0, help="the first seed number")
    parser.add_argument("--eval-episodes", type=int, default=16, help="final evaluation episodes")
    parser.add_argument(
        "--brax-evaluations", type=int, default=4, help="Brax's evaluations after the first"
    )
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per process")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.eval_episodes < 1 or args.brax_evaluations < 2:
        parser.error(
            "--seeds and --eval-episodes must be at least 1, --brax-evaluations at least 2 "
            "(the first interval includes compilation; steps/s comes from the others)"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    warn_if_loaded("timings are not to be trusted")
    meta = run_metadata("locomotion_side_by_side", "benchmarks/locomotion_side_by_side.py", argv)
    seeds = [args.seed + i for i in range(args.seeds)]
    cells: dict[str, list[dict[str, Any]]] = {"brax": [], "jaxrl": []}
    for library in ("brax", "jaxrl"):
        for seed in seeds:
            cell = run_library(args, library, seed)
            print(
                json.dumps(
                    {k: cell[k] for k in ("library", "seed", "steps_per_second", "final_return")}
                )
            )
            cells[library].append(cell)
    summary = {library: summarise(rows) for library, rows in cells.items()}
    result = {
        "meta": meta,
        "env": ENV_ID,
        "total_steps_per_seed": args.total_steps,
        "seeds": seeds,
        "eval_episodes": args.eval_episodes,
        "preset": PRESET,
        "brax_sizing": BRAX_SIZING,
        "cells": cells,
        "summary": summary,
        "comparison": compare(summary["jaxrl"], summary["brax"]),
    }
    print(json.dumps(result["comparison"]))
    write_results(args.out, result)


if __name__ == "__main__":
    main()
