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
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
DEFAULT_OUT = HERE / "results" / "ppo_throughput.json"
BATCH = 4 * 128  # transitions per PPO update

# Requirements of the peers' private virtualenvs (see benchmarks/_venvs.py).
REJAX_REQUIREMENTS = ["rejax==0.1.3", "gymnax==0.0.9", "jax==0.10.2", "jaxlib==0.10.2"]
SB3_REQUIREMENTS = ["torch==2.13.0", "stable-baselines3", "gymnasium"]


def run_worker(
    python: Path | str, script: str, args: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Runs `workers/<script>` with `args` as JSON; returns its last stdout line, parsed."""
    cmd = [str(python), str(WORKERS / script), json.dumps(args)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=WORKERS)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"worker {script} {args} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    result = json.loads(lines[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


def ensure_peer(name: str) -> Path:
    sys.path.insert(0, str(HERE))
    from _venvs import ensure_venv  # another engineer's helper, reused as is

    return ensure_venv(name, REJAX_REQUIREMENTS if name == "rejax" else SB3_REQUIREMENTS)


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of a cell's repeats (returns: mean over repeats of the per-run seed means)."""
    out = {
        "library": runs[0]["library"],
        "seeds": runs[0]["seeds"],
        "total_steps": runs[0]["total_steps"],
        "repeats": len(runs),
    }
    for key in (
        "steps_per_second",
        "cpu_steps_per_second",
        "compile_seconds",
        "cpu_compile_seconds",
        "train_seconds",
    ):
        out[key] = median([r.get(key) for r in runs])
    for key in ("eval_return_mean", "train_return_mean"):
        vals = [r.get(key) for r in runs if r.get(key) is not None]
        out[key] = statistics.fmean(vals) if vals else None
    seeds_all = [x for r in runs for x in r.get("eval_return_per_seed", [])]
    out["eval_return_std_over_seeds"] = statistics.pstdev(seeds_all) if len(seeds_all) > 1 else None
    return out


def fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def print_table(cells: list[dict[str, Any]]) -> None:
    """One group per seed count; SB3 (no seed vectorisation) joins each group at its 1-seed rate."""
    base = {c["seeds"]: c for c in cells if c["library"] == "jaxrl"}
    sb3 = [c for c in cells if c["library"] == "sb3"]
    w = max([8, *(len(c["library"]) for c in cells)])
    head = (
        f"{'library':<{w}} {'seeds':>5} {'steps':>8} {'steps/s':>10} {'jaxrl/x':>8} "
        f"{'cpu st/s':>10} {'jaxrl/x':>8} {'compile s':>9} {'return':>7} {'train ret':>9}"
    )
    print(head)
    print("-" * len(head))
    for seeds in sorted(base):
        ref = base[seeds]
        group = [c for c in cells if c["seeds"] == seeds and c["library"] != "sb3"] + sb3
        for c in group:
            ratio = cpu_ratio = None
            if c["steps_per_second"]:
                ratio = ref["steps_per_second"] / c["steps_per_second"]
            if c.get("cpu_steps_per_second") and ref.get("cpu_steps_per_second"):
                cpu_ratio = ref["cpu_steps_per_second"] / c["cpu_steps_per_second"]
            label = f"{c['seeds']}" if c["library"] != "sb3" else "1*"
            print(
                f"{c['library']:<{w}} {label:>5} {c['total_steps']:>8} "
                f"{fmt(c['steps_per_second'], ',.0f'):>10} "
                f"{fmt(ratio, '.2f'):>8} {fmt(c.get('cpu_steps_per_second'), ',.0f'):>10} "
                f"{fmt(cpu_ratio, '.2f'):>8} {fmt(c['compile_seconds'], '.1f'):>9} "
                f"{fmt(c['eval_return_mean'], '.1f'):>7} {fmt(c['train_return_mean'], '.1f'):>9}"
            )
    print("jaxrl/x = jaxrl's throughput / this row's (same group); > 1 means jaxrl is faster.")
    for seeds in sorted(base):
        matched = _cell(cells, "jaxrl-matched", seeds)
        rejax = _cell(cells, "rejax", seeds)
        if matched and rejax and matched["steps_per_second"] and rejax["steps_per_second"]:
            cpu = None
            if matched.get("cpu_steps_per_second") and rejax.get("cpu_steps_per_second"):
                cpu = matched["cpu_steps_per_second"] / rejax["cpu_steps_per_second"]
            print(
                f"matched work, {seeds} seeds: jaxrl-matched / rejax = "
                f"{matched['steps_per_second'] / rejax['steps_per_second']:.2f} "
                f"(cpu {fmt(cpu, '.2f')})"
            )
    if sb3:
        print(
            "1* SB3 runs one seed per process (no vectorisation); "
            "N seeds one after another run at its 1-seed rate."
        )


def _cell(cells: list[dict[str, Any]], library: str, seeds: int) -> dict[str, Any] | None:
    """The summary cell of `library` at `seeds` seeds, if measured."""
    return next((c for c in cells if c["library"] == library and c["seeds"] == seeds), None)


def run_benchmark(args: argparse.Namespace, partial_out: Path | None = None) -> dict[str, Any]:
    rejax_py = None if args.skip_rejax else ensure_peer("rejax")
    sb3_py = None if args.skip_sb3 else ensure_peer("sb3")
    total = (args.total_steps // BATCH) * BATCH  # whole updates, identical for every library
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def record(result: dict[str, Any]) -> None:
        runs.setdefault((result["library"], result["seeds"]), []).append(result)
        if partial_out is not None:  # progress survives an interrupted run
            partial_out.write_text(
                json.dumps(
                    {"partial": True, "runs": [r for rs in runs.values() for r in rs]}, indent=2
                )
                + "\n"
            )
        print(
            f"  {result['library']:<6} seeds={result['seeds']:<3} "
            f"steps/s={result['steps_per_second']:>12,.0f} "
            f"cpu steps/s={fmt(result.get('cpu_steps_per_second'), ',.0f'):>12} "
            f"compile={result['compile_seconds']:.1f}s return={result['eval_return_mean']:.1f} "
            f"({result['process_seconds']:.0f}s)",
            flush=True,
        )

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
        (summarise(r) for r in runs.values()),
        key=lambda c: (c["seeds"], order.get(c["library"], 1)),
    )
    return {
        "cells": cells,
        "runs": [r for rs in runs.values() for r in rs],
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
    load = __import__("os").getloadavg()[0]
    if load > 1.5:
        print(
            f"warning: load average {load:.1f} > 1.5: other work on this machine slows "
            "torch's threads far more than XLA's, so ratios measured now mislead",
            file=sys.stderr,
        )

    meta = {
        "benchmark": "ppo_throughput",
        # The command as typed (the --out path included), so the file says how it was made.
        "command": " ".join(
            [
                "python",
                "benchmarks/" + Path(__file__).name,
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_at_start": list(__import__("os").getloadavg()),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(),
        },
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
    if args.profile:
        # Stored under "profile" in the results file, next to the benchmark's own results.
        profile = {**meta, **run_profile(args)}
        result = json.loads(args.out.read_text()) if args.out.exists() else {}
        result["profile"] = profile
        out = args.out
    else:
        previous = json.loads(args.out.read_text()) if args.out.exists() else {}
        # Progress of an unfinished run, outside the repository; removed at the end.
        partial = Path(tempfile.gettempdir()) / f"{args.out.stem}.partial.json"
        print(f"progress: {partial}", flush=True)
        result = {**meta, **run_benchmark(args, partial)}
        partial.unlink(missing_ok=True)
        if "profile" in previous:  # keep the last --profile run
            result["profile"] = previous["profile"]
        print()
        print_table(result["cells"])
        out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
