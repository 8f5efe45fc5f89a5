"""d3rlpy IQL / TD3+BC / CQL worker for benchmarks/offline_throughput.py (runs in
benchmarks/.venvs/d3rlpy: d3rlpy 2.8.1, torch CPU).

    python d3rlpy_offline.py '{"algorithm": "iql", "dataset": "/path/data.npz",
                              "config": {...}, "steps": 2000, "warmup": 50, "seed": 0}'

Loads the benchmark's dataset (jaxrl's .npz: the same arrays jaxrl trains on) into
d3rlpy's `MDPDataset` (episodes end at `terminations` or `truncations`, d3rlpy's
terminals and timeouts), builds the algorithm from the benchmark's matched config
(`algorithm_config`: d3rlpy's names for it), takes `warmup` gradient steps, then times
`steps` more, each as d3rlpy's own `fit` loop takes one (`QLearningAlgoBase.fit`:
`dataset.sample_transition_batch(batch_size)`, then `algo.update(batch)`), without
fit's logging and evaluation. Prints ONE JSON line: gradient steps per second (wall and
process CPU), and the share of the time spent sampling.

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np


def load_dataset(path: str) -> tuple[Any, dict[str, np.ndarray]]:
    """d3rlpy's MDPDataset of the benchmark's .npz file, and the raw arrays."""
    from d3rlpy.dataset import MDPDataset

    with np.load(path, allow_pickle=False) as f:
        arrays = {name: f[name] for name in f.files if name != "metadata"}
    dataset = MDPDataset(
        observations=arrays["observations"].astype(np.float32),
        actions=arrays["actions"].astype(np.float32),
        rewards=arrays["rewards"].astype(np.float32),
        terminals=arrays["terminations"].astype(np.float32),
        timeouts=arrays["truncations"].astype(np.float32),
    )
    return dataset, arrays


def algorithm_config(name: str, c: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
    """d3rlpy's config of algorithm `name` for the neutral config `c`. Actions are scaled
    from the environment's bounds `c["action_low"]`/`c["action_high"]` into [-1, 1] (what
    jaxrl does once to the whole dataset); with `c["normalize_obs"]`, observations by the
    dataset's mean and std + 1e-3 (d3rlpy's StandardObservationScaler, eps 1e-3, as
    jaxrl's)."""
    import d3rlpy
    from d3rlpy.models.encoders import VectorEncoderFactory
    from d3rlpy.preprocessing import MinMaxActionScaler, StandardObservationScaler

    encoder = VectorEncoderFactory(hidden_units=list(c["hidden_sizes"]), activation=c["activation"])
    common: dict[str, Any] = dict(
        batch_size=c["batch_size"],
        gamma=c["gamma"],
        tau=c["tau"],
        n_critics=c["num_critics"],
        actor_learning_rate=c["actor_lr"],
        critic_learning_rate=c["critic_lr"],
        actor_encoder_factory=encoder,
        critic_encoder_factory=encoder,
        action_scaler=MinMaxActionScaler(
            minimum=np.asarray(c["action_low"], np.float32),
            maximum=np.asarray(c["action_high"], np.float32),
        ),
    )
    if c.get("normalize_obs"):
        obs = arrays["observations"].astype(np.float64)
        common["observation_scaler"] = StandardObservationScaler(
            mean=obs.mean(axis=0), std=obs.std(axis=0), eps=1e-3
        )
    if name == "iql":
        return d3rlpy.algos.IQLConfig(
            **common,
            value_encoder_factory=encoder,
            expectile=c["expectile"],
            weight_temp=c["temperature"],
            max_weight=c["max_weight"],
        )
    if name == "td3-bc":
        return d3rlpy.algos.TD3PlusBCConfig(
            **common,
            alpha=c["alpha"],
            target_smoothing_sigma=c["policy_noise"],
            target_smoothing_clip=c["noise_clip"],
            update_actor_interval=c["policy_delay"],
        )
    if name == "cql":
        # A fixed conservative weight (jaxrl's cql_alpha): d3rlpy's Lagrange multiplier
        # off (alpha_learning_rate 0) at 1, times conservative_weight.
        return d3rlpy.algos.CQLConfig(
            **common,
            temp_learning_rate=c["alpha_lr"],
            initial_temperature=c["alpha"],
            alpha_learning_rate=0.0,
            initial_alpha=1.0,
            conservative_weight=c["cql_alpha"],
            n_action_samples=c["num_sampled_actions"],
        )
    raise ValueError(f"unknown algorithm {name!r}: must be iql, td3-bc or cql")


def main(args: dict[str, Any]) -> dict[str, Any]:
    import d3rlpy
    import torch

    d3rlpy.seed(int(args.get("seed", 0)))
    dataset, arrays = load_dataset(args["dataset"])
    config = algorithm_config(args["algorithm"], args["config"], arrays)
    algo = config.create(device="cpu:0")
    algo.build_with_dataset(dataset)
    batch_size = args["config"]["batch_size"]

    def step() -> float:
        t0 = time.perf_counter()
        batch = dataset.sample_transition_batch(batch_size)
        sampled = time.perf_counter() - t0
        algo.update(batch)
        return sampled

    for _ in range(int(args.get("warmup", 50))):
        step()
    steps = int(args["steps"])
    t0, c0 = time.perf_counter(), time.process_time()
    sample_seconds = sum(step() for _ in range(steps))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "library": "d3rlpy",
        "algorithm": args["algorithm"],
        "seeds": 1,
        "total_steps": steps,
        "train_seconds": wall,
        "steps_per_second": steps / wall,
        "cpu_steps_per_second": steps / cpu if cpu else None,
        "sample_fraction": sample_seconds / wall,
        "compile_seconds": 0.0,
        "d3rlpy_version": d3rlpy.__version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
