"""Recurrent PPO's memory per environment on Craftax, from XLA's analysis of the update.

    python benchmarks/ppo_rnn_memory.py                       # Craftax-Classic-Symbolic preset
    python benchmarks/ppo_rnn_memory.py --num-envs 16 32 --num-steps 64

PPO's state and its update are built for the preset of `--env` (recurrent policy) at two
numbers of environments, from abstract shapes (`jax.eval_shape`: nothing is allocated),
and `jax.jit(update)` is compiled for each. Per environment, it reports:

* `carry_bytes`: the GRU state one environment carries between updates;
* `env_state_bytes`: the environment's own state (Craftax's map and inventory) and the
  other per-environment fields of PPO's state (`PPO.ENV_FIELDS`, carry excluded);
* `rollout_bytes`: one update's stored trajectory (`num_steps` transitions: observation,
  action, log-probability, value, reward, flags) from the rollout's abstract output;
* `update_temp_bytes`: the growth of XLA's temporary buffers of the compiled update per
  added environment (`memory_analysis().temp_size_in_bytes` at the two sizes, differenced):
  what an environment really costs while an update runs, the rollout, the GRU states the
  loss recomputes, activations and gradients included.

Writes JSON to `--out` (default `benchmarks/results/ppo_rnn_memory.json`); needs the
`craftax` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "ppo_rnn_memory.json"
DEFAULT_ENV = "craftax:Craftax-Classic-Symbolic-v1"


def tree_bytes(tree: Any) -> int:
    """Bytes of every array leaf of an (abstract) pytree."""
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def measure(env_id: str, num_envs: int, num_steps: int) -> dict[str, Any]:
    """Abstract state, rollout and compiled update of recurrent PPO at `num_envs`."""
    import jaxrl
    from jaxrl.algorithms import ppo

    config = jaxrl.make_config(
        "ppo", env_id, num_envs=num_envs, num_steps=num_steps, num_minibatches=1
    )
    if not config.recurrent:
        raise SystemExit(f"the PPO preset of {env_id} is not recurrent")
    algo = ppo.make(config)
    state = jax.eval_shape(lambda k: algo.init(k, algo.hyperparams()), jax.random.key(0))
    _, traj, _ = jax.eval_shape(algo._rollout, state)
    compiled = jax.jit(algo.update).lower(state).compile()
    memory = compiled.memory_analysis()
    env_fields = {
        name: tree_bytes(getattr(state, name)) for name in algo.ENV_FIELDS if name != "rnn_carry"
    }
    return {
        "num_envs": num_envs,
        "num_steps": num_steps,
        "rnn_hidden_size": config.rnn_hidden_size,
        "state_bytes": tree_bytes(state),
        "carry_bytes": tree_bytes(state.rnn_carry),
        "env_field_bytes": env_fields,
        "rollout_bytes": tree_bytes(traj),
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
    }


def per_env(small: dict[str, Any], large: dict[str, Any]) -> dict[str, float]:
    """Per-environment figures: the growth from the smaller to the larger run."""
    added = large["num_envs"] - small["num_envs"]

    def grow(key: str) -> float:
        return (large[key] - small[key]) / added

    env_state = sum(large["env_field_bytes"].values()) - sum(small["env_field_bytes"].values())
    return {
        "carry_bytes": grow("carry_bytes"),
        "env_state_bytes": env_state / added,
        "rollout_bytes": grow("rollout_bytes"),
        "update_temp_bytes": grow("temp_bytes"),
        "state_bytes": grow("state_bytes"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default=DEFAULT_ENV, help="an id with a recurrent PPO preset")
    parser.add_argument("--num-envs", nargs=2, type=int, default=[16, 32])
    parser.add_argument("--num-steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    args = parser.parse_args(argv)
    import jaxrl

    num_steps = args.num_steps or jaxrl.make_config("ppo", args.env).num_steps
    runs = [measure(args.env, n, num_steps) for n in sorted(args.num_envs)]
    result = {
        "meta": {
            "command": shlex.join(["python", "benchmarks/ppo_rnn_memory.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "env": args.env,
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "runs": runs,
        "per_env": per_env(*runs),
    }
    for key, value in result["per_env"].items():
        print(f"{key:>20}: {value / 1024:10.1f} KiB per environment")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
