"""PPO throughput on CartPole-v1: jaxrl vs rejax vs Stable-Baselines3, side by side.

    python benchmarks/ppo_throughput.py               # 1 and 64 seeds, 500k steps, SB3 50k
    python benchmarks/ppo_throughput.py --seeds 1 64 --repeats 3 --skip-sb3
    python benchmarks/ppo_throughput.py --profile     # per-update profile, jaxrl vs rejax

All three libraries train PPO with PureJaxRL's published CartPole config: 4
envs x 128 steps per update, 4 epochs x 4 minibatches (128 transitions), a
64-64 tanh MLP for the actor and one for the critic, Adam lr 2.5e-4 annealed
linearly to 0, gamma 0.99, GAE lambda 0.95, clip 0.2 (value loss clipped
too), entropy 0.01, value 0.5, max grad norm 0.5, per-minibatch advantage
normalisation. Each measurement is a fresh worker process printing one JSON
line (benchmarks/workers/):

* jaxrl (project venv): `jaxrl.train("ppo", num_seeds=N)`; the driver's own
  `steps_per_second` (compile excluded) and `compile_seconds`.
* jaxrl-matched: the same, configured to do per update exactly the work rejax
  does (`MATCHED_WORK` in workers/jaxrl_ppo.py: time limits as terminal, so no
  critic pass over final observations; per-element gradient clipping;
  diagnostics off). Against rejax it measures library speed; against jaxrl,
  the cost of jaxrl's algorithm choices. `--skip-matched` leaves it out.
* rejax 0.1.3 (venv benchmarks/.venvs/rejax; rejax's PPO breaks on gymnax
  1.0's 6-tuple `step`, so it gets gymnax 0.0.9, with the same jax 0.10.2 as
  ours): `init_state` + `fori_loop(train_iteration)` -- rejax's `train` with
  `eval_freq = total_timesteps` minus its one end-of-run evaluation --
  `jax.vmap`ped over seed keys for N > 1, compiled with
  `jax.jit(fn).lower(keys).compile()` (compile time) then timed.
* Stable-Baselines3 (venv benchmarks/.venvs/sb3, torch 2.13.0 CPU, 1 thread):
  `model.learn(--sb3-steps)` with a DummyVecEnv of 4; no seed vectorisation.

Steps/s = environment steps summed over all seeds / training seconds. Final
return = mean over seeds of the mean return of 128 fresh episodes with the
final stochastic policy (rejax's own evaluation protocol, reproduced for
jaxrl and SB3). Every repeat runs the libraries back to back, in alternating
order, so load on a shared machine hits them alike; the table shows medians.
Process CPU seconds are recorded too (`cpu_steps_per_second`): on a loaded
machine they are much steadier than wall time.

Writes a table to stdout and JSON to `--out`
(default benchmarks/results/ppo_throughput.json).
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
    partial_path,
    previous_results,
    print_table,
    run_metadata,
    run_worker,
    summarise,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "ppo_throughput.json"
BATCH = 4 * 128  # transitions per PPO update


def run_benchmark(args: argparse.Namespace, partial_out: Path | None = None) -> dict[str, Any]:
    rejax_py = None if args.skip_rejax else ensure_peer("rejax")
    sb3_py = None if args.skip_sb3 else ensure_peer("sb3")
    total = (args.total_steps // BATCH) * BATCH  # whole updates, identical for every library
    record = Recorder(partial_out=partial_out)

    common = {
        "total_steps": total,
        "eval_episodes": args.eval_episodes,
        "log_every": args.log_every,
    }
    for rep in range(args.repeats):
        for seeds in args.seeds:
            print(f"[repeat {rep + 1}/{args.repeats}] seeds={seeds}", flush=True)
            jobs = [(sys.executable, "jaxrl_ppo.py", {**common, "seeds": seeds, "seed": rep})]
            if not args.skip_matched:
                matched = {**common, "seeds": seeds, "seed": rep, "variant": "matched"}
                jobs.append((sys.executable, "jaxrl_ppo.py", matched))
            if rejax_py:
                jobs.append((rejax_py, "rejax_ppo.py", {**common, "seeds": seeds, "seed": rep}))
            if rep % 2:  # alternate who goes first
                jobs.reverse()
            for python, script, job_args in jobs:
                record(run_worker(python, script, job_args, args.timeout))
        if sb3_py:  # no seed vectorisation: one process = one seed
            print(f"[repeat {rep + 1}/{args.repeats}] sb3 {args.sb3_steps} steps", flush=True)
            record(
                run_worker(
                    sb3_py,
                    "sb3_ppo.py",
                    {
                        "total_steps": args.sb3_steps,
                        "seed": rep,
                        "eval_episodes": args.eval_episodes,
                    },
                    args.timeout,
                )
            )
    sb3_full = None
    if sb3_py and args.sb3_return_steps:
        print(f"[sb3] one run of {args.sb3_return_steps} steps for its final return", flush=True)
        sb3_full = run_worker(
            sb3_py,
            "sb3_ppo.py",
            {"total_steps": args.sb3_return_steps, "seed": 0, "eval_episodes": args.eval_episodes},
            args.timeout * 10,
        )
        print(
            f"  sb3 {args.sb3_return_steps} steps: return={sb3_full['eval_return_mean']:.1f} "
            f"steps/s={sb3_full['steps_per_second']:,.0f}",
            flush=True,
        )

    order = {"jaxrl": 0, "jaxrl-matched": 1, "rejax": 2, "sb3": 3}
    cells = sorted(
        (summarise(r) for r in record.cells.values()),
        key=lambda c: (c["seeds"], order.get(c["library"], 1)),
    )
    return {
        "cells": cells,
        "runs": record.runs(),
        "sb3_full_return_run": sb3_full,
        "total_steps": total,
    }


def run_profile(args: argparse.Namespace) -> dict[str, Any]:
    rejax_py = ensure_peer("rejax")
    out: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        for seeds in args.seeds:
            jobs = [(sys.executable, {"lib": "jaxrl"})]
            jobs.append((rejax_py, {"lib": "rejax"}))
            if rep % 2:
                jobs.reverse()
            for python, job in jobs:
                res = run_worker(
                    python,
                    "ppo_profile.py",
                    {**job, "seeds": seeds, "iters": args.iters},
                    args.timeout,
                )
                out.append(res)
                for name, v in res["variants"].items():
                    print(
                        f"  {res['lib']:<6} {name:<16} seeds={seeds:<3} "
                        f"update {v['update_ms']:8.2f} ms (min {v['update_min_ms']:7.2f}, "
                        f"cpu {v['update_cpu_ms']:7.2f})  rollout {v['rollout_ms']:7.2f} ms "
                        f"(cpu {v['rollout_cpu_ms']:6.1f})  hlo instr update/rollout "
                        f"{v['update_hlo']['hlo_instructions']}/{v['rollout_hlo']['hlo_instructions']}",
                        flush=True,
                    )
    return {"profile": out}


def _matched_work() -> dict[str, Any]:
    """The jaxrl-matched row's extra config options (read from the worker, one source)."""
    sys.path.insert(0, str(WORKERS))
    from jaxrl_ppo import MATCHED_WORK

    return dict(MATCHED_WORK)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 64], help="seed counts to measure")
    p.add_argument(
        "--total-steps", type=int, default=500_000, help="env steps per seed (jaxrl, rejax)"
    )
    p.add_argument("--sb3-steps", type=int, default=50_000, help="env steps per SB3 throughput run")
    p.add_argument(
        "--sb3-return-steps",
        type=int,
        default=0,
        help="also train SB3 once for this many steps for its final return (0: not measured)",
    )
    p.add_argument("--skip-sb3", action="store_true")
    p.add_argument("--skip-rejax", action="store_true")
    p.add_argument(
        "--skip-matched", action="store_true", help="leave out the jaxrl-matched (matched-work) row"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--log-every",
        type=int,
        default=None,
        help="jaxrl's log_every (sets its chunk length); default: the driver's (~50 chunks)",
    )
    p.add_argument("--eval-episodes", type=int, default=128)
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per worker process")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead: per-update profile (rollout vs full update, HLO op counts), jaxrl vs rejax",
    )
    p.add_argument("--iters", type=int, default=10, help="with --profile: timed calls per function")
    args = p.parse_args(argv)
    warn_if_loaded(
        "other work on this machine slows torch's threads far more than XLA's, "
        "so ratios measured now mislead"
    )

    meta = {
        **run_metadata("ppo_throughput", __file__, argv),
        "config": {
            "env": "CartPole-v1",
            "num_envs": 4,
            "num_steps": 128,
            "update_epochs": 4,
            "num_minibatches": 4,
            "lr": 2.5e-4,
            "anneal_lr": True,
            "gamma": 0.99,
            "gae_lambda": 0.95,
            "clip_eps": 0.2,
            "vf_clip": 0.2,
            "ent_coef": 0.01,
            "vf_coef": 0.5,
            "max_grad_norm": 0.5,
            "hidden_sizes": [64, 64],
            "activation": "tanh",
        },
        "matched_work": _matched_work(),
    }
    previous = previous_results(args.out)
    if args.profile:
        # Stored under "profile" in the results file, next to the benchmark's own results.
        result = {**previous, "profile": {**meta, **run_profile(args)}}
    else:
        # Progress of an unfinished run, outside the repository; removed at the end.
        partial = partial_path(args.out)
        print(f"progress: {partial}", flush=True)
        result = {**meta, **run_benchmark(args, partial)}
        partial.unlink(missing_ok=True)
        if "profile" in previous:  # keep the last --profile run
            result["profile"] = previous["profile"]
        print()
        print_table(result["cells"])
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
