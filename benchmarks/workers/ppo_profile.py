"""Per-update profile of one PPO iteration, jaxrl or rejax (run by ppo_throughput.py --profile).

    python ppo_profile.py '{"lib": "jaxrl", "seeds": 64, "iters": 20}'

Runs in the project venv for jaxrl and in benchmarks/.venvs/rejax for rejax
(the file imports only what `lib` needs). It jits
`vmap(update)` (one full PPO iteration: rollout + GAE + epochs) and
`vmap(rollout)` (the 128-step collection alone), records the compiled HLO's
op counts and XLA's cost analysis, and times `iters` calls of each after a
warm-up. Prints ONE JSON line.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import time


def hlo_stats(compiled) -> dict:
    text = compiled.as_text()
    ops = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[^ ]+(?:\{[^}]*\})?\s+([\w\-]+)\(", line)
        if m:
            ops[m.group(1)] += 1
    try:
        cost = compiled.cost_analysis()
        if isinstance(cost, list):
            cost = cost[0]
        cost = {
            k: float(v)
            for k, v in (cost or {}).items()
            if k in ("flops", "bytes accessed", "transcendentals")
        }
    except Exception as err:  # noqa: BLE001 - best effort
        cost = {"error": str(err)}
    keep = (
        "fusion",
        "dot",
        "while",
        "conditional",
        "custom-call",
        "rng-bit-generator",
        "sort",
        "gather",
        "scatter",
        "call",
        "copy",
        "dynamic-slice",
        "dynamic-update-slice",
    )
    return {
        "hlo_lines": len(text.splitlines()),
        "hlo_instructions": sum(ops.values()),
        "ops": {k: ops[k] for k in keep if ops[k]},
        "cost": cost,
    }


def time_calls(fn, state, iters: int) -> tuple[float, float, float]:
    """(median wall, median CPU, min wall) seconds per call. On a shared machine the
    minimum is the least load-sensitive estimate of what the program itself costs."""
    import jax

    out = jax.block_until_ready(fn(state))  # warm-up
    walls, cpus = [], []
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(fn(out[0]))
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2], min(walls)


def profile(update, rollout, state, iters: int) -> dict:
    import jax

    out = {}
    for name, fn in (("update", update), ("rollout", rollout)):
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(state).compile()
        out[f"{name}_compile_s"] = time.perf_counter() - t0
        out[f"{name}_hlo"] = hlo_stats(compiled)
        wall, cpu, best = time_calls(compiled, state, iters)
        out[f"{name}_ms"] = 1e3 * wall
        out[f"{name}_cpu_ms"] = 1e3 * cpu
        out[f"{name}_min_ms"] = 1e3 * best
    return out


def run_jaxrl(args: dict) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxrl  # noqa: F401
    from jaxrl.algorithms.ppo import train as ppo_train
    from jaxrl.algorithms.ppo.config import PPOConfig
    from jaxrl.training.driver import agents_update

    seeds = int(args.get("seeds", 64))
    iters = int(args.get("iters", 20))
    config = PPOConfig(env="CartPole-v1")
    algo = ppo_train.make(config)
    keys = jax.random.split(jax.random.key(0), seeds)
    hparams = jax.tree.map(lambda *xs: jnp.stack(xs), *[algo.hyperparams() for _ in range(seeds)])
    state = jax.jit(jax.vmap(algo.init))(keys, hparams)
    update = agents_update(algo, seeds)  # what the driver runs (unbatched for one seed)
    rollout = jax.vmap(lambda s: algo._rollout(s)[:2])  # keep the transitions live
    return {
        "lib": "jaxrl",
        "seeds": seeds,
        "jax_version": jax.__version__,
        "variants": {"base": profile(update, rollout, state, iters)},
    }


def run_rejax(args: dict) -> dict:
    import jax
    from rejax_ppo import make_algo  # benchmarks/workers/rejax_ppo.py

    seeds = int(args.get("seeds", 64))
    iters = int(args.get("iters", 20))
    algo, _, _ = make_algo(499_712)
    state = jax.jit(jax.vmap(algo.init_state))(jax.random.split(jax.random.PRNGKey(0), seeds))
    update = jax.vmap(lambda ts: (algo.train_iteration(ts), None))
    rollout = jax.vmap(algo.collect_trajectories)
    return {
        "lib": "rejax",
        "seeds": seeds,
        "jax_version": jax.__version__,
        "variants": {"base": profile(update, rollout, state, iters)},
    }


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    args = json.loads(sys.argv[1])
    result = run_jaxrl(args) if args["lib"] == "jaxrl" else run_rejax(args)
    print(json.dumps(result), flush=True)
