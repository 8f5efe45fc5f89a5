"""jaxrl PPO worker for benchmarks/ppo_throughput.py (runs in the project venv).

    python jaxrl_ppo.py '{"seeds": 64, "total_steps": 500000, "eval_episodes": 128}'

Trains with `jaxrl.train("ppo", env="CartPole-v1", ...)` and PureJaxRL's
CartPole hyperparameters, then prints ONE JSON line on stdout. Throughput and
compile time are the driver's own `summary` numbers (`steps_per_second`
excludes compilation; the run is the real product path: chunks of updates
scanned in one jitted call, host sync between chunks); compile time includes
the compilation of `init`, as rejax's does. The driver also records process
CPU time (`train_cpu_seconds`), giving `cpu_steps_per_second` (steps per
CPU-second of the training chunks, all threads), which is far less sensitive
than wall time to other processes on a shared machine.

`"variant": "matched"` (the benchmark's matched-work row, library name
`jaxrl-matched`) adds `MATCHED_WORK`: the config options that make one jaxrl
update do what one rejax update does (see `benchmarks/workers/rejax_ppo.py`):
time limits treated as terminal (rejax's gymnax 0.0.9 `step` returns one `done`,
so it never bootstraps truncations; jaxrl then skips its critic pass over final
observations), per-element gradient clipping (rejax's `optax.clip`; jaxrl's
default is the global norm), and no diagnostics (rejax computes no approx-KL,
clip fraction or loss breakdown). What remains different is how each library
computes the same thing, which is what the row measures. One small difference
in work is left: jaxrl tracks training episode returns (a few adds per step),
rejax does not.

Returns: `eval_return_mean` is the mean over seeds of the mean undiscounted
return of `eval_episodes` fresh episodes with the final *stochastic* policy
(the protocol of rejax's built-in evaluation); `train_return_mean` is the
driver's `final_return_mean` (training episodes that ended in the last 10%
of updates).
"""

from __future__ import annotations

import json
import sys

HPARAMS = dict(
    num_envs=4,
    num_steps=128,
    update_epochs=4,
    num_minibatches=4,
    lr=2.5e-4,
    anneal_lr=True,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    clip_value=True,
    vf_clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
    normalize_obs=False,
    normalize_reward=False,
    hidden_sizes=(64, 64),
    activation="tanh",
)

# What rejax's PPO does per update, as jaxrl config options (the matched-work row).
MATCHED_WORK = dict(bootstrap_truncation=False, grad_clip="per_element", diagnostics=False)
VARIANTS = {"default": ("jaxrl", {}), "matched": ("jaxrl-matched", MATCHED_WORK)}


def evaluate_stochastic(algo, state, key, num_episodes: int):
    """Per-agent mean return of `num_episodes` fresh episodes, policy sampled (not greedy)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    env, env_params = algo.env, algo.env_params
    max_steps = int(env_params.max_steps_in_episode)
    step_fn = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def one_agent(agent_state, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, num_episodes), env_params
        )
        total = jnp.zeros((num_episodes,), jnp.float32)
        finished = jnp.zeros((num_episodes,), bool)

        def step(carry, key):
            obs, env_state, total, finished = carry
            k_act, k_env = jax.random.split(key)
            action, _ = algo.act(agent_state, obs, None, finished, k_act, deterministic=False)
            obs, env_state, reward, term, trunc, _ = step_fn(
                jax.random.split(k_env, num_episodes), env_state, action, env_params
            )
            total = total + jnp.where(finished, 0.0, reward)
            return (obs, env_state, total, finished | term | trunc), None

        (_, _, total, _), _ = jax.lax.scan(
            step, (obs, env_state, total, finished), jax.random.split(k_run, max_steps)
        )
        return total.mean()

    num_agents = jax.tree.leaves(state.params)[0].shape[0]
    return np.asarray(jax.jit(jax.vmap(one_agent))(state, jax.random.split(key, num_agents)))


def main(args: dict) -> dict:
    import jax

    import jaxrl

    seeds = int(args.get("seeds", 1))
    variant = args.get("variant", "default")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: must be one of {sorted(VARIANTS)}")
    library, extra = VARIANTS[variant]
    result = jaxrl.train(
        "ppo",
        env="CartPole-v1",
        num_seeds=seeds,
        total_steps=int(args["total_steps"]),
        progress=False,
        seed=int(args.get("seed", 0)),
        log_every=args.get("log_every"),
        **HPARAMS,
        **extra,
    )
    s = result.summary
    compile_cpu, train_cpu = s["compile_cpu_seconds"], s["train_cpu_seconds"]
    steps = s["env_steps_per_agent"] * s["num_agents"]
    per_seed = evaluate_stochastic(
        result.algorithm, result.state, jax.random.key(12345), int(args.get("eval_episodes", 128))
    )
    return {
        "library": library,
        "variant": variant,
        "jax_version": jax.__version__,
        "seeds": seeds,
        "total_steps": s["env_steps_per_agent"],
        "num_updates": s["env_steps_per_agent"] // (HPARAMS["num_envs"] * HPARAMS["num_steps"]),
        "train_seconds": s["train_seconds"],
        "steps_per_second": s["steps_per_second"],
        "compile_seconds": s["compile_seconds"],
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": steps / train_cpu if train_cpu else None,
        "cpu_compile_seconds": compile_cpu,
        "eval_return_mean": float(per_seed.mean()),
        "eval_return_per_seed": [float(x) for x in per_seed],
        "train_return_mean": s["final_return_mean"],
    }


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"total_steps": 500_000})
    print(json.dumps(result), flush=True)
