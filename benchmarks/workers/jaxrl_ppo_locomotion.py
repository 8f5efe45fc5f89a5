"""jaxrl PPO worker for benchmarks/locomotion_side_by_side.py (the project venv, with the
`playground` extra).

    python jaxrl_ppo_locomotion.py '{"env": "playground:CheetahRun", "seed": 0, ...}'

Trains `jaxrl.train("ppo", env=..., num_seeds=1, seed=...)` with the environment's
preset (jaxrl/algorithms/ppo/config.py), then runs `eval_episodes` fresh episodes of the
final policy, deterministic (the Gaussian's mean, squashed), the protocol of the Brax
worker's last evaluation. Steps/s and compile seconds are the driver's own summary
(`steps_per_second` excludes compilation); `return_curve` is the training episodes'
return per logged chunk (the driver's headline metric), `final_return` the evaluation's
mean. One seed per process, as Brax's trainer runs (it has no seed axis).

Prints ONE JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    args = json.loads(sys.argv[1])
    import jax
    import numpy as np

    import jaxrl
    from jaxrl.evaluation import evaluate

    overrides = args.get("overrides", {})
    start = time.perf_counter()
    result = jaxrl.train(
        "ppo", env=args["env"], num_seeds=1, seed=args["seed"], progress=False, **overrides
    )
    wall = time.perf_counter() - start
    config = jaxrl.make_config("ppo", args["env"], **overrides)
    returns = evaluate(
        result.algorithm,
        result.state,
        jax.random.PRNGKey(args["seed"] + 10_000),
        num_episodes=args["eval_episodes"],
        deterministic=True,
    )
    steps_per_update = config.num_envs * config.num_steps
    curve = result.returns()[:, 0]
    steps = [int(np.ravel(row["env_steps"])[0]) for row in result.metrics]
    summary = result.summary
    print(
        json.dumps(
            {
                "library": "jaxrl",
                "seed": args["seed"],
                "env_steps": config.num_updates * steps_per_update,
                "steps_per_second": summary["steps_per_second"],
                "compile_seconds": summary.get("compile_seconds"),
                "wall_seconds": wall,
                "final_return": float(np.mean(returns)),
                "final_return_episodes": np.asarray(returns).ravel().round(3).tolist(),
                # None when no training episode ended in the last 10% of updates.
                "train_final_return": summary["final_return_mean"],
                "return_curve": [
                    [s, None if np.isnan(r) else round(float(r), 3)]
                    for s, r in zip(steps, curve, strict=True)
                ],
                "jax": jax.__version__,
                "load_average": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
