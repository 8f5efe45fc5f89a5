"""Stable-Baselines3 PPO worker for benchmarks/ppo_throughput.py (runs in benchmarks/.venvs/sb3).

    python sb3_ppo.py '{"seed": 0, "total_steps": 50000, "eval_episodes": 128}'

Trains SB3's PPO (torch, CPU) with PureJaxRL's CartPole config mapped to SB3
names, then prints ONE JSON line on stdout:

    {"library": "sb3", "seeds": 1, "steps_per_second": ..., "train_seconds": ...,
     "compile_seconds": 0.0, "eval_return_mean": ..., "train_return_mean": ..., ...}

Timing covers `model.learn` only (model construction and evaluation excluded).
Returns: `eval_return_mean` is the mean undiscounted return of
`eval_episodes` fresh episodes with the final *stochastic* policy
(`evaluate_policy(deterministic=False)`), the same protocol as rejax's built-in
evaluation; `train_return_mean` is SB3's own `rollout/ep_rew_mean`, the mean
of the last 100 training episodes (Monitor wrapper).
`cpu_*` fields are process CPU seconds over the same region.
Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import sys
import time


def main(args: dict) -> dict:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    seed = int(args.get("seed", 0))
    total_steps = int(args["total_steps"])
    # One intra-op thread by default: the networks are tiny (64-64 MLP, batch
    # <= 128), and on a shared 2-core machine torch's second thread mostly
    # waits at barriers (seen here: 22 steps/s with 2 threads under load).
    torch.set_num_threads(int(args.get("torch_threads", 1)))
    lr = 2.5e-4
    env = make_vec_env("CartPole-v1", n_envs=4, seed=seed, vec_env_cls=DummyVecEnv)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=128,  # num_steps
        batch_size=128,  # minibatch size = 4 * 128 / num_minibatches(4)
        n_epochs=4,  # update_epochs
        learning_rate=lambda progress_remaining: lr * progress_remaining,  # anneal_lr
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        clip_range_vf=0.2,  # PureJaxRL / jaxrl clip the value loss with clip_eps
        normalize_advantage=True,  # per minibatch, as PureJaxRL
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs=dict(
            net_arch=dict(pi=[64, 64], vf=[64, 64]),  # separate actor and critic MLPs
            activation_fn=torch.nn.Tanh,
            ortho_init=True,  # SB3 default: orthogonal, gains sqrt(2) / 0.01 / 1
        ),
        device="cpu",
        seed=seed,
        verbose=0,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=total_steps, progress_bar=False)
    train_seconds, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    steps_done = int(model.num_timesteps)
    train_returns = [ep["r"] for ep in model.ep_info_buffer]
    eval_env = gym.make("CartPole-v1")
    eval_returns, _ = evaluate_policy(
        model,
        eval_env,
        n_eval_episodes=int(args.get("eval_episodes", 128)),
        deterministic=False,
        return_episode_rewards=True,
    )
    return {
        "library": "sb3",
        "version": stable_baselines3.__version__,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "seeds": 1,
        "total_steps": total_steps,
        "steps_done": steps_done,
        "train_seconds": train_seconds,
        "steps_per_second": steps_done / train_seconds,
        "compile_seconds": 0.0,
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": steps_done / train_cpu,
        "cpu_compile_seconds": 0.0,
        "eval_return_mean": float(np.mean(eval_returns)),
        "eval_return_per_seed": [float(np.mean(eval_returns))],
        "train_return_mean": float(np.mean(train_returns)) if train_returns else None,
    }


if __name__ == "__main__":
    # argv: [config JSON] [results file]; the results file, when given, gets the result
    # with its command, date and host load, so a figure quoted from it has a source.
    result = main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"total_steps": 50_000})
    print(json.dumps(result), flush=True)
    if len(sys.argv) > 2:
        record = {
            "command": shlex.join(["python", "benchmarks/workers/sb3_ppo.py", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": os.getloadavg(),
            "result": result,
        }
        pathlib.Path(sys.argv[2]).write_text(json.dumps(record, indent=2) + "\n")
