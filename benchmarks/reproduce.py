"""Reproduce any published result: `python -m benchmarks.reproduce`.

    python -m benchmarks.reproduce --list                  # every result, its tier and cost
    python -m benchmarks.reproduce --only ppo_cartpole     # one (or several) by name
    python -m benchmarks.reproduce --tier ci               # the cheap ones (minutes)
    python -m benchmarks.reproduce --tier full             # everything (hours; says how long)
    python -m benchmarks.reproduce --write-docs            # tables and figures from the files

Each result (benchmarks/registry.py) writes `benchmarks/results/<name>.json`, rewritten
in place (history is git's): the commit, date, CPU model and core count, load average
at the start, package versions, the per-seed values and their aggregate (IQM with a
95% stratified-bootstrap interval, mean, std; jaxrl/stats.py), the wall time, and
the canary of its algorithm (benchmarks/canaries.py), which tests/benchmarks/
test_canaries.py recomputes to find results that the code has left behind.

A machine busier than `QUIET_LOAD` (1-minute load average) at the start, or busier at
the end than the measurement alone can make it (`busy_at_end`), is recorded as loaded in
the file, and generated tables mark the result; speed results measured so are not worth
publishing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import canaries, lm_pipeline, registry
from jaxrl import stats

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
QUIET_LOAD = 1.5
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy")
CURVE_POINTS = 40  # a learning curve is kept at this many points (enough for a figure)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo; the platform's processor elsewhere)."""
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def commit() -> str:
    """HEAD's hash, with "-dirty" when the code differs from it (a result measured on
    uncommitted code is not reproducible from its commit alone)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    # What decides the numbers: the library and the entry's configuration and canary
    # (not the results files, which a batch rewrites as it goes).
    code = ("jaxrl", "envs", "benchmarks/registry.py", "benchmarks/canaries.py")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *code)
    return head + ("-dirty" if dirty else "")


def provenance() -> dict[str, Any]:
    """Where and when a result was measured: what a reader needs to trust or rerun it."""
    load = os.getloadavg()
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": [round(x, 2) for x in load],
        "loaded": round(load[0], 2) > QUIET_LOAD,
        "python": platform.python_version(),
        "packages": versions,
    }


def busy_at_end(record: dict[str, Any]) -> bool:
    """Whether other work shared the machine by the end of a measurement: the 1-minute
    load average at the end above `QUIET_LOAD` plus the core count. The measurement
    alone keeps up to one runnable thread per core, so a quiet run ends below that; a
    run that started quiet and ended so busy shared its cores for a while."""
    end, cores = record.get("load_average_at_end"), record.get("cores") or os.cpu_count()
    return bool(end) and end[0] > QUIET_LOAD + cores


def _curve(metrics: list[dict[str, Any]], key: str = "episode_return") -> dict[str, list]:
    """A compact learning curve: the mean over agents of `key` against environment steps,
    at most CURVE_POINTS points (rows without a finished episode are skipped)."""
    import numpy as np

    points = []
    for row in metrics:
        values = [v for v in np.ravel(np.asarray(row.get(key, []), dtype=float)) if v == v]
        if values and "env_steps" in row:
            points.append((int(row["env_steps"]), float(np.mean(values))))
    step = max(1, len(points) // CURVE_POINTS)
    kept = points[::step]
    if points and kept[-1] != points[-1]:
        kept.append(points[-1])
    return {"env_steps": [p[0] for p in kept], key: [round(p[1], 4) for p in kept]}


def run_env(entry: registry.Entry) -> dict[str, Any]:
    """A learning result in an environment: every seed in one program (vmapped)."""
    import jaxrl

    config_file = ROOT / entry.config_file if entry.config_file else None
    result = jaxrl.train(
        entry.algorithm,
        env=entry.env,
        config_file=config_file,
        num_seeds=entry.seeds,
        seed=0,
        progress=False,
        **entry.overrides,
    )
    summary = result.summary
    return {
        "per_seed": [float(x) for x in summary[entry.metric]],
        "curve": _curve(result.metrics),
        "details": {k: summary.get(k) for k in ("steps_per_second", "compile_seconds")},
    }


def run_task(entry: registry.Entry) -> dict[str, Any]:
    """A learning result of a language-model algorithm on its task, seeds vmapped."""
    import jaxrl

    with tempfile.TemporaryDirectory() as run_dir:
        summary = jaxrl.train(
            entry.algorithm,
            num_seeds=entry.seeds,
            seed=0,
            progress=False,
            run_dir=run_dir,
            **entry.overrides,
        ).summary
    keep = ("train_seconds", "compile_seconds", "stopped_at_samples_per_agent")
    return {
        "per_seed": [float(x) for x in summary[entry.metric]],
        "details": {k: summary.get(k) for k in keep},
    }


def updates_to_threshold(curve: list[tuple[int, float]], threshold: float) -> int | None:
    """The fewest updates in `curve` ((updates, held-out pass@1) pairs, updates
    increasing) whose pass@1 is at least `threshold`; None when no point reaches it."""
    return next((updates for updates, value in curve if value >= threshold), None)


def run_prm_pipeline(entry: registry.Entry) -> dict[str, Any]:
    """Per seed: an SFT warm start and a PRM from it (the value: the PRM's summary
    `metric`); with a "grpo" stage in `entry.overrides`, then GRPO from the warm start
    with the outcome reward for `updates` updates and with the PRM's step rewards for half
    as many (the value: the second's held-out pass@1 minus the first's).

    The step-rewarded run is trained in `segments` equal parts (default 1), each resuming
    the last (`resume=True`, the same run as one call), with held-out pass@1 after each:
    the curve and `updates_to_threshold`, the fewest of those updates whose pass@1
    reaches the outcome-only run's final pass@1 (None: not within half the updates)."""
    import jaxrl

    stages = entry.overrides
    per_seed, details = [], []
    for seed in range(entry.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            sft_dir, prm_dir = pathlib.Path(tmp) / "sft", pathlib.Path(tmp) / "prm"
            warm = jaxrl.train(
                "sft", seed=seed, progress=False, run_dir=str(sft_dir), **stages["sft"]
            ).summary
            reward_model = jaxrl.train(
                "prm",
                model=str(sft_dir),
                seed=seed,
                progress=False,
                run_dir=str(prm_dir),
                **stages["prm"],
            ).summary
            detail = {
                "seed": seed,
                "sft_eval_accuracy": warm.get("eval_accuracy"),
                "prm_eval_step_accuracy": reward_model.get("eval_step_accuracy"),
                "prm_eval_solution_accuracy": reward_model.get("eval_solution_accuracy"),
                "prm_train_seconds": reward_model.get("train_seconds"),
            }
            if "grpo" not in stages:
                value = reward_model[entry.metric]
            else:
                grpo_config = jaxrl.make_config("grpo", None, **stages["grpo"])
                per_update = grpo_config.num_prompts * grpo_config.group_size
                common = dict(stages["grpo"], model=str(sft_dir), seed=seed, progress=False)
                outcome = jaxrl.train(
                    "grpo", total_steps=stages["updates"] * per_update, **common
                ).summary
                half, segments = stages["updates"] // 2, stages.get("segments", 1)
                curve, seconds = [], 0.0
                for k in range(1, segments + 1):
                    process = jaxrl.train(
                        "grpo",
                        total_steps=half * k // segments * per_update,
                        process_reward=str(prm_dir),
                        run_dir=str(pathlib.Path(tmp) / "grpo-prm"),
                        resume=k > 1,
                        **common,
                    ).summary
                    curve.append((half * k // segments, process["pass@1_after"]))
                    seconds += process.get("train_seconds") or 0.0
                value = process["pass@1_after"] - outcome["pass@1_after"]
                detail.update(
                    {
                        "pass@1_before": outcome.get("pass@1_before"),
                        "outcome_updates": stages["updates"],
                        "outcome_pass@1_after": outcome["pass@1_after"],
                        "process_pass@1_after_half": process["pass@1_after"],
                        "process_pass@1_curve": curve,
                        "updates_to_threshold": updates_to_threshold(
                            curve, outcome["pass@1_after"]
                        ),
                        "grpo_train_seconds": [outcome.get("train_seconds"), seconds],
                    }
                )
        per_seed.append(float(value))
        details.append(detail)
        print(f"  seed {seed}: {value:+.4f}", flush=True)
    return {"per_seed": per_seed, "details": details}


def run_script(entry: registry.Entry) -> dict[str, Any]:
    """A speed result: the benchmark script, its whole JSON kept under `raw`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "raw.json"
        command = [sys.executable, *shlex.split(entry.command)[1:], "--out", str(out)]
        subprocess.run(command, cwd=ROOT, check=True)
        return {"raw": json.loads(out.read_text())}


def run_pytest(entry: registry.Entry) -> dict[str, Any]:
    """A duration: the wall time of the command (the default test suite)."""
    start = time.perf_counter()
    done = subprocess.run(shlex.split(entry.command), cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    return {"per_seed": [seconds], "details": {"exit_code": done.returncode}}


def run_offline(entry: registry.Entry) -> dict[str, Any]:
    """An offline learning result: the dataset's recipe (benchmarks/offline_datasets.py,
    its behaviour and expert runs trained here), then every seed in one program."""
    import jaxrl
    from benchmarks import offline_datasets

    overrides = dict(entry.overrides)
    recipe = getattr(offline_datasets, overrides.pop("dataset"))
    with tempfile.TemporaryDirectory() as tmp:
        path = recipe(tmp, expert=True)
        summary = jaxrl.train(
            entry.algorithm,
            env=entry.env,
            dataset=str(path),
            num_seeds=entry.seeds,
            seed=0,
            progress=False,
            **overrides,
        ).summary
    keep = ("steps_per_second", "compile_seconds", "final_eval_returns_per_agent")
    keep += tuple(k for k in summary if k.startswith(("dataset_", "final_return")))
    return {
        "per_seed": [float(x) for x in summary[entry.metric]],
        "details": {k: summary.get(k) for k in keep},
    }


def steps_to_threshold(
    rows: list[dict[str, Any]], threshold: float, window: int
) -> list[int | None]:
    """Per agent, the environment steps of the first logged row at which the mean return
    of the episodes that ended in the last `window` environment steps (the rows after
    `env_steps - window`, each episode weighing the same, as summary.json's final
    return weighs them) is at least `threshold`; None if no row gets there. Rows before
    `window` steps are skipped, so one early episode cannot decide it alone."""
    agents = len(rows[0]["episodes"])
    reached: list[int | None] = [None] * agents
    for i, row in enumerate(rows):
        now = int(row["env_steps"])
        if now < window:
            continue
        recent = [r for r in rows[: i + 1] if int(r["env_steps"]) > now - window]
        for a in range(agents):
            if reached[a] is not None:
                continue
            count = sum(float(r["episodes"][a]) for r in recent)
            total = sum(
                float(r["episodes"][a]) * float(r["episode_return"][a])
                for r in recent
                if r["episodes"][a]
            )
            if count and total / count >= threshold:
                reached[a] = now
    return reached


def run_offline_to_online(entry: registry.Entry) -> dict[str, Any]:
    """Per seed s: an offline learner (`overrides["offline"]`: its algorithm and config)
    on the dataset's recipe, seed s, then the entry's algorithm online from its run
    (`init_from`) with the dataset mixed in, seed s. The value: the environment steps at
    which its return over the last 10% of the reference result's budget (the window of
    the reference's final return) first reaches the reference's IQM final return
    (`overrides["reference"]`, a results file); a seed that never does counts as the
    whole budget (a lower bound, `reached` False in its details)."""
    import jaxrl
    from benchmarks import offline_datasets
    from jaxrl.training.summary import FINAL_RETURN_WINDOW

    overrides = dict(entry.overrides)
    recipe = getattr(offline_datasets, overrides.pop("dataset"))
    offline = dict(overrides.pop("offline"))
    offline_algorithm = offline.pop("algorithm")
    reference = registry.get(overrides.pop("reference"))
    threshold = json.loads((RESULTS / f"{reference.name}.json").read_text())["aggregate"]["iqm"]
    reference_steps = jaxrl.make_config(
        reference.algorithm, reference.env, **reference.overrides
    ).total_steps
    window = int(round(FINAL_RETURN_WINDOW * reference_steps))
    budget = overrides["total_steps"]
    per_seed, details = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(recipe(tmp, expert=True))
        for seed in range(entry.seeds):
            run_dir = str(pathlib.Path(tmp) / f"{offline_algorithm}-{seed}")
            pretrained = jaxrl.train(
                offline_algorithm,
                env=entry.env,
                dataset=path,
                seed=seed,
                run_dir=run_dir,
                progress=False,
                **offline,
            ).summary
            result = jaxrl.train(
                entry.algorithm,
                env=entry.env,
                dataset=path,
                init_from=run_dir,
                seed=seed,
                progress=False,
                log_every=max(1, window // 60),
                **overrides,
            )
            (steps,) = steps_to_threshold(result.metrics, threshold, window)
            per_seed.append(float(budget if steps is None else steps))
            details.append(
                {
                    "seed": seed,
                    "reached": steps is not None,
                    "offline_final_eval_normalized_score": pretrained[
                        "final_eval_normalized_score_per_agent"
                    ][0],
                    "offline_final_eval_return": pretrained["final_eval_returns_per_agent"][0],
                    "final_return": result.summary["final_return_per_agent"][0],
                    "train_seconds": result.summary.get("train_seconds"),
                }
            )
            print(f"  seed {seed}: {per_seed[-1]:.0f} steps (reached: {steps is not None})")
    return {
        "per_seed": per_seed,
        "details": {
            "reference": reference.name,
            "threshold_return": threshold,
            "reference_steps": reference_steps,
            "window_steps": window,
            "budget_steps": budget,
            "seeds": details,
        },
    }


RUNNERS = {
    "env": run_env,
    "offline": run_offline,
    "offline_to_online": run_offline_to_online,
    "task": run_task,
    "lm_pipeline": lm_pipeline.run,
    "prm_pipeline": run_prm_pipeline,
    "script": run_script,
    "pytest": run_pytest,
}


# A plan compiles steps and reads XLA's analysis; it trains nothing, so no training
# canary can say it is stale. tests/test_plan.py pins what must not drift (the 8B plan's
# parameter and optimizer rows); rerun the result when the planner or GRPO's step changes.
PLAN_CANARY_NOTE = (
    "a plan trains nothing (XLA's analysis of compiled steps): rerun it when the planner "
    "or GRPO's step changes; tests/test_plan.py pins the 8B plan's state rows"
)


# An extra whose module is named otherwise (pyproject's optional dependencies).
EXTRA_MODULES = {"playground": "mujoco_playground"}


def missing_extra(entry: registry.Entry) -> str | None:
    """One line naming the optional extra `entry` needs and this Python lacks; None when
    it needs none or has it."""
    if entry.extra is None:
        return None
    import importlib.util

    if importlib.util.find_spec(EXTRA_MODULES.get(entry.extra, entry.extra)) is not None:
        return None
    return (
        f"{entry.name} needs the {entry.extra} extra: run `python -m benchmarks.reproduce "
        f"--only {entry.name}` with a Python that has it (pip install 'jaxrl[{entry.extra}]')"
    )


def measure(entry: registry.Entry) -> dict[str, Any]:
    """Runs `entry` and returns its results file's content (not yet written)."""
    record: dict[str, Any] = {
        "name": entry.name,
        "kind": entry.kind,
        "measures": entry.measures,
        "command": entry.command,
        "reproduce": f"python -m benchmarks.reproduce --only {entry.name}",
        "seeds": entry.seeds,
        "overrides": entry.overrides,
        "peer": entry.peer,
        **provenance(),
    }
    start = time.perf_counter()
    measured = RUNNERS[entry.runner](entry)
    record["wall_seconds"] = round(time.perf_counter() - start, 1)
    record["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    record["loaded"] = record["loaded"] or busy_at_end(record)
    if "per_seed" in measured:
        record["per_seed"] = measured.pop("per_seed")
        record["aggregate"] = stats.aggregate(record["per_seed"])
    record.update(measured)
    record["canary"] = (
        {"name": entry.canary, "metrics": canaries.compute(entry.canary)} if entry.canary else None
    )
    if entry.kind == "plan":
        record["canary_note"] = PLAN_CANARY_NOTE
    return record


def write(record: dict[str, Any]) -> pathlib.Path:
    """Writes a results file in place (never a renamed copy)."""
    path = RESULTS / f"{record['name']}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def _list() -> None:
    width = max(len(n) for n in registry.names())
    for e in registry.ENTRIES:
        path = RESULTS / f"{e.name}.json"
        state = "measured" if path.exists() else "not measured"
        print(f"{e.name:<{width}}  {e.tier:<4}  {e.kind:<8}  ~{e.minutes:g} min  {state}")
        seeds = f"{e.seeds} seeds, " if e.seeds else ""
        budget = f"overrides {e.overrides}, " if e.overrides else ""
        print(f"{'':<{width}}  {e.measures}")
        print(f"{'':<{width}}  {seeds}{budget}`{e.command}`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reproduce",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--list", action="store_true", help="list every result and exit")
    group.add_argument("--only", nargs="+", metavar="NAME", help="measure these results")
    group.add_argument("--tier", choices=("ci", "full"), help="measure a whole tier")
    group.add_argument(
        "--write-docs", action="store_true", help="write the generated tables and figures"
    )
    args = parser.parse_args(argv)
    if args.list:
        _list()
        return 0
    if args.write_docs:
        from benchmarks import docs

        docs.write_all()
        return 0
    if args.only:
        unknown = [n for n in args.only if n not in registry.names()]
        if unknown:
            print(
                f"unknown result {unknown[0]!r}; known: {', '.join(registry.names())}",
                file=sys.stderr,
            )
            return 2
        entries = [registry.get(n) for n in args.only]
        missing = [line for line in map(missing_extra, entries) if line]
        if missing:  # before anything runs
            print(missing[0], file=sys.stderr)
            return 2
    else:
        entries = registry.tier(args.tier)
    minutes = sum(e.minutes for e in entries)
    if args.tier == "full":
        print(
            f"warning: --tier full measures {len(entries)} results, about {minutes / 60:.1f} "
            "hours on a quiet 2-core CPU; speed results need load average below "
            f"{QUIET_LOAD}",
            file=sys.stderr,
            flush=True,
        )
    if args.tier:  # a tier runs what this Python can, and says what it skips
        for line in filter(None, map(missing_extra, entries)):
            print(f"skipped: {line}", file=sys.stderr, flush=True)
        entries = [e for e in entries if missing_extra(e) is None]
    for entry in entries:
        load = os.getloadavg()[0]
        note = f" (loaded: load average {load:.2f} > {QUIET_LOAD})" if load > QUIET_LOAD else ""
        print(f"{entry.name}: ~{entry.minutes:g} min{note}", flush=True)
        record = measure(entry)
        path = write(record)
        agg = record.get("aggregate")
        shown = f"IQM {agg['iqm']:.4g} {agg['iqm_ci95']}" if agg else "raw kept"
        print(f"{entry.name}: {shown}, {record['wall_seconds']:.0f} s -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
