"""Recurrent PPO on Craftax-Classic-Symbolic: jaxrl against the Craftax baselines' `ppo_rnn.py`.

    python benchmarks/craftax_side_by_side.py                      # the registry's budget
    python benchmarks/craftax_side_by_side.py --total-steps 32768 --seeds 1   # a smoke run

Issue 35's first target: at the same budget and seeds, jaxrl's recurrent PPO (the
`craftax:Craftax-Classic-Symbolic-v1` preset of jaxrl/algorithms/ppo/config.py, which
takes the baselines' hyperparameters, optimistic resets included) against the Craftax
baselines' own `ppo_rnn.py` (Matthews et al. 2024), run from their repository in a venv
of their own:

* theirs: `benchmarks/workers/craftax_baselines_ppo_rnn.py` in the venv
  `benchmarks/.venvs/craftax_baselines` (`BASELINES_REQUIREMENTS`: their requirements.txt
  at the versions that resolve with our jax 0.10.2; created on first use), importing
  `make_train` from the files of `--baselines` (a git snapshot of their repository,
  read with `git archive`, or a directory holding `ppo_rnn.py`);
* ours: `jaxrl.train("ppo", env, num_seeds=1, seed=SEED, total_steps=N, num_envs=E)` in
  this process (it needs the `craftax` extra).

Each seed is a program of its own, on both sides, one after the other: their `make_train`
vmapped over 2 seeds (what their script does with NUM_REPEATS) hangs on this CPU with jax
0.10.2 after compiling (every thread idle, the main thread waiting for the result's
buffers; 1 seed runs), so neither library gets the larger batch of vmapped seeds.

Both use `--num-envs` environments per seed (default: our preset's, 256; theirs
defaults to 1,024 on a GPU) and the same seed number (each library derives its own
streams from it). Reported per library: environment steps per second over all seeds
with compilation excluded (and the compile time), and each seed's final return; the
target is jaxrl's mean final return within one standard deviation (over seeds) of
theirs, at no fewer steps per second. Final return: jaxrl's `final_return_per_agent`
(the episodes that ended in the last 10% of updates, each weighing the same); theirs,
the mean over the last 10% of updates of their per-update mean return (their logging
keeps no episode counts), so an update with few endings weighs as much as one with many.

Runs one library after the other (theirs first), so machine load hits them at
different times: measure on a quiet machine. Writes JSON to `--out` (default
`benchmarks/results/craftax_side_by_side.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import run_metadata, run_worker, warn_if_loaded, write_results  # noqa: E402
from _venvs import ensure_venv  # noqa: E402

DEFAULT_OUT = HERE / "results" / "craftax_side_by_side.json"
ENV_ID = "Craftax-Classic-Symbolic-v1"
# Their requirements.txt (jax[cuda12_pip], distrax, optax, flax, numpy, wandb,
# orbax-checkpoint==0.5.0, gymnax, chex, craftax, ...), pinned to what resolves with our
# jax on a CPU: orbax-checkpoint 0.5.0 predates jax 0.10, the current one keeps the
# checkpointer classes ppo_rnn.py imports; wandb is imported, never called here.
BASELINES_REQUIREMENTS = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "craftax==1.6.1",
    "flax==0.12.8",
    "optax==0.2.8",
    "chex==0.1.92",
    "distrax==0.1.9",
    "orbax-checkpoint==0.12.8",
    "wandb",
]
# Where a fetched snapshot of github.com/MichaelTMatthews/Craftax_Baselines may lie.
DEFAULT_BASELINES = os.environ.get(
    "CRAFTAX_BASELINES", "/work/.mirror/MichaelTMatthews+Craftax_Baselines/repo"
)
# The budget of the registry entry `ppo_rnn_craftax_side_by_side`.
DEFAULT_TOTAL_STEPS = 1_048_576  # 64 updates of 256 x 64 per seed
DEFAULT_SEEDS = 2


def extract_baselines(source: str, into: Path) -> tuple[Path, str]:
    """The baselines' files in a directory, and the commit they come from.

    `source` is a directory holding `ppo_rnn.py` (used as is) or a git repository or
    git directory, whose `HEAD` is extracted into `into` with `git archive`."""
    path = Path(source)
    if (path / "ppo_rnn.py").exists():
        return path, "working tree"
    git = ["git", f"--git-dir={path / '.git' if (path / '.git').exists() else path}"]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode != 0:
        raise SystemExit(
            f"--baselines {source!r}: neither a directory with ppo_rnn.py nor a git "
            f"repository ({commit.stderr.strip()})"
        )
    archive = subprocess.run([*git, "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into, commit.stdout.strip()


def merge_seeds(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One library's row from its per-seed programs: steps/s over every seed's training
    seconds (compilation excluded), each seed's final return and curve."""
    steps = sum(c["env_steps"] for c in cells)
    seconds = sum(c["env_steps"] / c["steps_per_second"] for c in cells)
    merged = {k: v for k, v in cells[0].items() if k not in ("return_curve",)}
    merged.update(
        env_steps=steps,
        steps_per_second=steps / seconds,
        compile_seconds=[c.get("compile_seconds") for c in cells],
        wall_seconds=sum(c["wall_seconds"] for c in cells if c.get("wall_seconds")),
        final_return_per_seed=[c["final_return_per_seed"][0] for c in cells],
        return_curve=[c["return_curve"][0] for c in cells],
        load_average=[c.get("load_average") for c in cells],
    )
    return merged


def run_theirs(args: argparse.Namespace) -> dict[str, Any]:
    python = ensure_venv("craftax_baselines", BASELINES_REQUIREMENTS)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        source, commit = extract_baselines(args.baselines, Path(tmp))
        for seed in seeds_of(args):
            cells.append(
                run_worker(
                    python,
                    "craftax_baselines_ppo_rnn.py",
                    {
                        "source": str(source),
                        "env_name": ENV_ID,
                        "num_envs": args.num_envs,
                        "total_steps": args.total_steps,
                        "seeds": 1,
                        "seed": seed,
                    },
                    timeout=args.timeout,
                )
            )
    for cell in cells:
        cell["wall_seconds"] = cell["process_seconds"]
    result = merge_seeds(cells)
    result["commit"] = commit
    return result


def seeds_of(args: argparse.Namespace) -> list[int]:
    """The seed numbers both libraries run, one program each (see the module docstring)."""
    return [args.seed + i for i in range(args.seeds)]


def run_one_of_ours(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    import jax

    import jaxrl

    start = time.perf_counter()
    result = jaxrl.train(
        "ppo",
        env=f"craftax:{ENV_ID}",
        num_seeds=1,
        seed=seed,
        total_steps=args.total_steps,
        num_envs=args.num_envs,
        progress=False,
    )
    summary = result.summary
    config = jaxrl.make_config(
        "ppo", f"craftax:{ENV_ID}", total_steps=args.total_steps, num_envs=args.num_envs
    )
    return {
        "library": "jaxrl",
        "env_steps": config.num_updates * config.batch_size,
        "steps_per_second": summary["steps_per_second"],
        "compile_seconds": summary.get("compile_seconds"),
        "wall_seconds": time.perf_counter() - start,
        "num_updates": config.num_updates,
        "final_return_per_seed": summary["final_return_per_agent"],
        "return_curve": result.returns().T.round(4).tolist(),
        "reset_ratio": config.reset_ratio,
        "jax": jax.__version__,
        "load_average": os.getloadavg(),
    }


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    return merge_seeds([run_one_of_ours(args, seed) for seed in seeds_of(args)])


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    finite = [v for v in values if v is not None]
    if not finite:
        return None, None
    return statistics.fmean(finite), statistics.pstdev(finite)


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """The target's two checks: return within one std of theirs, steps/s at least theirs."""
    our_mean, our_std = _mean_std(ours["final_return_per_seed"])
    their_mean, their_std = _mean_std(theirs["final_return_per_seed"])
    within = None
    if our_mean is not None and their_mean is not None:
        within = abs(our_mean - their_mean) <= their_std
    speed = ours["steps_per_second"] / theirs["steps_per_second"]
    return {
        "jaxrl_final_return": [our_mean, our_std],
        "baselines_final_return": [their_mean, their_std],
        "return_within_one_std": within,
        "steps_per_second_ratio": speed,
        "met": bool(within) and speed >= 1.0,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-steps", type=int, default=DEFAULT_TOTAL_STEPS, help="per seed")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds, one program each")
    parser.add_argument("--seed", type=int, default=0, help="the seed number both start from")
    parser.add_argument("--num-envs", type=int, default=256, help="environments per seed")
    parser.add_argument("--baselines", default=DEFAULT_BASELINES, help="their repository")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds for theirs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    warn_if_loaded("timings are not to be trusted")
    meta = run_metadata("craftax_side_by_side", "benchmarks/craftax_side_by_side.py", argv)
    theirs = run_theirs(args)
    print(json.dumps({k: theirs[k] for k in ("steps_per_second", "final_return_per_seed")}))
    ours = run_ours(args)
    print(json.dumps({k: ours[k] for k in ("steps_per_second", "final_return_per_seed")}))
    result = {
        "meta": meta,
        "env": ENV_ID,
        "total_steps_per_seed": args.total_steps,
        "seeds": args.seeds,
        "num_envs": args.num_envs,
        "cells": [ours, theirs],
        "comparison": compare(ours, theirs),
    }
    print(json.dumps(result["comparison"]))
    write_results(args.out, result)


if __name__ == "__main__":
    main()
