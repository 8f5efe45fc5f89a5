"""Off-policy throughput: jaxrl's DQN and SAC vs rejax, sbx and Stable-Baselines3.

    python benchmarks/offpolicy_throughput.py             # both tasks, 1 and 16 seeds, 3 repeats
    python benchmarks/offpolicy_throughput.py --tasks dqn --seeds 1 --repeats 1 --total-steps 5000
    python benchmarks/offpolicy_throughput.py --profile   # per-phase profile, jaxrl vs rejax

Two tasks, each with ONE configuration that all four libraries express (the
JSON records it under "config"; `DQN_CONFIG` and `SAC_CONFIG` below):

* dqn: DQN on CartPole-v1. 1 environment, a gradient step after every
  environment step (train_frequency 1, 1 gradient step: rejax trains after every
  step of its `num_envs` environments, so it cannot train every k-th step with
  one environment), batch 128 (replay ratio 128), buffer 10k, 1k uniformly
  random steps first, Adam 2.5e-4, gamma 0.99, hard target copy every 500
  gradient steps, epsilon 1 -> 0.05 over the first half of the run, 64-64 ReLU
  MLP (rejax 0.1.3's DQN network is always 64-64; sbx's has equal layers),
  gradients clipped to norm 10 (SB3's default, which cannot be switched off),
  Huber loss, vanilla targets (SB3 and sbx have neither Double-Q nor dueling
  heads), 1-step returns, uniform replay (CleanRL's CartPole DQN, trained every step).
* sac: SAC on Pendulum-v1. 1 environment, 1 gradient step per environment
  step, batch 256, buffer 12k (the whole run), 1k random steps first, Adam 1e-3
  for actor, critics and temperature (rl-zoo's Pendulum rate; rejax has one
  learning rate), gamma 0.99, Polyak tau 0.005 every step, 64-64 ReLU MLPs, twin
  critics, alpha tuned from 1.0 towards entropy -1 (-action_dim), no clipping.

What the peers do differently, by design (see each worker's docstring): rejax
treats time limits as terminal (gymnax 0.0.9's single `done`), clips gradients
per element, regresses DQN with the squared error, takes no random actions in
SAC's warm-up and samples replay without replacement over the whole capacity;
SB3 and sbx bootstrap time limits (as jaxrl does by default) and use the Huber
loss for DQN. SB3 (torch, 1 thread) and sbx (JAX networks, numpy replay buffer,
Python loop) train one seed per process.

Rows, per task (each measurement a fresh worker process printing one JSON line,
benchmarks/workers/*_offpolicy.py):

* jaxrl: `jaxrl.train("dqn" | "sac", num_seeds=N, **config)`; the driver's own
  `steps_per_second` (compile excluded) and `compile_seconds` (init included).
  With N > 1, `agent_execution="map"` (the first `--agent-execution`): the device
  trains its seeds one after another, each its own compiled scan, which on CPU is
  faster than vmapping these 64-64 networks (docs/ARCHITECTURE.md, "Agents").
* jaxrl-matched: the same plus `MATCHED_WORK` (workers/jaxrl_offpolicy.py): time
  limits as terminal, DQN's squared-error loss -- rejax's work per step.
  Against rejax it measures library speed. `--skip-matched` leaves it out.
* jaxrl-vmap (N > 1): the jaxrl row with `agent_execution="vmap"`, the driver's
  default, which batches the seeds into one computation as rejax does.
* rejax 0.1.3 (venv .venvs/rejax): `init_state` + `fori_loop(train_iteration)`,
  vmapped over seeds for N > 1, compiled first, then timed.
* sbx 0.28.0 (venv .venvs/sbx) and SB3 (venv .venvs/sb3): `model.learn` on
  `--sb3-steps` steps (throughput; sbx compiles in a warm-up first), plus one run
  at the full budget for their final return (`--skip-peer-return`: not).

Cores: every one-seed process (each library's 1-seed rows, and every sbx and SB3
run, which train one seed per process) is pinned to one core from its start
(`--single-seed-cores one`, the default; `all` leaves them every core), as
single-seed runs are spread over a machine one per core. Each library is then at
its fastest: SB3 uses one torch thread either way (its fastest setting, and no
faster pinned), while XLA, given two cores, hands a one-seed SAC update's
microsecond kernels back and forth between two threads of its pool: 7% slower on a
2-core machine (benchmarks/README.md). Multi-seed rows use every core.

Steps/s = environment steps summed over seeds / training seconds; `cpu` columns
use process CPU seconds (steadier on a shared machine). Final return = mean
over seeds of the mean return of `--eval-episodes` fresh episodes with the final
greedy (DQN) or deterministic (SAC) policy, for every library. Repeats run the
libraries back to back in alternating order; the table shows medians. Writes a
table per task and JSON to `--out` (default benchmarks/results/offpolicy_throughput.json).

`--profile` instead times each phase of one update (acting, environment step,
replay add, replay sample, one gradient step) and the whole update, for jaxrl
and rejax, each phase scanned in one jitted program, and prints where an
update's time goes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _harness import (
    HERE,
    WORKERS,
    Recorder,
    ensure_peer,
    fmt,
    one_core,
    partial_path,
    previous_results,
    print_table,
    run_metadata,
    run_worker,
    summarise,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "offpolicy_throughput.json"

# The matched configurations, in library-neutral names (the workers map them).
DQN_CONFIG: dict[str, Any] = {
    "env": "CartPole-v1",
    "num_envs": 1,
    "train_frequency": 1,
    "gradient_steps": 1,
    "batch_size": 128,
    "buffer_size": 10_000,
    "learning_starts": 1_000,
    "gamma": 0.99,
    "lr": 2.5e-4,
    "tau": 1.0,
    "target_update_interval": 500,
    "eps_start": 1.0,
    "eps_end": 0.05,
    "eps_fraction": 0.5,
    "hidden_sizes": [64, 64],
    "activation": "relu",
    "loss": "huber",
    "max_grad_norm": 10.0,
    "double_q": False,
    "dueling": False,
    "n_step": 1,
    "prioritised": False,
}
SAC_CONFIG: dict[str, Any] = {
    "env": "Pendulum-v1",
    "num_envs": 1,
    "train_frequency": 1,
    "gradient_steps": 1,
    "batch_size": 256,
    "buffer_size": 12_000,
    "learning_starts": 1_000,
    "gamma": 0.99,
    "lr": 1e-3,
    "tau": 0.005,
    "target_update_interval": 1,
    "policy_frequency": 1,
    "hidden_sizes": [64, 64],
    "activation": "relu",
    "autotune": True,
    "init_alpha": 1.0,
    "target_entropy": None,
    "n_step": 1,
    "prioritised": False,
}
CONFIGS = {"dqn": DQN_CONFIG, "sac": SAC_CONFIG}
# Default environment steps per seed (whole run) of each task.
TOTAL_STEPS = {"dqn": 50_000, "sac": 12_000}
# Row order within a group (jaxrl-map / jaxrl-vmap: the further `--agent-execution` rows).
ORDER = {
    "jaxrl": 0,
    "jaxrl-matched": 1,
    "jaxrl-map": 2,
    "jaxrl-vmap": 2,
    "rejax": 3,
    "sbx": 4,
    "sb3": 5,
}
PHASES = ("act", "env", "replay_add", "replay_sample", "learn")


def total_steps(args: argparse.Namespace, task: str) -> int:
    return args.total_steps or TOTAL_STEPS[task]


def run_benchmark(args: argparse.Namespace, partial_out: Path | None = None) -> dict[str, Any]:
    rejax_py = None if args.skip_rejax else ensure_peer("rejax")
    # One-seed processes on one core each (`--single-seed-cores`), every library alike.
    single = one_core() if args.single_seed_cores == "one" else None
    per_process = [(lib, ensure_peer(lib)) for lib in ("sbx", "sb3") if lib not in args.skip]
    record = Recorder(key=("task", "library", "seeds"), partial_out=partial_out)
    peer_return_runs: list[dict[str, Any]] = []
    for task in args.tasks:
        config, total = CONFIGS[task], total_steps(args, task)
        common = {"task": task, "config": config, "total_steps": total}
        common["eval_episodes"] = args.eval_episodes
        for rep in range(args.repeats):
            for seeds in args.seeds:
                print(f"[{task} repeat {rep + 1}/{args.repeats}] seeds={seeds}", flush=True)
                job = {**common, "seeds": seeds, "seed": rep, "log_every": args.log_every}
                ours = {**job, "agent_execution": args.agent_execution[0]}
                jobs = [(sys.executable, "jaxrl_offpolicy.py", ours)]
                if not args.skip_matched:
                    jobs.append(
                        (sys.executable, "jaxrl_offpolicy.py", {**ours, "variant": "matched"})
                    )
                if seeds > 1:  # one agent runs the same program either way
                    for execution in args.agent_execution[1:]:
                        extra = {**job, "agent_execution": execution, "label": f"jaxrl-{execution}"}
                        jobs.append((sys.executable, "jaxrl_offpolicy.py", extra))
                if rejax_py:
                    jobs.append((rejax_py, "rejax_offpolicy.py", job))
                if rep % 2:  # alternate who goes first
                    jobs.reverse()
                cpus = single if seeds == 1 else None
                for python, script, job_args in jobs:
                    res = run_worker(python, script, job_args, args.timeout, cpus=cpus)
                    record(res, f"{task} ")
            steps = min(args.sb3_steps, total)
            for lib, python in per_process[:: -1 if rep % 2 else 1]:
                print(f"[{task} repeat {rep + 1}/{args.repeats}] {lib} {steps} steps", flush=True)
                job = {**common, "total_steps": steps, "seed": rep, **_warmup(lib, config)}
                res = run_worker(python, f"{lib}_offpolicy.py", job, args.timeout, cpus=single)
                record(res, f"{task} ")
        if not args.skip_peer_return:
            for lib, python in per_process:
                print(f"[{task}] {lib}: one run of {total} steps for its final return", flush=True)
                job = {**common, "seed": 0, **_warmup(lib, config)}
                res = run_worker(python, f"{lib}_offpolicy.py", job, args.timeout * 10)
                print(
                    f"  {lib} {total} steps: return={res['eval_return_mean']:.1f} "
                    f"steps/s={res['steps_per_second']:,.0f}",
                    flush=True,
                )
                peer_return_runs.append(res)
    cells = sorted(
        (summarise(r, keep=("task",)) for r in record.cells.values()),
        key=lambda c: (c["task"], c["seeds"], ORDER.get(c["library"], 9)),
    )
    return {"cells": cells, "runs": record.runs(), "peer_return_runs": peer_return_runs}


def _warmup(lib: str, config: dict[str, Any]) -> dict[str, Any]:
    """sbx compiles inside `learn`: a throwaway warm-up run past learning_starts first
    (workers/sbx_offpolicy.py). SB3 (torch, eager) needs none."""
    return {"warmup_steps": config["learning_starts"] + 100} if lib == "sbx" else {}


def print_results(result: dict[str, Any]) -> None:
    """One table per task; the peers' full-budget returns below it."""
    for task in dict.fromkeys(c["task"] for c in result["cells"]):
        print(f"\n== {task}: {CONFIGS[task]['env']} ==")
        print_table([c for c in result["cells"] if c["task"] == task], per_process=("sbx", "sb3"))
        for r in result["peer_return_runs"]:
            if r["task"] == task:
                print(
                    f"{r['library']} at the full budget ({r['total_steps']} steps, 1 seed): "
                    f"return {r['eval_return_mean']:.1f}"
                )


def run_profile(args: argparse.Namespace) -> dict[str, Any]:
    rejax_py = None if args.skip_rejax else ensure_peer("rejax")
    out: list[dict[str, Any]] = []
    for task in args.tasks:
        job = {"task": task, "config": CONFIGS[task], "mode": "profile"}
        job.update(total_steps=total_steps(args, task), iters=args.iters, inner=args.inner)
        for rep in range(args.repeats):
            for seeds in args.seeds:
                jobs = [(sys.executable, "jaxrl_offpolicy.py", {**job, "seeds": seeds})]
                if not args.skip_matched:
                    matched = {**job, "seeds": seeds, "variant": "matched"}
                    jobs.append((sys.executable, "jaxrl_offpolicy.py", matched))
                if rejax_py:
                    jobs.append((rejax_py, "rejax_offpolicy.py", {**job, "seeds": seeds}))
                if rep % 2:
                    jobs.reverse()
                for python, script, job_args in jobs:
                    res = run_worker(python, script, job_args, args.timeout)
                    out.append(res)
                    print_profile_row(res)
    return {"profile": out}


def print_profile_row(res: dict[str, Any]) -> None:
    """One line: microseconds per phase (medians), their sum and the measured update."""
    p = res["phases_us"]
    parts = " ".join(f"{name} {p[name]['wall']:7.1f}" for name in PHASES)
    total = sum(p[name]["wall"] for name in PHASES)
    print(
        f"  {res['task']} {res['library']:<13} seeds={res['seeds']:<3} us per update: {parts} "
        f"| sum {total:7.1f} update {p['update']['wall']:7.1f} "
        f"(cpu {fmt(p['update'].get('cpu'), '.1f')})",
        flush=True,
    )


def _matched_work() -> dict[str, Any]:
    """The jaxrl-matched row's extra config options (read from the worker, one source)."""
    sys.path.insert(0, str(WORKERS))
    from jaxrl_offpolicy import MATCHED_WORK

    return dict(MATCHED_WORK)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tasks", nargs="+", choices=sorted(CONFIGS), default=["dqn", "sac"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 16], help="seed counts to measure")
    p.add_argument(
        "--total-steps",
        type=int,
        default=None,
        help=f"env steps per seed for jaxrl and rejax (default per task: {TOTAL_STEPS})",
    )
    p.add_argument(
        "--sb3-steps",
        type=int,
        default=10_000,
        help="env steps per sbx / SB3 throughput run (at most the task's total)",
    )
    p.add_argument(
        "--skip-peer-return",
        action="store_true",
        help="do not train sbx and SB3 once at the full budget for their final return",
    )
    p.add_argument(
        "--skip", nargs="*", default=[], choices=["sbx", "sb3"], help="peers to leave out"
    )
    p.add_argument("--skip-rejax", action="store_true")
    p.add_argument(
        "--skip-matched", action="store_true", help="leave out the jaxrl-matched (matched-work) row"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--agent-execution",
        nargs="+",
        choices=["map", "vmap"],
        default=["map", "vmap"],
        help="jaxrl's agent_execution for several seeds: the first for the jaxrl and "
        "jaxrl-matched rows, each further one as a row jaxrl-<value> (default: map, then "
        "a jaxrl-vmap row)",
    )
    p.add_argument(
        "--single-seed-cores",
        choices=["one", "all"],
        default="one",
        help="cores of each one-seed process, every library alike (sbx and SB3 always "
        "train one seed per process): 'one' pins it to one core from its start, 'all' "
        "leaves it every core (see the module docstring)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=None,
        help="jaxrl's log_every (sets its chunk length); default: the driver's (~50 chunks)",
    )
    p.add_argument("--eval-episodes", type=int, default=32)
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per worker process")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead: time each phase of an update (act, env, replay, learn), jaxrl vs rejax",
    )
    p.add_argument("--iters", type=int, default=10, help="with --profile: timed calls per phase")
    p.add_argument(
        "--inner", type=int, default=200, help="with --profile: phase iterations per timed call"
    )
    args = p.parse_args(argv)
    warn_if_loaded(
        "other work on this machine slows torch's threads and the peers' Python loops "
        "far more than XLA's, so ratios measured now mislead"
    )
    meta = {
        **run_metadata("offpolicy_throughput", __file__, argv),
        "config": {task: CONFIGS[task] for task in args.tasks},
        "total_steps": {task: total_steps(args, task) for task in args.tasks},
        "single_seed_cores": args.single_seed_cores,
        "matched_work": _matched_work(),
    }
    previous = previous_results(args.out)
    if args.profile:
        # Stored under "profile" in the results file, next to the benchmark's own results.
        result = {**previous, "profile": {**meta, **run_profile(args)}}
    else:
        partial = partial_path(args.out)  # progress of an unfinished run, outside the repo
        print(f"progress: {partial}", flush=True)
        result = {**meta, **run_benchmark(args, partial)}
        partial.unlink(missing_ok=True)
        if "profile" in previous:  # keep the last --profile run
            result["profile"] = previous["profile"]
        print_results(result)
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
