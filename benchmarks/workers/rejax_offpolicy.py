"""rejax DQN / SAC worker for benchmarks/offpolicy_throughput.py (runs in benchmarks/.venvs/rejax).

    python rejax_offpolicy.py '{"task": "dqn", "seeds": 16, "total_steps": 50000,
                               "config": {...}, "eval_episodes": 32}'

Configures rejax 0.1.3's DQN or SAC with the benchmark's matched config
(library-neutral names, mapped in `make_algo`), compiles and times its
training, then prints ONE JSON line.

What is timed, as for PPO (workers/rejax_ppo.py): `init_state` +
`fori_loop(total_steps // num_envs, train_iteration)` -- rejax's `train` minus its
evaluations -- `jax.vmap`ped over seed keys for seeds > 1, compiled with
`jax.jit(fn).lower(keys).compile()` (compile time), then run once and
synchronised (training time). One `train_iteration` steps `num_envs`
environments once, adds the transitions, then (once `global_step > fill_buffer`)
runs `num_epochs` gradient steps, then updates the target network when
`global_step` crosses a multiple of `target_update_freq` (Polyak with weight
`polyak` on the old target: `polyak = 1 - tau`).

How rejax differs from the config, by design (nothing to configure):
* time limits are terminal (gymnax 0.0.9's `step` returns one `done`);
* gradient clipping is per element (`optax.clip(max_grad_norm)`), not by global norm;
* DQN: the squared-error loss (`optax.l2_loss`), no Huber; the network is always
  64-64 (`create_agent` fixes `hidden_layer_sizes`);
* SAC: no uniformly random actions before `fill_buffer` (it acts with the initial
  actor), log-std clipped to [-10, 2], one learning rate for actor, critics and
  temperature, whose loss is `-alpha * (log_prob + target_entropy)`;
* the replay sample is `jax.random.choice(replace=False, p=...)` over the whole
  capacity: its cost grows with `buffer_size`, not with the batch.

Final return: rejax's `evaluate` (fresh episodes, `lax.while_loop` to the end of
each) with the greedy (DQN) or deterministic (SAC: squashed mean) policy, as for
every library in this benchmark; untimed.

`mode` "profile": the same per-phase times as workers/jaxrl_offpolicy.py (acting,
environment, replay add, replay sample, one gradient step, the whole
`train_iteration`), each `inner` iterations in one `lax.scan`.

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import time_calls  # noqa: E402


def make_algo(task: str, c: dict[str, Any], total_steps: int):
    """rejax's algorithm for `task` with the neutral config `c` (see the module docstring)."""
    if c["num_envs"] != 1 or c["train_frequency"] != 1:
        raise ValueError(
            "rejax trains after every step of its num_envs environments: the benchmark "
            "config must have num_envs=1 and train_frequency=1"
        )
    common = dict(
        env=c["env"],
        num_envs=1,
        buffer_size=c["buffer_size"],
        fill_buffer=c["learning_starts"],
        batch_size=c["batch_size"],
        learning_rate=c["lr"],
        gamma=c["gamma"],
        num_epochs=c["gradient_steps"],
        total_timesteps=total_steps,
        eval_freq=total_steps,
        skip_initial_evaluation=True,
        target_update_freq=c["target_update_interval"],
        polyak=1.0 - c["tau"],
    )
    if task == "dqn":
        from rejax import DQN

        if list(c["hidden_sizes"]) != [64, 64]:
            raise ValueError("rejax 0.1.3's DQN network is always 64-64")
        return DQN.create(
            **common,
            agent="QNetwork",
            agent_kwargs={"activation": c["activation"]},
            max_grad_norm=c["max_grad_norm"] or float("inf"),
            eps_start=c["eps_start"],
            eps_end=c["eps_end"],
            exploration_fraction=c["eps_fraction"],
            ddqn=c["double_q"],
        )
    if task == "sac":
        from rejax import SAC

        if not c["autotune"] or c["init_alpha"] != 1.0 or c["target_entropy"] is not None:
            raise ValueError("rejax's SAC tunes alpha from 1.0 towards -action_dim")
        if c["policy_frequency"] != 1:
            raise ValueError("rejax's SAC updates the actor at every gradient step")
        return SAC.create(
            **common,
            agent_kwargs={"activation": c["activation"]},
            hidden_layer_sizes=tuple(c["hidden_sizes"]),
        )
    raise ValueError(f"unknown task {task!r}")


def greedy_act(task: str, algo, ts):
    """The evaluation policy `act(obs, rng)`: argmax Q (DQN) or the squashed mean (SAC)."""
    import jax.numpy as jnp

    if task == "dqn":

        def act(obs, rng):
            q = algo.agent.apply(ts.q_ts.params, obs[None])
            return jnp.argmax(q, axis=-1)[0]

        return act

    def mean_action(module, obs):
        mean = module._action_dist(obs).mean()
        return module.action_loc + jnp.tanh(mean) * module.action_scale

    def act(obs, rng):
        return algo.actor.apply(ts.actor_ts.params, obs[None], method=mean_action)[0]

    return act


def run_training(args: dict[str, Any]) -> dict[str, Any]:
    import jax
    import numpy as np
    from rejax.evaluate import evaluate

    task, seeds = args["task"], int(args.get("seeds", 1))
    total = int(args["total_steps"])
    algo = make_algo(task, args["config"], total)

    def one_seed(key):
        ts = algo.init_state(key)
        return jax.lax.fori_loop(
            0, total // algo.num_envs, lambda _, t: algo.train_iteration(t), ts
        )

    base = jax.random.PRNGKey(int(args.get("seed", 0)))
    fn, keys = (
        (one_seed, base) if seeds == 1 else (jax.vmap(one_seed), jax.random.split(base, seeds))
    )
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = jax.jit(fn).lower(keys).compile()
    compile_seconds, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    ts = jax.block_until_ready(compiled(keys))
    train_seconds, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    n_eval = int(args.get("eval_episodes", 32))

    def eval_one(ts, key):
        max_steps = algo.env_params.max_steps_in_episode
        _, returns = evaluate(
            greedy_act(task, algo, ts), key, algo.env, algo.env_params, n_eval, max_steps
        )
        return returns.mean()

    eval_key = jax.random.PRNGKey(12345)
    if seeds == 1:
        per_seed = np.asarray([jax.jit(eval_one)(ts, eval_key)])
    else:
        per_seed = np.asarray(jax.jit(jax.vmap(eval_one))(ts, jax.random.split(eval_key, seeds)))
    return {
        "task": task,
        "library": "rejax",
        "version": _dist_version("rejax"),
        "jax_version": jax.__version__,
        "seeds": seeds,
        "total_steps": total,
        "train_seconds": train_seconds,
        "steps_per_second": total * seeds / train_seconds,
        "compile_seconds": compile_seconds,
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": total * seeds / train_cpu,
        "cpu_compile_seconds": compile_cpu,
        "eval_return_mean": float(per_seed.mean()),
        "eval_return_per_seed": [float(x) for x in per_seed],
        "train_return_mean": None,  # rejax does not track training episodes
    }


def profile(args: dict[str, Any]) -> dict[str, Any]:
    """Per-phase times in microseconds (see workers/jaxrl_offpolicy.py `profile`)."""
    import jax
    import jax.numpy as jnp

    task, seeds = args["task"], int(args.get("seeds", 1))
    inner, iters = int(args.get("inner", 200)), int(args.get("iters", 10))
    c = args["config"]
    algo = make_algo(task, c, int(args["total_steps"]))

    def fresh(key):
        ts = algo.init_state(key)
        warm = c["learning_starts"] + 1  # past fill_buffer: the update learns
        return jax.lax.fori_loop(0, warm, lambda _, t: algo.train_iteration(t), ts)

    state = jax.jit(jax.vmap(fresh))(jax.random.split(jax.random.PRNGKey(0), seeds))
    scan_keys = jax.random.split(jax.random.PRNGKey(1), inner)

    def policy(ts, obs, key):
        if task == "dqn":
            eps = algo.epsilon_schedule(ts.global_step)
            return algo.agent.apply(ts.q_ts.params, obs, key, epsilon=eps, method="act")
        return algo.actor.apply(ts.actor_ts.params, obs, key, method="act")

    def act(ts):
        def body(carry, key):
            obs, acc = carry
            total = jnp.sum(policy(ts, obs, key).astype(jnp.float32))
            return (obs + 1e-6 * total, acc + total), None

        return jax.lax.scan(body, (ts.last_obs, jnp.float32(0)), scan_keys)[0]

    action = jax.vmap(algo.action_space.sample)(jax.random.split(jax.random.PRNGKey(2), 1))

    def env(ts):
        def body(carry, key):
            env_state, acc = carry
            out = algo.vmap_step(key[None], env_state, action, algo.env_params)
            return (out[1], acc + out[2].sum()), None

        return jax.lax.scan(body, (ts.env_state, jnp.float32(0)), scan_keys)[0]

    def transitions(ts):
        from rejax.buffers import Minibatch

        zeros = jnp.zeros((1,), jnp.float32)
        return Minibatch(ts.last_obs, action, zeros, jnp.zeros((1,), bool), ts.last_obs)

    def replay_add(ts):
        batch = transitions(ts)
        body = lambda buf, _: (buf.extend(batch), None)  # noqa: E731
        return jax.lax.scan(body, ts.replay_buffer, None, length=inner)[0]

    def replay_sample(ts):
        def body(acc, key):
            mb = ts.replay_buffer.sample(algo.batch_size, key)
            return acc + sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(mb)), None

        return jax.lax.scan(body, jnp.float32(0), scan_keys)[0]

    def learn(ts):
        mb = ts.replay_buffer.sample(algo.batch_size, jax.random.PRNGKey(3))
        body = lambda t, _: (algo.update(t, mb), None)  # noqa: E731
        return jax.lax.scan(body, ts, None, length=inner)[0]

    def update(ts):
        body = lambda t, _: (algo.train_iteration(t), None)  # noqa: E731
        return jax.lax.scan(body, ts, None, length=inner)[0]

    phases = {"act": act, "env": env, "replay_add": replay_add, "replay_sample": replay_sample}
    phases.update(learn=learn, update=update)
    single = seeds == 1
    arg = jax.tree.map(lambda x: x[0], state) if single else state
    out: dict[str, Any] = {}
    for name, fn in phases.items():
        compiled = jax.jit(fn if single else jax.vmap(fn)).lower(arg).compile()
        t = time_calls(lambda: jax.block_until_ready(compiled(arg)), iters)  # noqa: B023
        out[name] = {k: 1e6 * v / inner for k, v in t.items()}
    return {
        "task": task,
        "library": "rejax",
        "seeds": seeds,
        "inner": inner,
        "steps_per_update": 1,
        "gradient_steps": c["gradient_steps"],
        "jax_version": jax.__version__,
        "phases_us": out,
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(args: dict[str, Any]) -> dict[str, Any]:
    mode = args.get("mode", "train")
    if mode == "train":
        return run_training(args)
    if mode == "profile":
        return profile(args)
    raise ValueError(f"unknown mode {mode!r}: must be 'train' or 'profile'")


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
