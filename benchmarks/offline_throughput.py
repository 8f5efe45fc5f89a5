"""Offline throughput: gradient steps per second of jaxrl's IQL, TD3+BC and CQL against
d3rlpy 2.8.1 (PyTorch, CPU), on one dataset with one configuration.

    python benchmarks/offline_throughput.py        # 3 algorithms, 1 and 16 seeds, 3 repeats
    python benchmarks/offline_throughput.py --algorithms iql --seeds 1 --repeats 1 --steps 1000

The dataset is written first, once per run of this script (`make_dataset`): uniformly
random actions on Pendulum-v1 for `--episodes` complete episodes (200 steps each), as
jaxrl's `.npz`, which both libraries read (d3rlpy as its `MDPDataset`: episodes end at
the same rows). The work per gradient step does not depend on what the data is, only on
its shapes.

One configuration per algorithm (`CONFIGS`, in library-neutral names; each worker maps
them to its library's, and refuses a name it cannot set): 256-256 ReLU networks, batch
256, gamma 0.99, Polyak 0.005, twin critics, Adam, and the papers' defaults for each
algorithm's own coefficients (IQL: expectile 0.7, temperature 3, weights clipped at 100;
TD3+BC: alpha 2.5, target smoothing 0.2 clipped at 0.5, actor every 2nd step,
observations normalised by the dataset's mean and std + 1e-3; CQL: a fixed conservative
weight 5, 10 sampled actions per proposal, entropy temperature tuned from 1). Actions are
scaled from Pendulum's [-2, 2] to [-1, 1] by both.

Rows (each measurement a fresh worker process printing one JSON line):

* jaxrl (workers/jaxrl_offline.py): `jaxrl.train(algorithm, dataset=..., num_seeds=N)`,
  seeds vmapped in one program; `--steps` gradient steps (`STEPS`) per measurement,
  summed over its seeds (`steps_per_seed`: N seeds do steps / N each, at least
  `MIN_STEPS_PER_SEED`, so a 16-seed row costs about what a 1-seed row does), in updates
  of at most 1,000, each ending with one evaluation episode (counted in the time); the
  driver's training time, compilation excluded.
* d3rlpy (workers/d3rlpy_offline.py, venv benchmarks/.venvs/d3rlpy): d3rlpy's own `fit`
  step, `sample_transition_batch` then `update`, `--d3rlpy-steps` (`D3RLPY_STEPS`) times
  after a warm-up, without fit's logging; one seed per process (no vectorisation: N seeds
  take N times as long, so its row joins every seed count at its 1-seed rate, `1*`).
  torch uses its default threads (both cores here), as XLA does.

`--profile` instead times one gradient step of each algorithm in jaxrl (one agent, a
jitted scan) beside its matmul floor (benchmarks/matmul_floor.py); CQL's step is ~10x
IQL's because its penalty runs the critics on 30 sampled actions per state.

Steps/s = gradient steps summed over seeds per second; `cpu` columns use process CPU
seconds (steadier on a shared machine). Repeats alternate which library goes first; the
table shows medians and jaxrl / d3rlpy. Writes JSON to `--out` (default
benchmarks/results/offline_throughput.json); needs a quiet machine (load below 1.5).

torch is the CPU build: from /opt/wheels when this machine class has it there (as
.ci/optional_venv.sh installs it), else `torch==2.13.0` from the index.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from _harness import (
    HERE,
    Recorder,
    fmt,
    partial_path,
    run_metadata,
    run_worker,
    summarise,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "offline_throughput.json"

TORCH_VERSION = "2.13.0"
D3RLPY_VERSION = "2.8.1"

COMMON: dict[str, Any] = {
    "env": "Pendulum-v1",
    "action_low": [-2.0],
    "action_high": [2.0],
    "hidden_sizes": [256, 256],
    "activation": "relu",
    "batch_size": 256,
    "gamma": 0.99,
    "tau": 0.005,
    "num_critics": 2,
    "actor_lr": 3e-4,
    "critic_lr": 3e-4,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "iql": {
        **COMMON,
        "normalize_obs": False,
        "expectile": 0.7,
        "temperature": 3.0,
        "max_weight": 100.0,
    },
    "td3-bc": {
        **COMMON,
        "normalize_obs": True,
        "alpha": 2.5,
        "policy_noise": 0.2,
        "noise_clip": 0.5,
        "policy_delay": 2,
    },
    "cql": {
        **COMMON,
        "normalize_obs": False,
        "actor_lr": 1e-4,
        "alpha_lr": 1e-4,
        "alpha": 1.0,
        "autotune": True,
        "cql_alpha": 5.0,
        "num_sampled_actions": 10,
    },
}


# Default gradient steps per measurement, summed over seeds (jaxrl), and timed steps
# (d3rlpy) of each algorithm: CQL's step costs ~10x IQL's (30 sampled actions per state
# through the critics).
STEPS = {"iql": 10_000, "td3-bc": 10_000, "cql": 2_000}
D3RLPY_STEPS = {"iql": 2_000, "td3-bc": 2_000, "cql": 500}
# Per-seed budgets are whole multiples of this (the shortest update timed).
MIN_STEPS_PER_SEED = 250


def steps_per_seed(steps: int, seeds: int) -> tuple[int, int]:
    """(gradient steps per seed, steps per update) of one jaxrl measurement of `steps`
    gradient steps summed over `seeds` vmapped seeds: the share of each seed rounded down
    to a multiple of `MIN_STEPS_PER_SEED` (never below it), updates of at most 1,000."""
    share = max(MIN_STEPS_PER_SEED, steps // seeds // MIN_STEPS_PER_SEED * MIN_STEPS_PER_SEED)
    interval = 1000 if share % 1000 == 0 else MIN_STEPS_PER_SEED
    return share, interval


def torch_requirement() -> str:
    """The local CPU torch wheel if this machine has it, else the index's pin."""
    wheels = sorted(Path("/opt/wheels").glob(f"torch-{TORCH_VERSION}+cpu-*.whl"))
    return str(wheels[0]) if wheels else f"torch=={TORCH_VERSION}"


def ensure_d3rlpy() -> Path:
    """The Python of benchmarks/.venvs/d3rlpy (created on first use)."""
    sys.path.insert(0, str(HERE))
    from _venvs import ensure_venv

    return ensure_venv("d3rlpy", [torch_requirement(), f"d3rlpy=={D3RLPY_VERSION}"])


def make_dataset(path: Path, episodes: int, seed: int = 0) -> Path:
    """`episodes` Pendulum episodes of uniformly random actions, as jaxrl's .npz."""
    import jax

    from jaxrl import datasets, envs
    from jaxrl.datasets import collect

    env, params = envs.make("Pendulum-v1")
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(seed), 200, episodes)
    return datasets.save(data.with_metadata(env="Pendulum-v1"), path)


def run_benchmark(args: argparse.Namespace, dataset: Path) -> dict[str, Any]:
    d3rlpy_py = None if args.skip_d3rlpy else ensure_d3rlpy()
    record = Recorder(key=("algorithm", "library", "seeds"), partial_out=partial_path(args.out))
    for name in args.algorithms:
        common = {"algorithm": name, "dataset": str(dataset), "config": CONFIGS[name]}
        steps = args.steps or STEPS[name]
        peer_steps = args.d3rlpy_steps or D3RLPY_STEPS[name]
        for rep in range(args.repeats):
            jobs = []
            for seeds in args.seeds:
                per_seed, interval = steps_per_seed(steps, seeds)
                job = {**common, "steps": per_seed, "seeds": seeds, "eval_interval": interval}
                jobs.append((sys.executable, "jaxrl_offline.py", job))
            if d3rlpy_py:
                peer = {**common, "steps": peer_steps, "seed": rep}
                jobs.append((d3rlpy_py, "d3rlpy_offline.py", peer))
            if rep % 2:  # alternate who goes first
                jobs.reverse()
            print(f"[{name} repeat {rep + 1}/{args.repeats}]", flush=True)
            for python, script, job in jobs:
                res = run_worker(python, script, job, args.timeout)
                res.setdefault("eval_return_mean", float("nan"))
                record(res, f"{name} ")
    cells = [summarise(r, keep=("algorithm",)) for r in record.cells.values()]
    for cell in cells:  # d3rlpy's share of time spent sampling batches
        runs = record.cells[(cell["algorithm"], cell["library"], cell["seeds"])]
        fractions = [r["sample_fraction"] for r in runs if "sample_fraction" in r]
        cell["sample_fraction"] = sorted(fractions)[len(fractions) // 2] if fractions else None
    return {"cells": cells, "runs": record.runs()}


def print_table(cells: list[dict[str, Any]]) -> None:
    """Per algorithm and seed count: steps/s, cpu steps/s and jaxrl / d3rlpy."""
    head = f"{'algorithm':<9} {'library':<7} {'seeds':>5} {'steps/s':>10} {'cpu st/s':>10} "
    head += f"{'jaxrl/d3rlpy':>12} {'compile s':>9}"
    print(head)
    print("-" * len(head))
    for name in dict.fromkeys(c["algorithm"] for c in cells):
        peer = next((c for c in cells if c["algorithm"] == name and c["library"] == "d3rlpy"), None)
        for c in sorted(
            (c for c in cells if c["algorithm"] == name and c["library"] == "jaxrl"),
            key=lambda c: c["seeds"],
        ):
            ratio = c["steps_per_second"] / peer["steps_per_second"] if peer else None
            print(
                f"{name:<9} {'jaxrl':<7} {c['seeds']:>5} {c['steps_per_second']:>10,.0f} "
                f"{fmt(c.get('cpu_steps_per_second'), ',.0f'):>10} {fmt(ratio, '.1f'):>12} "
                f"{fmt(c['compile_seconds'], '.1f'):>9}"
            )
        if peer:
            print(
                f"{name:<9} {'d3rlpy':<7} {'1*':>5} {peer['steps_per_second']:>10,.0f} "
                f"{fmt(peer.get('cpu_steps_per_second'), ',.0f'):>10} {'':>12} {'':>9}  "
                f"(sampling {fmt(peer.get('sample_fraction'), '.0%')} of its time)"
            )
    print("1* d3rlpy trains one seed per process: N seeds one after another run at its rate.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--algorithms", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 16], help="jaxrl's seed counts")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"jaxrl's gradient steps per measurement, summed over seeds ({STEPS})",
    )
    p.add_argument(
        "--d3rlpy-steps", type=int, default=None, help=f"d3rlpy's timed steps ({D3RLPY_STEPS})"
    )
    p.add_argument("--episodes", type=int, default=50, help="dataset size in episodes of 200")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-d3rlpy", action="store_true")
    p.add_argument("--profile", action="store_true", help="jaxrl's step against its floor")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if any(s < 1 for s in args.seeds) or (
        args.steps is not None
        and (args.steps < 1 or args.steps % MIN_STEPS_PER_SEED)
        and not args.profile
    ):
        p.error(f"--seeds must be >= 1 and --steps a positive multiple of {MIN_STEPS_PER_SEED}")
    meta = run_metadata("offline_throughput", __file__, argv)
    warn_if_loaded("throughput numbers are not to be trusted")
    with tempfile.TemporaryDirectory() as tmp:
        dataset = make_dataset(Path(tmp) / "pendulum_random.npz", args.episodes)
        if args.profile:
            for name in args.algorithms:
                job = {"algorithm": name, "dataset": str(dataset), "config": CONFIGS[name]}
                job.update(mode="profile", steps=args.steps or 200)
                r = run_worker(sys.executable, "jaxrl_offline.py", job, args.timeout)
                print(
                    f"{name:<7} {r['ms_per_step']:8.2f} ms per gradient step, matmul floor "
                    f"{r['floor_ms_per_step']:.2f} ms ({r['floor_gflop_per_step']:.3f} GFLOP)",
                    flush=True,
                )
            return 0
        result = run_benchmark(args, dataset)
    print()
    print_table(result["cells"])
    configs = {name: CONFIGS[name] for name in args.algorithms}
    write_results(args.out, {**meta, "configs": configs, "episodes": args.episodes, **result})
    partial_path(args.out).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
