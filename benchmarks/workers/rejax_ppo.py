"""rejax PPO worker for benchmarks/ppo_throughput.py (runs in benchmarks/.venvs/rejax).

    python rejax_ppo.py '{"seeds": 64, "total_steps": 499712, "eval_episodes": 128}'

Configures rejax's PPO with PureJaxRL's CartPole hyperparameters, compiles
and times its training, then prints ONE JSON line on stdout.

What is timed. rejax's `PPO.train(rng)` is `init_state` followed by
`ceil(total_timesteps / eval_freq)` blocks of `fori_loop(train_iteration)`,
each followed by an evaluation of 128 episodes. With
`eval_freq = total_timesteps` and `skip_initial_evaluation=True` that is one
block and one evaluation at the end. The evaluation is not training, so the
timed function (`mode="train_only"`, the default) is exactly that block
without the evaluation: `init_state` + `fori_loop(num_updates,
train_iteration)`, `jax.vmap`ped over seed keys when seeds > 1 (as rejax's
README vmaps `algo.train`). It is compiled first with
`jax.jit(fn).lower(keys).compile()` (timed as compile), then run once on the
same keys and synchronised with `block_until_ready` (timed as training).
The final return is then measured, untimed, by rejax's own evaluation
(`algo.eval_callback`: 128 episodes with the stochastic policy, the same
call `train` makes at the end). `mode="train"` times rejax's full
`algo.train` instead (its one end-of-training evaluation included) to
quantify that overhead.

`cpu_*` fields are process CPU seconds (all threads) over the same regions.

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import sys
import time


def make_algo(total_steps: int, anneal_lr: bool = True):
    import optax
    from rejax import PPO

    num_envs, num_steps, num_epochs, num_minibatches = 4, 128, 4, 4
    num_updates = total_steps // (num_envs * num_steps)
    total_steps = num_updates * num_envs * num_steps
    lr = 2.5e-4
    if anneal_lr:
        # rejax has no anneal_lr flag; its `learning_rate` goes straight into
        # optax.adam, which accepts a schedule. Adam counts one step per
        # minibatch, so this is PureJaxRL's linear annealing to 0.
        lr = optax.linear_schedule(lr, 0.0, num_updates * num_epochs * num_minibatches)
    algo = PPO.create(
        env="CartPole-v1",  # gymnax CartPole-v1
        num_envs=num_envs,
        num_steps=num_steps,
        num_epochs=num_epochs,
        num_minibatches=num_minibatches,
        learning_rate=lr,
        gamma=0.99,
        gae_lambda=0.95,
        clip_eps=0.2,  # also rejax's value-clipping range
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,  # NB: rejax applies optax.clip (per element), not global-norm
        normalize_observations=False,
        normalize_rewards=False,
        total_timesteps=total_steps,
        eval_freq=total_steps,  # one evaluation, at the very end
        skip_initial_evaluation=True,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
    )
    return algo, num_updates, total_steps


def main(args: dict) -> dict:
    import jax
    import numpy as np
    import rejax

    seeds = int(args.get("seeds", 1))
    mode = args.get("mode", "train_only")
    algo, num_updates, total_steps = make_algo(
        int(args["total_steps"]), args.get("anneal_lr", True)
    )

    if mode == "train_only":

        def one_seed(key):
            ts = algo.init_state(key)
            return jax.lax.fori_loop(0, num_updates, lambda _, ts: algo.train_iteration(ts), ts)
    elif mode == "train":

        def one_seed(key):
            return algo.train(key)[0]
    else:
        raise ValueError(f"unknown mode {mode!r}")

    base = jax.random.PRNGKey(int(args.get("seed", 0)))
    if seeds == 1:
        fn, keys = one_seed, base
    else:
        fn, keys = jax.vmap(one_seed), jax.random.split(base, seeds)

    t0, c0 = time.perf_counter(), time.process_time()
    compiled = jax.jit(fn).lower(keys).compile()
    compile_seconds, compile_cpu = time.perf_counter() - t0, time.process_time() - c0

    t0, c0 = time.perf_counter(), time.process_time()
    ts = jax.block_until_ready(compiled(keys))
    train_seconds, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    # Final return: rejax's own end-of-training evaluation (untimed).
    n_eval = int(args.get("eval_episodes", 128))
    from rejax.evaluate import evaluate

    def eval_one(ts, key):
        max_steps = algo.env_params.max_steps_in_episode
        _, returns = evaluate(algo.make_act(ts), key, algo.env, algo.env_params, n_eval, max_steps)
        return returns.mean()

    eval_key = jax.random.PRNGKey(12345)
    if seeds == 1:
        per_seed = np.asarray([jax.jit(eval_one)(ts, eval_key)])
    else:
        per_seed = np.asarray(jax.jit(jax.vmap(eval_one))(ts, jax.random.split(eval_key, seeds)))

    return {
        "library": "rejax",
        "version": getattr(rejax, "__version__", None) or _dist_version("rejax"),
        "jax_version": jax.__version__,
        "mode": mode,
        "seeds": seeds,
        "total_steps": total_steps,
        "num_updates": num_updates,
        "train_seconds": train_seconds,
        "steps_per_second": total_steps * seeds / train_seconds,
        "compile_seconds": compile_seconds,
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": total_steps * seeds / train_cpu,
        "cpu_compile_seconds": compile_cpu,
        "eval_return_mean": float(per_seed.mean()),
        "eval_return_per_seed": [float(x) for x in per_seed],
        "train_return_mean": None,  # rejax does not track training episodes
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"total_steps": 499_712})
    print(json.dumps(result), flush=True)
