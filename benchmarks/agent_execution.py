"""How a device runs its agents: `vmap` (batched) against `map` (one after another).

    python benchmarks/agent_execution.py                     # every case, 16 agents
    python benchmarks/agent_execution.py --cases sac-64 --agents 16 --pin

`RunConfig.agent_execution` (docs/ARCHITECTURE.md, "Agents: batched or one by one")
compiles a fused algorithm's chunk either as a scan of the update vmapped over the
agents, or as `lax.map` over the agents of each agent's own scan. This times one
chunk of `--updates` updates both ways, with the driver's own program
(`driver.scan_updates`), for each case's algorithm and config, after `--warmup`
updates that take the off-policy agents past their warm-up (so both time learning
steps), and prints microseconds per agent-update and environment steps per second.
Each timing is the median of `--repeats` calls (`_harness.time_calls`), in one process
with every core (`--pin`: the first core only), the two modes alternating.

Cases: `sac-64` is the off-policy benchmark's SAC configuration (64-64 networks,
batch 256; benchmarks/offpolicy_throughput.py); the others are jaxrl's presets of the
algorithm on its default environment (`sac`, `td3`: Pendulum-v1, 128-128; `dqn`,
`ppo`: CartPole-v1). Writes JSON to `--out` (default
benchmarks/results/agent_execution.json).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from _harness import HERE, fmt, run_metadata, time_calls, warn_if_loaded, write_results

DEFAULT_OUT = HERE / "results" / "agent_execution.json"
# (algorithm, environment, config overrides, updates before timing, updates per timed
# call). The off-policy cases learn from step 256 on, so both modes time learning steps.
CASES: dict[str, tuple[str, str, dict[str, Any], int, int]] = {
    "sac-64": ("sac", "Pendulum-v1", {}, 300, 200),  # overrides: the benchmark's SAC_CONFIG
    "sac": ("sac", "Pendulum-v1", {"learning_starts": 256}, 300, 100),
    "td3": ("td3", "Pendulum-v1", {"learning_starts": 256}, 300, 100),
    "dqn": ("dqn", "CartPole-v1", {"learning_starts": 256}, 30, 200),
    "ppo": ("ppo", "CartPole-v1", {}, 1, 2),
}


def sac_benchmark_overrides() -> dict[str, Any]:
    """The off-policy benchmark's SAC config as jaxrl fields (one source of truth)."""
    import dataclasses

    sys.path.insert(0, str(HERE / "workers"))
    from jaxrl_offpolicy import jaxrl_fields
    from offpolicy_throughput import SAC_CONFIG

    from jaxrl.algorithms.sac.config import SACConfig

    fields = {f.name for f in dataclasses.fields(SACConfig)}
    config = jaxrl_fields("sac", {**SAC_CONFIG, "learning_starts": 256}, fields)
    config.pop("env", None)
    return config


def measure(case: str, num_agents: int, repeats: int) -> list[dict[str, Any]]:
    import jax

    from jaxrl import algorithms
    from jaxrl.api import make_config
    from jaxrl.training import driver, mesh

    name, env, overrides, warmup, updates = CASES[case]
    if case == "sac-64":
        overrides = sac_benchmark_overrides()
    algo = algorithms.get(name).make(make_config(name, env, **overrides))
    agents = driver.make_agents(algo, driver.RunConfig(num_seeds=num_agents))
    fresh, _ = driver.initial_state(algo, agents, mesh.data_mesh(1))
    past_warmup = jax.jit(driver.scan_updates(algo, num_agents, warmup))(fresh)[0]
    programs = {
        mode: jax.jit(driver.scan_updates(algo, num_agents, updates, mode))
        for mode in driver.AGENT_EXECUTIONS
    }
    rows = []
    for mode, program in programs.items():
        timing = time_calls(lambda p=program: jax.block_until_ready(p(past_warmup)), repeats)
        per_update = timing["wall"] / updates
        rows.append(
            {
                "case": case,
                "algorithm": name,
                "env": env,
                "agents": num_agents,
                "agent_execution": mode,
                "updates_per_call": updates,
                "us_per_agent_update": per_update / num_agents * 1e6,
                "env_steps_per_second": num_agents * algo.steps_per_update / per_update,
                "cpu_us_per_agent_update": timing["cpu"] / updates / num_agents * 1e6,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--repeats", type=int, default=6, help="timed calls per mode")
    p.add_argument("--pin", action="store_true", help="run on the first allowed core only")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.pin:  # before JAX starts: XLA sizes its thread pool from the affinity mask
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    warn_if_loaded("the two modes use the cores differently, so other work skews the ratio")
    result = {**run_metadata("agent_execution", __file__, argv), "rows": []}
    print(f"{'case':<8} {'agents':>6} {'mode':>5} {'us/agent-update':>16} {'env steps/s':>12}")
    for case in args.cases:
        for row in measure(case, args.agents, args.repeats):
            result["rows"].append(row)
            print(
                f"{case:<8} {row['agents']:>6} {row['agent_execution']:>5} "
                f"{fmt(row['us_per_agent_update'], ',.1f'):>16} "
                f"{fmt(row['env_steps_per_second'], ',.0f'):>12}",
                flush=True,
            )
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
