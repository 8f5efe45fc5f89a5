"""jaxrl DQN / SAC worker for benchmarks/offpolicy_throughput.py (runs in the project venv).

    python jaxrl_offpolicy.py '{"task": "dqn", "seeds": 16, "total_steps": 50000,
                               "config": {...}, "eval_episodes": 32}'
    python jaxrl_offpolicy.py '{"task": "sac", "mode": "profile", "seeds": 1, "config": {...}}'

`config` is the benchmark's matched configuration of the task, in library-neutral
names (`DQN_CONFIG` / `SAC_CONFIG` in benchmarks/offpolicy_throughput.py);
`jaxrl_fields` maps it to jaxrl's config fields. Prints ONE JSON line.

Training (`mode` "train", the default) is the product path: `jaxrl.train("dqn" |
"sac", ...)` (or, while an algorithm is not yet in the registry, its module's
`make` and `jaxrl.training.driver.train`, which is what `jaxrl.train` calls).
Throughput and compile time are the driver's own summary numbers
(`steps_per_second` excludes compilation, which includes `init`'s, as rejax's
does); `cpu_steps_per_second` uses the process CPU time of the training chunks.

`"variant": "matched"` (library name `jaxrl-matched`) adds `MATCHED_WORK[task]`:
what makes one jaxrl step do rejax's work. rejax's gymnax 0.0.9 `step` returns a
single `done`, so rejax stores a time limit as a terminal state
(`bootstrap_truncation=False`; this also stops CartPole's and Pendulum's truncated
steps from being bootstrapped, and Pendulum only ever ends by its time limit);
its DQN regresses with the squared error (`loss="mse"`; `optax.l2_loss`). What
stays different: jaxrl clips DQN's gradients by their global norm, rejax per
element (`optax.clip`); jaxrl tracks training episode returns and computes the
loss and mean Q as metrics, rejax neither.

Returns: `eval_return_mean` is the mean over seeds of the mean undiscounted
return of `eval_episodes` fresh episodes with the final greedy (DQN) or
deterministic (SAC: the squashed mean action) policy
(`jaxrl.evaluation.evaluate_episodes`); `train_return_mean` is the driver's
`final_return_mean` (training episodes that ended in the last 10% of updates).

`mode` "profile" times each phase of one update separately (acting, environment
step, replay add, replay sample with the n-step gather, one gradient step) and
the whole update, each as `inner` iterations of a `lax.scan` in one jitted
program (so per-call dispatch is not counted), vmapped over seeds for seeds > 1
as the driver does; see `profile`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import time_calls  # noqa: E402

# The algorithm and environment of each benchmark task.
TASKS = {"dqn": ("dqn", "CartPole-v1"), "sac": ("sac", "Pendulum-v1")}

# What rejax does per step, as jaxrl config options (the matched-work row; see above).
MATCHED_WORK: dict[str, dict[str, Any]] = {
    "dqn": {"bootstrap_truncation": False, "loss": "mse"},
    "sac": {"bootstrap_truncation": False},
}
VARIANTS = ("default", "matched")

# Library-neutral names of the benchmark config -> jaxrl's field names, where they differ
# (a name mapped to a tuple sets each of those fields).
_RENAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "dqn": {},
    "sac": {"lr": ("actor_lr", "critic_lr", "alpha_lr"), "init_alpha": ("alpha",)},
}
# Neutral fields that are not config fields (they hold for every library by construction).
_NOT_FIELDS = {"env"}


def jaxrl_fields(task: str, config: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """The jaxrl config overrides for the neutral `config` of `task`, given the
    algorithm's config `fields`; a `ValueError` names any neutral key it cannot set."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in _NOT_FIELDS:
            continue
        targets = _RENAMES[task].get(key, (key,))
        missing = [f for f in targets if f not in fields]
        if missing:
            raise ValueError(f"jaxrl's {task} config has no field {missing} (benchmark {key!r})")
        for name in targets:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def _module(task: str):
    return importlib.import_module(f"jaxrl.algorithms.{TASKS[task][0]}")


def overrides(task: str, config: dict[str, Any], variant: str, total_steps: int):
    """All jaxrl config overrides of a run: the benchmark config, the variant, the budget."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: must be one of {VARIANTS}")
    fields = {f.name for f in dataclasses.fields(_module(task).Config)}
    extra = MATCHED_WORK[task] if variant == "matched" else {}
    return {**jaxrl_fields(task, config, fields), **extra, "total_steps": total_steps}


def make_algorithm(task: str, hparams: dict[str, Any]):
    """The algorithm object for `task` with `hparams` over the environment's preset."""
    from jaxrl import config as cfg

    name, env = TASKS[task]
    module = _module(task)
    return module.make(cfg.replace(module.default_config(env), **hparams).validate())


def train(task: str, hparams: dict[str, Any], run: dict[str, Any]):
    """`jaxrl.train(...)` when the algorithm is registered, else the same via the driver."""
    import jaxrl
    from jaxrl import algorithms
    from jaxrl.training import driver

    name, env = TASKS[task]
    if name in algorithms.names():
        return jaxrl.train(name, env=env, **run, **hparams)
    return driver.train(make_algorithm(task, hparams), driver.RunConfig(**run))


def run_training(args: dict[str, Any]) -> dict[str, Any]:
    import jax

    from jaxrl import config as cfg
    from jaxrl.evaluation import evaluate_episodes

    task, seeds = args["task"], int(args.get("seeds", 1))
    variant = args.get("variant", "default")
    hparams = overrides(task, args["config"], variant, int(args["total_steps"]))
    run = {
        "num_seeds": seeds,
        "seed": int(args.get("seed", 0)),
        "progress": False,
        "log_every": args.get("log_every"),
        "agent_execution": args.get("agent_execution", "vmap"),
    }
    result = train(task, hparams, run)
    s = result.summary
    train_cpu = s["train_cpu_seconds"]
    steps = s["env_steps_per_agent"] * s["num_agents"]
    returns = evaluate_episodes(
        result.algorithm, result.state, jax.random.key(12345), int(args.get("eval_episodes", 32))
    )["returns"]
    per_seed = returns.mean(axis=1)
    return {
        "task": task,
        "library": args.get("label") or ("jaxrl-matched" if variant == "matched" else "jaxrl"),
        "variant": variant,
        "jax_version": jax.__version__,
        "seeds": seeds,
        "agent_execution": run["agent_execution"],
        "devices": s["num_devices"],
        "total_steps": s["env_steps_per_agent"],
        "train_seconds": s["train_seconds"],
        "steps_per_second": s["steps_per_second"],
        "compile_seconds": s["compile_seconds"],
        "cpu_train_seconds": train_cpu,
        "cpu_steps_per_second": steps / train_cpu if train_cpu else None,
        "cpu_compile_seconds": s["compile_cpu_seconds"],
        "eval_return_mean": float(per_seed.mean()),
        "eval_return_per_seed": [float(x) for x in per_seed],
        "train_return_mean": s.get("final_return_mean"),
        "resolved_config": cfg.to_dict(result.algorithm.config),
    }


# ----------------------------------------------------------------------------- profile
def profile(args: dict[str, Any]) -> dict[str, Any]:
    """Per-phase times of one update on the benchmark config, in microseconds.

    The state is first trained for `learning_starts` environment steps (a filled,
    realistic buffer; learning on). Each phase then runs `inner` times in a
    `lax.scan` inside one jitted program, its output carried into the next
    iteration so nothing is hoisted or dropped, and the program is timed `iters`
    times (medians; `_min` the fastest). Phases, per update of
    `num_envs * train_frequency` environment steps:

    * `act`: the exploration policy on `num_envs` observations (`explore`);
    * `env`: one step of `num_envs` environments (`acting.step_envs`, auto-reset);
    * `replay_add`: writing one row of `num_envs` transitions;
    * `replay_sample`: drawing `batch_size` slots and gathering the n-step batch;
    * `learn`: one gradient step (`learn_step`: losses, Adam, target update);
    * `update`: the whole fused update, as the driver runs it.

    With `"floor": true` (one seed), also the update's matmul floor: every matrix
    product of one update timed in a loop of its own, times its count
    (`benchmarks/matmul_floor.py`, `method="loop"`): what the update cannot go below
    with XLA's kernels for these shapes.
    """
    import jax
    import jax.numpy as jnp

    from jaxrl import acting
    from jaxrl.replay import buffer, nstep
    from jaxrl.replay.nstep import Transition

    task, seeds = args["task"], int(args.get("seeds", 1))
    inner, iters = int(args.get("inner", 200)), int(args.get("iters", 10))
    variant = args.get("variant", "default")
    algo = make_algorithm(task, overrides(task, args["config"], variant, int(args["total_steps"])))
    c = algo.config

    def fresh(key):
        state = algo.init(key, algo.hyperparams())
        warm = -(-c.learning_starts // algo.steps_per_update)  # updates until learning starts
        return jax.lax.fori_loop(0, warm, lambda _, s: algo.update(s)[0], state)

    keys = jax.random.split(jax.random.key(0), seeds)
    state = jax.jit(jax.vmap(fresh))(keys)
    scan_keys = jax.random.split(jax.random.key(1), inner)

    def act(s):
        def body(carry, key):
            obs, acc = carry
            a = algo.explore(s.params, s.learner, s.hparams, obs, key, s.update_step)
            total = jnp.sum(a.astype(jnp.float32))
            return (obs + 1e-6 * total, acc + total), None  # the next call depends on this one

        return jax.lax.scan(body, (s.obs, jnp.float32(0)), scan_keys)[0]

    example_action = algo._random_actions(jax.random.key(2), c.num_envs)

    def env(s):
        def body(carry, key):
            env_state, acc = carry
            out = acting.step_envs(
                algo.env, algo.env_params, key, env_state, algo.to_env_action(example_action)
            )
            return (out[1], acc + out[2].sum()), None

        return jax.lax.scan(body, (s.env_state, jnp.float32(0)), scan_keys)[0]

    transition = Transition(
        observation=state.obs[0],
        action=example_action,
        reward=jnp.zeros((c.num_envs,), jnp.float32),
        terminated=jnp.zeros((c.num_envs,), bool),
        truncated=jnp.zeros((c.num_envs,), bool),
        next_observation=state.obs[0],
    )

    def replay_add(s):
        body = lambda replay, _: (buffer.add(replay, transition), None)  # noqa: E731
        return jax.lax.scan(body, s.replay, None, length=inner)[0]

    def sample_batch(s, key):
        drawn = buffer.sample(s.replay, key, c.batch_size)
        return nstep.nstep_batch(s.replay, drawn.indices, c.n_step, s.hparams.gamma)

    def replay_sample(s):
        def body(acc, key):
            b = sample_batch(s, key)
            return acc + sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(b)), None

        return jax.lax.scan(body, jnp.float32(0), scan_keys)[0]

    def learn(s):
        batch = sample_batch(s, jax.random.key(3))
        weights = jnp.ones((c.batch_size,), jnp.float32)

        def body(carry, key):
            params, learner, step = carry
            params, learner, _, _ = algo.learn_step(
                params, learner, batch, weights, s.hparams, key, step
            )
            return (params, learner, step + 1), None

        return jax.lax.scan(body, (s.params, s.learner, s.grad_steps), scan_keys)[0]

    def update(s):
        return jax.lax.scan(lambda st, _: (algo.update(st)[0], None), s, None, length=inner)[0]

    phases = {"act": act, "env": env, "replay_add": replay_add, "replay_sample": replay_sample}
    phases.update(learn=learn, update=update)
    single = seeds == 1
    arg = jax.tree.map(lambda x: x[0], state) if single else state
    out: dict[str, Any] = {}
    for name, fn in phases.items():
        compiled = jax.jit(fn if single else jax.vmap(fn)).lower(arg).compile()
        t = time_calls(lambda: jax.block_until_ready(compiled(arg)), iters)  # noqa: B023
        out[name] = {k: 1e6 * v / inner for k, v in t.items()}
    floor = None
    if args.get("floor") and single:
        from matmul_floor import matmul_floor  # benchmarks/ is on the path (above)

        floor = matmul_floor(jax.make_jaxpr(algo.update)(arg), top=40, method="loop")
        floor["us"] = 1e6 * floor.pop("seconds")
    return {
        "task": task,
        "library": "jaxrl-matched" if variant == "matched" else "jaxrl",
        "matmul_floor": floor,
        "seeds": seeds,
        "inner": inner,
        "steps_per_update": algo.steps_per_update,
        "gradient_steps": c.gradient_steps,
        "jax_version": jax.__version__,
        "phases_us": out,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    mode = args.get("mode", "train")
    if mode == "train":
        return run_training(args)
    if mode == "profile":
        return profile(args)
    raise ValueError(f"unknown mode {mode!r}: must be 'train' or 'profile'")


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
