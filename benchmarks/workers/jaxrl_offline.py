"""jaxrl IQL / TD3+BC / CQL worker for benchmarks/offline_throughput.py (runs in the
project venv).

    python jaxrl_offline.py '{"algorithm": "iql", "dataset": "/path/data.npz",
                             "config": {...}, "steps": 2000, "seeds": 1, "seed": 0}'

`config` is the benchmark's matched configuration in library-neutral names
(`CONFIGS` in benchmarks/offline_throughput.py); `jaxrl_fields` maps it to the
algorithm's config fields. Trains with the product path, `jaxrl.train(algorithm,
env, dataset=..., num_seeds=seeds)` (seeds vmapped in one program), `steps` gradient
steps per seed in updates of `eval_interval` gradient steps, each followed by one
evaluation episode (the offline base evaluates at the end of every update; 200
Pendulum steps of the policy per `eval_interval` gradient steps, counted in the time).
Throughput is gradient steps summed over seeds per second of the driver's training
calls (compilation excluded: the driver's own `train_seconds` and `compile_seconds`).
Prints ONE JSON line.

`"mode": "profile"` instead times one gradient step (sampling and `learn_step`, `steps`
of them in one jitted `lax.scan`, best of 3) of one agent and its matmul floor
(benchmarks/matmul_floor.py: the step's matrix products, each timed alone in a loop):
a step near its floor is bound by the arithmetic its algorithm asks for, not by the
implementation around it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Neutral keys that are not config fields (they describe the environment's bounds, which
# jaxrl reads off the environment).
_NOT_FIELDS = {"env", "action_low", "action_high"}


def jaxrl_fields(name: str, config: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """jaxrl config overrides for the neutral `config` of algorithm `name`; a
    `ValueError` names a neutral key it cannot set. `num_critics` is 2 by construction
    (jaxrl's IQL, TD3+BC and CQL have twin critics)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in _NOT_FIELDS:
            continue
        if key == "num_critics":
            if value != 2:
                raise ValueError(f"jaxrl's {name} has 2 critics, the benchmark asks {value}")
            continue
        if key not in fields:
            raise ValueError(f"jaxrl's {name} config has no field {key!r}")
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


def main(args: dict[str, Any]) -> dict[str, Any]:
    import dataclasses

    import jax

    import jaxrl
    from jaxrl import algorithms

    name, c = args["algorithm"], args["config"]
    fields = {f.name for f in dataclasses.fields(algorithms.get(name).Config)}
    steps, seeds = int(args["steps"]), int(args.get("seeds", 1))
    hparams = jaxrl_fields(name, c, fields)
    result = jaxrl.train(
        name,
        env=c["env"],
        dataset=args["dataset"],
        total_steps=steps,
        eval_interval=int(args.get("eval_interval", 1000)),
        eval_episodes=1,
        num_seeds=seeds,
        seed=int(args.get("seed", 0)),
        progress=False,
        **hparams,
    )
    s = result.summary
    total = s["gradient_steps_per_agent"] * s["num_agents"]
    return {
        "library": "jaxrl",
        "algorithm": name,
        "seeds": seeds,
        "total_steps": s["gradient_steps_per_agent"],
        "train_seconds": s["train_seconds"],
        "steps_per_second": total / s["train_seconds"],
        "cpu_steps_per_second": total / s["train_cpu_seconds"] if s["train_cpu_seconds"] else None,
        "compile_seconds": s["compile_seconds"],
        "jax_version": jax.__version__,
    }


def profile(args: dict[str, Any]) -> dict[str, Any]:
    """Milliseconds per gradient step of one agent, measured and its matmul floor."""
    import dataclasses
    import time

    import jax
    import jax.numpy as jnp

    from jaxrl import algorithms, prng
    from jaxrl import config as cfg

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
    from matmul_floor import matmul_floor

    name, c, steps = args["algorithm"], args["config"], int(args["steps"])
    entry = algorithms.get(name)
    fields = {f.name for f in dataclasses.fields(entry.Config)}
    config = cfg.replace(
        entry.Config(env=c["env"], dataset=args["dataset"]), **jaxrl_fields(name, c, fields)
    )
    algo = entry.make(config)
    hparams = algo.hyperparams()
    state = jax.jit(algo.init)(jax.random.key(0), hparams)

    def one(params, learner, key, grad_step):
        k_sample, k_learn = prng.split(key)
        batch = algo.sample_batch(state.dataset, k_sample, hparams)
        return algo.learn_step(params, learner, batch, hparams, k_learn, grad_step)

    @jax.jit
    def run(params, learner, key):
        def body(carry, k):
            params, learner, step = carry
            params, learner, metrics = one(params, learner, k, step)
            return (params, learner, step + 1), metrics["loss"]

        return jax.lax.scan(body, (params, learner, jnp.int32(0)), prng.split(key, steps))

    jax.block_until_ready(run(state.params, state.learner, state.key))
    times = []
    for i in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(run(state.params, state.learner, jax.random.key(i)))
        times.append(time.perf_counter() - t0)
    jaxpr = jax.make_jaxpr(one)(state.params, state.learner, state.key, jnp.int32(0))
    floor = matmul_floor(jaxpr, method="loop")
    return {
        "library": "jaxrl",
        "algorithm": name,
        "mode": "profile",
        "ms_per_step": 1e3 * min(times) / steps,
        "floor_ms_per_step": 1e3 * floor["seconds"],
        "floor_gflop_per_step": floor["flops"] / 1e9,
        "top_products": floor["top"][:5],
    }


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    print(json.dumps(profile(job) if job.get("mode") == "profile" else main(job)), flush=True)
