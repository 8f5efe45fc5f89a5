"""sbx DQN / SAC worker for benchmarks/offpolicy_throughput.py (runs in benchmarks/.venvs/sbx).

    python sbx_offpolicy.py '{"task": "dqn", "seed": 0, "total_steps": 5000,
                             "config": {...}, "eval_episodes": 32}'

sbx-rl 0.28.0 is Stable-Baselines3's API on JAX: jitted networks and gradient
steps, with SB3's host-side numpy replay buffer and Python environment loop.
The run is workers/sb3_offpolicy.py's (`train_and_evaluate`: same config mapping,
one gymnasium environment, one seed per process, greedy / deterministic
evaluation) with sbx's classes. Prints ONE JSON line.

Compilation: sbx jits its functions on first use, inside `learn`. With
`warmup_steps` (the benchmark passes `learning_starts` + 100), a throwaway model
first learns that many steps, so the jitted update and policy are compiled
(JAX's cache is per function and input shapes) before the timed `learn`; that
warm-up is reported as `compile_seconds`.

What sbx cannot be configured to do differently: DQN's loss is Huber and its
targets vanilla (no Double-Q); DQN gets global-norm clipping only through the
optimiser (`optimizer_class`, as here); the MLP has equal hidden sizes
(`net_arch[0]` units per layer); SAC's critics and actor are not clipped.

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def clipped_adam(max_norm: float):
    """An `optimizer_class` for sbx: global-norm clipping, then Adam (SB3's DQN optimiser)."""
    import optax

    def make(learning_rate: float) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(max_norm), optax.adam(learning_rate))

    return make


def main(args: dict[str, Any]) -> dict[str, Any]:
    import flax.linen as nn
    import jax
    import sbx
    from sb3_offpolicy import train_and_evaluate

    c = args["config"]
    if c["activation"] != "relu":
        raise ValueError("this worker maps activation 'relu' only")
    if len(set(c["hidden_sizes"])) != 1 or len(c["hidden_sizes"]) != 2:
        raise ValueError("sbx's MLPs have two hidden layers of equal size")
    extra: dict[str, Any] = {}
    if args["task"] == "dqn" and c["max_grad_norm"]:
        extra["policy_kwargs"] = {"optimizer_class": clipped_adam(c["max_grad_norm"])}
    result = train_and_evaluate(args, {"dqn": sbx.DQN, "sac": sbx.SAC}, nn.relu, extra)
    return {
        "library": "sbx",
        "version": getattr(sbx, "__version__", None),
        "jax_version": jax.__version__,
        **result,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
