"""Brax's own PPO trainer on a MuJoCo Playground task, for benchmarks/locomotion_side_by_side.py.

    python brax_ppo_playground.py '{"env": "CheetahRun", "seed": 0, "total_steps": 491520, ...}'

Runs `brax.training.agents.ppo.train` the way Playground's training notebooks do: the
task from `mujoco_playground.registry.load` (MJX in JAX, `impl="jax"`, as jaxrl's
adapter), wrapped by Playground's `wrap_for_brax_training` (its episode limit and
auto-reset from the copy's first state), Playground's PPO hyperparameters for the DM
Control Suite (`dm_control_suite_params.brax_ppo_config`) with the fields the
benchmark sizes for this CPU replaced (`ppo` in the arguments), and the networks
`make_ppo_networks` builds with the given hidden sizes and activation. One stand-in: jax
0.10 removed `jax.device_put_replicated`, which Brax 0.14.2's trainer still calls; the
worker puts back the replacement JAX's migration guide gives (`_restore_device_put_replicated`).

Brax runs `num_evals - 1` training epochs with an evaluation after each (and one before
the first). Its own `training/sps` per epoch counts the epoch's wall time, compilation
included in the first; steps/s here is the environment steps of every epoch after the
first over their training seconds (evaluation excluded, as in Brax), and
`compile_seconds` the first epoch's excess over that rate. `return_curve` holds Brax's
evaluation return after each epoch (`eval/episode_reward`, the policy `deterministic`
as `deterministic_eval`), and `final_return` the last one.

Prints ONE JSON line on stdout.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time


def _restore_device_put_replicated() -> None:
    """Brax 0.14.2's trainer calls `jax.device_put_replicated`, which jax 0.10 removed
    (accessing it raises). This is the replacement JAX's pmap migration guide gives:
    every leaf stacked once per device along a new leading axis, that axis sharded over
    the devices (one device here: a leading axis of 1, which Brax's `pmap` maps over)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def device_put_replicated(x, devices):  # noqa: ANN001, ANN202 (jax's old signature)
        sharding = NamedSharding(Mesh(np.array(devices), ("devices",)), PartitionSpec("devices"))
        stack = lambda leaf: jax.device_put(jnp.stack([leaf] * len(devices)), sharding)  # noqa: E731
        return jax.tree.map(stack, x)

    jax.device_put_replicated = device_put_replicated


def main() -> None:
    args = json.loads(sys.argv[1])
    import jax

    _restore_device_put_replicated()
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo
    from mujoco_playground import registry, wrapper
    from mujoco_playground.config import dm_control_suite_params

    env_name = args["env"]
    env = registry.load(env_name, config_overrides={"impl": "jax"})
    hyper = dm_control_suite_params.brax_ppo_config(env_name).to_dict()
    hyper.pop("network_factory", None)
    hyper.update(args["ppo"])
    hyper["num_timesteps"] = args["total_steps"]
    activation = {"silu": jax.nn.silu, "swish": jax.nn.silu, "tanh": jax.nn.tanh}[
        args["activation"]
    ]
    network_factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=tuple(args["hidden_sizes"]),
        value_hidden_layer_sizes=tuple(args["hidden_sizes"]),
        activation=activation,
    )

    evaluations: list[tuple[int, float, float]] = []

    def progress(step: int, metrics: dict) -> None:
        evaluations.append(
            (
                int(step),
                float(metrics.get("eval/episode_reward", float("nan"))),
                float(metrics.get("training/walltime", 0.0)),
            )
        )

    start = time.perf_counter()
    ppo.train(
        environment=env,
        wrap_env_fn=wrapper.wrap_for_brax_training,
        network_factory=network_factory,
        seed=args["seed"],
        progress_fn=progress,
        num_eval_envs=args["eval_episodes"],
        deterministic_eval=True,
        **hyper,
    )
    wall = time.perf_counter() - start
    if evaluations[-1][0] != args["total_steps"]:
        raise SystemExit(
            f"Brax ran {evaluations[-1][0]} steps, not {args['total_steps']}: the budget does "
            "not split into its evaluation intervals (benchmarks/locomotion_side_by_side.py's "
            "brax_num_evals)"
        )
    # evaluations[0] is before training (step 0, walltime 0); [1] after the first epoch.
    first_steps, first_walltime = evaluations[1][0], evaluations[1][2]
    last_steps, last_walltime = evaluations[-1][0], evaluations[-1][2]
    steps_per_second = (last_steps - first_steps) / (last_walltime - first_walltime)
    compile_seconds = first_walltime - first_steps / steps_per_second
    print(
        json.dumps(
            {
                "library": "brax",
                "seed": args["seed"],
                "env_steps": last_steps,
                "steps_per_second": steps_per_second,
                "compile_seconds": compile_seconds,
                "train_seconds": last_walltime,
                "wall_seconds": wall,
                "final_return": evaluations[-1][1],
                "return_curve": [[s, round(r, 3)] for s, r, _ in evaluations],
                "hyperparameters": {k: v for k, v in hyper.items() if k != "num_timesteps"},
                "jax": jax.__version__,
                "load_average": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
