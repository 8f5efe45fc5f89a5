"""jaxrl asynchronous GRPO worker for benchmarks/grpo_step.py (runs in the project venv).

    python jaxrl_grpo_async.py '{"model_dir": DIR, "max_new_tokens": 8, "warmup": 3,
                                 "steps": 20, "staleness": 1}'

The workload of `jaxrl_grpo.py` (same config, `grpo_config`) with `async_staleness` K:
the host CPU is split into 2 XLA devices, the sampler on the first and the learner on
the second, and each update is the driver's asynchronous step
(`jaxrl.training.async_stages.AsyncStagedStepper.run`, one update per call): parameters
copied to the sampler, batch u + K sampled while batch u is learned, its rewards scored
on the host meanwhile. Prints ONE JSON line.

`step_seconds` are the pipelined updates' wall times. `phases` are each phase *alone*,
measured after them on the same devices (5 times each, blocking): `sampling` (prepare +
sampling of one batch on the sampler's device), `rewards` (its `process`), `learning`
(one `learn` on the learner's device). Their sum is what one update costs with no
overlap, and max(sampling + rewards, learning) is the floor a pipelined update can
reach (`async_ms`); the measured step against the two says how much overlapped.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the synchronous worker

from jaxrl_grpo import _learn_flops, _xla_flops, grpo_config  # noqa: E402

PHASE_REPEATS = 5


def main(args: dict) -> dict:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    )
    import jax
    import numpy as np

    from jaxrl.algorithms.grpo.config import GRPOConfig
    from jaxrl.algorithms.grpo.train import GRPO
    from jaxrl.lm import from_pretrained
    from jaxrl.plan import matmul_cost
    from jaxrl.training import driver, progress
    from jaxrl.training.async_stages import AsyncStagedStepper

    warmup, steps, k = int(args["warmup"]), int(args["steps"]), int(args["staleness"])
    updates = warmup + steps + 2 * PHASE_REPEATS + k
    config = GRPOConfig(
        **grpo_config(int(args["max_new_tokens"]), updates),
        async_staleness=k,
        sampler_devices=1,
    )
    algo = GRPO(config)
    run = driver.RunConfig(seed=int(args.get("seed", 0)), progress=False, num_devices=2)
    agents = driver.make_agents(algo, run)
    mesh = algo.make_mesh(2)  # the learner's: the second device
    _, params = from_pretrained(args["model_dir"])
    state, shardings = driver.initial_state(algo, agents, mesh, jax.device_get(params))
    clock = progress.Clock()
    stepper = AsyncStagedStepper(algo, 1, mesh, shardings, clock, 2)
    host = algo.init_host_state(run.seed, 1)

    rows = config.num_prompts * config.group_size
    step_seconds, tokens = [], []
    for i in range(warmup + steps):  # the first update compiles both programs
        t0 = time.perf_counter()
        state, host, metrics = stepper.run(state, host, 1)
        seconds = time.perf_counter() - t0
        if i >= warmup:
            step_seconds.append(seconds)
            tokens.append(int(round(float(metrics["response_length_mean"][0, 0]) * rows)))

    # Each phase alone, blocking, on its own device.
    phases = {"sampling": [], "rewards": [], "learning": []}
    entry = None
    for _ in range(PHASE_REPEATS):
        t0 = time.perf_counter()
        pending, host = stepper._sample(host, stepper.update + k)
        jax.block_until_ready(pending[0])
        t1 = time.perf_counter()
        entry, host = stepper._score(pending, host)
        t2 = time.perf_counter()
        phases["sampling"].append(t1 - t0)
        phases["rewards"].append(t2 - t1)
    for _ in range(PHASE_REPEATS):
        t0 = time.perf_counter()
        state, metrics = stepper._learn(state, entry.rows)
        jax.block_until_ready(metrics)
        phases["learning"].append(time.perf_counter() - t0)

    alone = {name: 1e3 * statistics.median(v) for name, v in phases.items()}
    learn_jaxpr = jax.make_jaxpr(driver.agents_fn(algo.async_learn, 1))(state, entry.rows)
    # The summary expects one list entry per measured step for these.
    phases = {name: [statistics.median(v)] * steps for name, v in phases.items()}
    return {
        "library": f"jaxrl-a{k}",
        "cpu_devices": 2,
        "processes": 1,
        "micro_batches": 1,
        "staleness": k,
        "max_new_tokens": algo.max_new_tokens,
        "warmup": warmup,
        "steps": steps,
        "step_seconds": step_seconds,
        "phases": phases,
        "async_ms": {
            "step": 1e3 * statistics.fmean(step_seconds),
            "sampling_alone": alone["sampling"],
            "rewards_alone": alone["rewards"],
            "learning_alone": alone["learning"],
            "serial": alone["sampling"] + alone["rewards"] + alone["learning"],
            "pipelined_floor": max(alone["sampling"] + alone["rewards"], alone["learning"]),
        },
        "completion_tokens": tokens,
        "padded_completion_len": [algo.max_new_tokens] * steps,
        "prompt_len": algo.prompt_len,
        "compile_seconds": {"collect_and_learn": clock.wall},
        **_learn_flops(stepper.learn_fn, learn_jaxpr, matmul_cost, 1),
        "collect_flops_xla": _xla_flops(stepper.collect_fn),
        "rescoring_seconds": None,
        "matmul_floor": None,
        "rescores_in_loss": config.rescores_in_loss,
        "jax_backend": jax.default_backend(),
        "jax_devices": jax.device_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "versions": {"jax": jax.__version__},
        "pid": os.getpid(),
        "reward_mean": float(np.mean(entry.rows["rewards"])),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
