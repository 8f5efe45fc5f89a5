"""`jaxrl plan` compiles the programs the driver runs, not a re-implementation of them.

On eight emulated CPU devices (a subprocess started with
`--xla_force_host_platform_device_count=8`, as the other multi-device tests do), every
phase program the driver lowers while it trains a tiny run is recorded, and so is
every program `jaxrl.plan.plan(..., topology="cpu:8")` lowers for the same algorithm,
config and run options; their StableHLO texts (`Lowered.as_text()`) must be equal.
Both go through `jaxrl.training.steppers.lower_phase`; the recording wraps it, so the
comparison covers what each side passes in: the abstract state and inputs, their
shardings, the chunk length and how the agents run. Once every program of a case is
lowered, the recording stops the run or plan (what compiles or runs next is not
compared).

Cases: PPO with `agent_execution="vmap"` and `"map"` (eight agents, one per device:
the `shard_map` of per-device `lax.map`s), SAC (two agents), and GRPO's `collect` and
`learn` (a staged algorithm on the language models' `data x fsdp` mesh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = textwrap.dedent(
    """
    import contextlib
    import json
    import jax
    import jaxrl
    import jaxrl.plan
    from jaxrl import algorithms
    from jaxrl.training import driver, steppers

    assert jax.device_count() == 8, jax.devices()
    recorded = []
    lower_phase = steppers.lower_phase

    COMPILED = ("update", "collect", "learn")  # the phases that are programs

    class Lowered(Exception):
        pass  # every program of the case is lowered: stop before compiling or running

    def recording(algo, phase, args, **kwargs):
        program = lower_phase(algo, phase, args, **kwargs)
        recorded.append((phase, program.lowered.as_text()))
        if len(recorded) == len([p for p in algo.phases if p in COMPILED]):
            raise Lowered
        return program

    steppers.lower_phase = recording

    def programs(call):
        recorded.clear()
        with contextlib.suppress(Lowered):
            call()
        return list(recorded)

    LM = dict(digits=2, num_eval=8, num_layers=1, hidden_size=32, num_heads=2,
              num_kv_heads=2, mlp_size=64, eval_batch_size=32, num_prompts=8, group_size=2,
              total_steps=16, eval_samples=4)
    CASES = {
        "ppo-vmap": ("ppo", "CartPole-v1", dict(total_steps=2 * 8 * 2 * 8, num_envs=2,
                     num_steps=8, update_epochs=1, num_minibatches=1),
                     dict(num_seeds=8, agent_execution="vmap", log_every=2 * 16)),
        "ppo-map": ("ppo", "CartPole-v1", dict(total_steps=2 * 8 * 2 * 8, num_envs=2,
                    num_steps=8, update_epochs=1, num_minibatches=1),
                    dict(num_seeds=8, agent_execution="map", log_every=2 * 16)),
        "sac": ("sac", "Pendulum-v1", dict(total_steps=24, batch_size=8, buffer_size=64,
                learning_starts=8, hidden_sizes=(16, 16)), dict(num_seeds=2)),
        "grpo": ("grpo", None, LM, dict(num_seeds=1)),
    }
    report = {}
    for case, (name, env, config, run) in CASES.items():
        algo = algorithms.get(name).make(jaxrl.make_config(name, env, **config))
        ran = programs(lambda: driver.train(algo, driver.RunConfig(progress=False, **run)))
        planned = programs(lambda: jaxrl.plan.plan(
            name, env, topology="cpu:8", suggest=False, **config, **run))
        report[case] = {
            "driver": [phase for phase, _ in ran],
            "plan": [phase for phase, _ in planned],
            "equal": [a == b for (_, a), (_, b) in zip(ran, planned)],
            "chars": [len(text) for _, text in planned],
        }

    print("REPORT " + json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report() -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append("--xla_force_host_platform_device_count=8")
    env.update(XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[-1][len("REPORT ") :])


@pytest.mark.parametrize(
    ("case", "phases"),
    [
        ("ppo-vmap", ["update"]),
        ("ppo-map", ["update"]),
        ("sac", ["update"]),
        ("grpo", ["collect", "learn"]),
    ],
)
def test_plan_lowers_the_programs_the_driver_runs(report, case, phases) -> None:
    result = report[case]
    assert result["driver"] == result["plan"] == phases, result
    assert all(result["equal"]) and all(n > 1000 for n in result["chars"]), result


def test_map_and_vmap_are_different_programs(report) -> None:
    """The comparison can fail: PPO's mapped chunk is not its vmapped one."""
    assert report["ppo-map"]["chars"] != report["ppo-vmap"]["chars"]
