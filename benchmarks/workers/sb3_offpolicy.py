"""Stable-Baselines3 DQN / SAC worker for benchmarks/offpolicy_throughput.py
(runs in benchmarks/.venvs/sb3; workers/sbx_offpolicy.py reuses it for sbx).

    python sb3_offpolicy.py '{"task": "sac", "seed": 0, "total_steps": 5000,
                             "config": {...}, "eval_episodes": 32}'

Trains SB3's DQN or SAC (torch, CPU, one intra-op thread as in workers/sb3_ppo.py)
with the benchmark's matched config mapped to SB3's names (`model_kwargs`) on
gymnasium's CartPole-v1 / Pendulum-v1 (one environment, a DummyVecEnv), then
prints ONE JSON line. One seed per process: SB3 has no seed vectorisation.

Timing covers `model.learn` only (construction and evaluation excluded). SB3's
replay buffer bootstraps through time limits (`handle_timeout_termination`, the
true final observation from the VecEnv), like jaxrl's default. What SB3 cannot be
configured to do differently: DQN's loss is Huber (smooth L1) and its targets
are vanilla (no Double-Q); SAC's temperature loss is
`-log_alpha * (log_prob + target_entropy)`; actor and critic gradients are not
clipped.

Returns: `eval_return_mean` is the mean return of `eval_episodes` fresh episodes
with the final greedy / deterministic policy (`evaluate_policy(deterministic=True)`),
the protocol of every library in this benchmark; `train_return_mean` is the mean
of the last 100 training episodes (Monitor wrapper).

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

# The gymnasium environment of each benchmark task.
ENVS = {"dqn": "CartPole-v1", "sac": "Pendulum-v1"}


def model_kwargs(task: str, c: dict[str, Any], activation: Any) -> dict[str, Any]:
    """SB3-API keyword arguments (SB3 and sbx share them) for the neutral config `c`."""
    if c["num_envs"] != 1 or c["n_step"] != 1 or c["prioritised"]:
        raise ValueError("the benchmark config must use 1 env, n_step 1 and uniform replay")
    kwargs = dict(
        learning_rate=c["lr"],
        buffer_size=c["buffer_size"],
        learning_starts=c["learning_starts"],
        batch_size=c["batch_size"],
        tau=c["tau"],
        gamma=c["gamma"],
        train_freq=c["train_frequency"],
        gradient_steps=c["gradient_steps"],
        policy_kwargs={"net_arch": list(c["hidden_sizes"]), "activation_fn": activation},
    )
    if task == "dqn":
        if c["loss"] != "huber" or c["double_q"] or c["dueling"]:
            raise ValueError("SB3's DQN is Huber loss, vanilla targets, no dueling head")
        return {
            **kwargs,
            "target_update_interval": c["target_update_interval"],
            "exploration_fraction": c["eps_fraction"],
            "exploration_initial_eps": c["eps_start"],
            "exploration_final_eps": c["eps_end"],
        }
    if task == "sac":
        _check_auto_entropy(c)
        return {**kwargs, "ent_coef": "auto", "target_entropy": "auto"}
    raise ValueError(f"unknown task {task!r}")


def _check_auto_entropy(c: dict[str, Any]) -> None:
    """SB3's `ent_coef="auto"`: alpha tuned from 1.0 towards -action_dim, every step."""
    if not c["autotune"] or c["init_alpha"] != 1.0 or c["target_entropy"] is not None:
        raise ValueError("SAC: the benchmark config must tune alpha from 1.0 to -action_dim")
    if c["policy_frequency"] != 1 or c["target_update_interval"] != 1:
        raise ValueError("SAC: SB3 updates actor and targets every gradient step")


def train_and_evaluate(
    args: dict[str, Any], algorithms: dict[str, type], activation: Any, extra: dict[str, Any]
) -> dict[str, Any]:
    """Builds `algorithms[task]` on one environment, times `learn`, evaluates; the
    library-independent part of the SB3 and sbx workers. `extra` adds keyword
    arguments (merged into `policy_kwargs` for that key)."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    task, seed = args["task"], int(args.get("seed", 0))
    total = int(args["total_steps"])
    kwargs = model_kwargs(task, args["config"], activation)
    kwargs["policy_kwargs"].update(extra.pop("policy_kwargs", {}))
    kwargs.update(extra)

    def build():
        env = make_vec_env(ENVS[task], n_envs=1, seed=seed, vec_env_cls=DummyVecEnv)
        return algorithms[task]("MlpPolicy", env, seed=seed, verbose=0, **kwargs)

    compile_seconds = compile_cpu = 0.0
    if args.get("warmup_steps"):  # JIT libraries: compile outside the timed run
        t0, c0 = time.perf_counter(), time.process_time()
        build().learn(total_timesteps=int(args["warmup_steps"]), progress_bar=False)
        compile_seconds, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    model = build()
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=total, progress_bar=False)
    train_seconds, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = int(model.num_timesteps)
    train_returns = [ep["r"] for ep in model.ep_info_buffer]
    eval_returns, _ = evaluate_policy(
        model,
        Monitor(gym.make(ENVS[task])),
        n_eval_episodes=int(args.get("eval_episodes", 32)),
        deterministic=True,
        return_episode_rewards=True,
    )
    return {
        "task": task,
        "seeds": 1,
        "total_steps": total,
        "steps_done": steps,
        "train_seconds": train_seconds,
        "steps_per_second": steps / train_seconds,
        "compile_seconds": compile_seconds,
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": steps / train_cpu,
        "cpu_compile_seconds": compile_cpu,
        "eval_return_mean": float(np.mean(eval_returns)),
        "eval_return_per_seed": [float(np.mean(eval_returns))],
        "train_return_mean": float(np.mean(train_returns)) if train_returns else None,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    import stable_baselines3
    import torch
    from stable_baselines3 import DQN, SAC

    # One intra-op thread: the networks are tiny (see workers/sb3_ppo.py).
    torch.set_num_threads(int(args.get("torch_threads", 1)))
    if args["config"]["activation"] != "relu":
        raise ValueError("this worker maps activation 'relu' only")
    extra: dict[str, Any] = {"device": "cpu"}
    if args["task"] == "dqn":
        extra["max_grad_norm"] = args["config"]["max_grad_norm"] or float("inf")
    result = train_and_evaluate(args, {"dqn": DQN, "sac": SAC}, torch.nn.ReLU, extra)
    return {
        "library": "sb3",
        "version": stable_baselines3.__version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        **result,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
