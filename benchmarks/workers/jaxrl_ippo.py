"""jaxrl's IPPO worker for benchmarks/marl_throughput.py (runs in the project venv).

    python jaxrl_ippo.py '{"seeds": 5, "total_steps": 2000000}'

IPPO (`jaxrl/algorithms/ippo/`, its defaults: JaxMARL's `ippo_ff_mpe.yaml`) on the
built-in SimpleSpread-MPE with JaxMARL's episodes (`max_steps_in_episode=26`, its done
check reads the step counter before incrementing it) and time limits as terminal
(`bootstrap_truncation=False`, as JaxMARL's baselines), the seeds vmapped by the
driver. What differs from JaxMARL's script: shared parameters get one-hot agent ids
in their inputs (jaxrl's parameter sharing), and jaxrl's episode statistics.

Throughput and compile time are the driver's own summary numbers (`steps_per_second`
excludes compilation: environment steps of all seeds per training second).
`final_return_per_seed` is the driver's `final_return_per_agent`: each agent's return,
averaged over agents and over the episodes that ended in the last 10% of updates.

Prints ONE JSON line on stdout.
"""

from __future__ import annotations

import json
import sys

# JaxMARL's simple_spread episodes and its baselines' treatment of their ends.
MATCHED = dict(bootstrap_truncation=False)
ENV_OVERRIDES = dict(max_steps_in_episode=26)


def main(args: dict) -> dict:
    import jax

    import jaxrl
    from jaxrl import algorithms, envs
    from jaxrl.training.driver import RunConfig, train

    seeds = int(args.get("seeds", 1))
    config = jaxrl.make_config(
        "ippo", "SimpleSpread-MPE", total_steps=int(args["total_steps"]), **MATCHED
    )
    env, env_params = envs.make("SimpleSpread-MPE", **ENV_OVERRIDES)
    algo = algorithms.get("ippo").algorithm(config, env, env_params)
    run = RunConfig(num_seeds=seeds, seed=int(args.get("seed", 0)), progress=False)
    s = train(algo, run).summary
    return {
        "library": "jaxrl",
        "jax_version": jax.__version__,
        "seeds": seeds,
        "total_steps": s["env_steps_per_agent"],
        "num_updates": s["env_steps_per_agent"] // config.batch_size,
        "compile_seconds": s["compile_seconds"],
        "train_seconds": s["train_seconds"],
        "steps_per_second": s["steps_per_second"],
        "final_return_per_seed": [float(x) for x in s["final_return_per_agent"]],
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
