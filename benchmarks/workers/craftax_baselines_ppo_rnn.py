"""The Craftax baselines' `ppo_rnn.py` (Matthews et al. 2024), for
benchmarks/craftax_side_by_side.py (runs in the venv `benchmarks/.venvs/craftax_baselines`,
`BASELINES_REQUIREMENTS` there, with the same jax as ours).

    python craftax_baselines_ppo_rnn.py '{"source": DIR, "total_steps": N, "seeds": S, ...}'

`source` is a directory holding the baselines' repository files (`ppo_rnn.py`,
`wrappers.py`, `logz/`, `models/`), extracted from a snapshot of their repository by the
side-by-side script. Their `make_train(config)` is imported from there and run as their
`run_ppo` runs it, `jax.vmap` over `S` keys split from `PRNGKey(seed)` (their
`num_repeats`), with their command line's defaults except: `ENV_NAME`, `NUM_ENVS`,
`TOTAL_TIMESTEPS` and `SEED` from the arguments, `ACTIVATION` "relu" (their network uses
ReLU whatever it says), no wandb and no debug callback. Their own timing includes the
compilation (`run_ppo` prints it); here the program is compiled first
(`jit(...).lower(keys).compile()`, timed apart) and then timed alone. Prints ONE JSON line:
environment steps per second over all seeds, compile and train seconds, and each seed's
final return: the mean over the last 10% of updates of their per-update metric
`returned_episode_returns` (the mean return of the episodes that ended in that update;
updates where none ended are skipped).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time


def baselines_config(args: dict) -> dict:
    """Their `run_ppo`'s config dict: their command line's defaults, except the budget,
    environment, width and seeds of `args`, ReLU, and no wandb or debug callback."""
    return {
        "ENV_NAME": args["env_name"],
        "NUM_ENVS": args["num_envs"],
        "TOTAL_TIMESTEPS": args["total_steps"],
        "LR": 2e-4,
        "NUM_STEPS": 64,
        "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 8,
        "GAMMA": 0.99,
        "GAE_LAMBDA": 0.8,
        "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01,
        "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 1.0,
        "ACTIVATION": "relu",
        "ANNEAL_LR": True,
        "DEBUG": False,
        "JIT": True,
        "SEED": args["seed"],
        "USE_WANDB": False,
        "SAVE_POLICY": False,
        "NUM_REPEATS": args["seeds"],
        "LAYER_SIZE": 512,
        "USE_OPTIMISTIC_RESETS": args.get("optimistic_resets", True),
        "OPTIMISTIC_RESET_RATIO": args.get("reset_ratio", 16),
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    sys.path.insert(0, args["source"])
    import jax
    import numpy as np
    import ppo_rnn  # the baselines' module, from `source`

    config = baselines_config(args)
    train = jax.jit(jax.vmap(ppo_rnn.make_train(config)))
    keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_REPEATS"])
    cpu0, start = time.process_time(), time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_seconds = time.perf_counter() - start
    cpu1, start = time.process_time(), time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    train_seconds = time.perf_counter() - start
    cpu_train = time.process_time() - cpu1
    per_update = np.asarray(out["metric"]["returned_episode_returns"], np.float64)  # (S, U)
    num_updates = per_update.shape[1]
    window = per_update[:, num_updates - max(1, math.ceil(0.1 * num_updates)) :]
    final = [float(np.nanmean(row)) if np.isfinite(row).any() else None for row in window]
    steps = config["NUM_REPEATS"] * num_updates * config["NUM_STEPS"] * config["NUM_ENVS"]
    print(
        json.dumps(
            {
                "library": "craftax_baselines",
                "env_steps": steps,
                "steps_per_second": steps / train_seconds,
                "cpu_steps_per_second": steps / cpu_train,
                "compile_seconds": compile_seconds,
                "cpu_compile_seconds": cpu1 - cpu0,
                "train_seconds": train_seconds,
                "num_updates": num_updates,
                "final_return_per_seed": final,
                "return_curve": [
                    [None if math.isnan(v) else round(float(v), 4) for v in row]
                    for row in per_update
                ],
                "config": config,
                "jax": jax.__version__,
                "load_average": os.getloadavg(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
