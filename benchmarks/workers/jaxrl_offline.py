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
"""

from __future__ import annotations

import json
import sys
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


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
