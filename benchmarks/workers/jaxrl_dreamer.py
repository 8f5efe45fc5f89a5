"""jaxrl Dreamer worker for benchmarks/dreamer_throughput.py (runs in the project venv).

    python jaxrl_dreamer.py '{"backbone": "ssm", "batch_length": 256, "iters": 5}'
    python jaxrl_dreamer.py '{"backbone": "transformer", "batch_length": 1024, "window": 1024}'
    python jaxrl_dreamer.py '{"workload": "matched", "iters": 5}'

Builds `jaxrl.algorithms.dreamer` for one backbone and sequence length, fills its
replay buffer (the updates before `learning_starts`, which only act), and prints ONE
JSON line with:

* `train_step`: one gradient step, `Dreamer._train_step` (sample a batch, the world
  model's step, imagination, the actor's and the critic's steps), jitted alone,
  compiled ahead of time (compile time reported apart), then `iters` calls on the same
  state, each blocked on (`block_until_ready`): median and minimum seconds, and
  process CPU seconds.
  A step whose compiled program needs more than `memory_limit_gb` (12) of temporaries
  (XLA's memory analysis) is not run; the line says so.
* `update`: the fused `update` (`train_every` steps of `num_envs` environments into
  replay, then the learning phase) timed the same way; `env_steps_per_second` =
  `num_envs * train_every / median seconds` (`"update": false` skips it).
* `train_step_in_loop`: the same gradient step the way training runs it, `loop_length`
  steps inside one `lax.scan` (the driver scans over updates and the learning phase
  over gradient steps), timed once after compiling, per step. Default 8 for the
  matched workload (the driver's chunks are longer: about 1/50 of a run's updates, 62
  for 100k environment steps at this train ratio), 2 otherwise; 0 skips it. On XLA's
  CPU backend a plain convolution's gradient is many times slower inside a loop.
* `minor_faults_per_step` (alone and in the loop): the process's minor page faults per
  gradient step. XLA's CPU runtime allocates a program's temporaries at every call
  and glibc returns such large blocks to the kernel when they are freed, so each call
  touches fresh pages: at the matched shapes ~720k faults (2.9 GB of temporaries) per
  call alone, which a scan pays once for all its steps.
* `train_step_flops`: XLA's cost analysis of the compiled gradient step, which
  counts a loop body once, scaled by the ratio of the loop-weighted to the
  once-counted matmul and convolution FLOPs of its jaxpr (`jaxrl.plan.matmul_cost`,
  as `jaxrl plan` and benchmarks/workers/jaxrl_grpo.py do); `gflop_per_s` divides it
  by the median step time.
* with `"train_updates": N`, instead of the above: N updates after learning starts
  trained by jaxrl's driver (`driver.train`, chunks of `DRIVER_CHUNK` = 8 updates),
  seconds per update of each chunk with acting and environment steps, as a user's run
  does them.
* `train_step_matmul_floor` (the matched workload, or `"floor": true`): every matrix
  product of the gradient step timed alone on this machine, times its trip count
  (`benchmarks/matmul_floor.py`): what the step cannot go below with XLA's kernels for
  these shapes.

Workloads:

* `"length"` (default): CartPole-v1 (vector observations) at the `xs` model size,
  batch `batch_size` (16) x `batch_length`; `window` sets the transformer's
  attention window (default: the config's 16; the length itself = full causal
  attention). The train ratio stays DreamerV3's 32 replayed steps per environment
  step with one gradient step per update: `train_every = batch_size * batch_length /
  (32 * num_envs)` with 4 environments (8, 32 and 128 steps at lengths 64, 256, 1024).
* `"minatar"`: Breakout-MinAtar (10x10x4 frames) at its preset (`xs`, batch 16 x 64,
  `image_net="minatar"`); `conv` "fast" (`patch_conv`, the default) or "xla".
* `"matched"`: the official DreamerV3's smallest preset's shapes (`matched_config`):
  64x64x3 frames (`NoiseFrames`, random pixels in [0, 1], 4 actions), batch 16 x 64,
  the `1m` model size, `image_net="dreamerv3"` with depth 4, the GRU (RSSM), and
  imagination from all 1,024 replayed steps as the official code does; float32.
  `conv` picks the convolution forms ("fast": `jaxrl.nn.conv`'s defaults, "xla": the
  plain convolutions the official code runs).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import minor_faults, time_calls  # noqa: E402

NUM_ENVS = 4
# Updates per chunk of the driver runs (`train_updates`).
DRIVER_CHUNK = 8
TRAIN_RATIO = 32


def length_config(
    backbone: str, batch_length: int, window: int | None, batch_size: int = 16
) -> dict[str, Any]:
    """DreamerConfig fields of the length sweep (CartPole, xs, DreamerV3's train ratio,
    one gradient step per update)."""
    replayed = batch_size * batch_length
    if replayed % (TRAIN_RATIO * NUM_ENVS):
        raise ValueError(f"batch_size * batch_length must be a multiple of {TRAIN_RATIO * 4}")
    fields: dict[str, Any] = {
        "env": "CartPole-v1",
        "backbone": backbone,
        "model_size": "xs",
        "batch_size": batch_size,
        "batch_length": batch_length,
        "num_envs": NUM_ENVS,
        "train_every": replayed // (TRAIN_RATIO * NUM_ENVS),
        "train_ratio": float(TRAIN_RATIO),
        "buffer_size": 4 * NUM_ENVS * batch_length,
        "learning_starts": NUM_ENVS * batch_length,
    }
    if window is not None:
        fields["transformer_window"] = window
    return fields


def matched_config() -> dict[str, Any]:
    """DreamerConfig fields at the official smallest preset's shapes (dreamer 3.3.1's
    configs.yaml `defaults` + `size1m`: batch 16 x 64, 5x5 conv stack of depth 4, 32
    latents of 4 classes, 64 units; imagination of 15 steps from every replayed step)."""
    return {
        "backbone": "gru",
        "model_size": "1m",
        "image_net": "dreamerv3",
        "conv_depth": 4,
        "batch_size": 16,
        "batch_length": 64,
        "imagination_starts": 16 * 64,
        "num_envs": NUM_ENVS,
        "train_every": 16 * 64 // (TRAIN_RATIO * NUM_ENVS),
        "train_ratio": float(TRAIN_RATIO),
        "buffer_size": 4 * NUM_ENVS * 64,
        "learning_starts": NUM_ENVS * 64,
    }


def noise_frames_env():
    """A 64x64x3 image environment with 4 actions whose frames are uniform noise in
    [0, 1] and whose episodes end with probability 1/100 per step: shapes and dtypes of
    an image task at the cost of a few random numbers (the benchmark times learning)."""
    import jax
    import jax.numpy as jnp
    from flax import struct

    from jaxrl import envs

    @struct.dataclass
    class State(envs.EnvState):
        """Only the step counter (`time`) of the base state: the frames are noise."""

    class NoiseFrames(envs.Environment):
        def reset_env(self, key, params):
            return jax.random.uniform(key, (64, 64, 3)), State(time=jnp.int32(0))

        def step_env(self, key, state, action, params):
            k_obs, k_end, k_rew = jax.random.split(key, 3)
            obs = jax.random.uniform(k_obs, (64, 64, 3))
            reward = jax.random.normal(k_rew, ())
            terminated = jax.random.uniform(k_end, ()) < 0.01
            return obs, State(time=state.time + 1), reward, terminated, {}

        def observation_space(self, params):
            return envs.spaces.Box(0.0, 1.0, (64, 64, 3), jnp.float32)

        def action_space(self, params):
            return envs.spaces.Discrete(4)

    env = NoiseFrames()
    return env, env.default_params


def build(args: dict[str, Any]):
    """The Dreamer algorithm object of a worker job."""
    from jaxrl import config as cfg
    from jaxrl.algorithms import dreamer
    from jaxrl.algorithms.dreamer import networks

    if args.get("workload", "length") == "matched":
        config = cfg.replace(dreamer.DreamerConfig(), **matched_config())
        env, env_params = noise_frames_env()
        algo = dreamer.make(config, env, env_params)
        c = algo.config
        if args.get("conv", "fast") == "xla":
            algo.world_model.encoder = networks.ConvEncoder(c.conv_depth, impl="xla")
            algo.world_model.decoder = networks.ConvDecoder(c.conv_depth, algo.obs_shape, "xla")
        return algo
    if args.get("workload") == "minatar":
        algo = dreamer.make(dreamer.default_config("Breakout-MinAtar"))
        if args.get("conv", "fast") == "xla":
            c, wm = algo.config, algo.world_model
            wm.encoder = networks.Encoder(
                c.sizes["units"], c.sizes["layers"], True, c.conv_depth, "xla"
            )
        return algo
    fields = length_config(
        args["backbone"],
        int(args["batch_length"]),
        args.get("window"),
        int(args.get("batch_size", 16)),
    )
    return dreamer.make(cfg.replace(dreamer.DreamerConfig(), **fields))


def _xla_flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else None
    return None if not analysis else float(analysis.get("flops", 0.0)) or None


def _temp_bytes(compiled) -> int | None:
    """XLA's estimate of a compiled program's temporary memory (None if unavailable)."""
    try:
        return int(compiled.memory_analysis().temp_size_in_bytes)
    except (AttributeError, TypeError):
        return None


def train_with_driver(args: dict[str, Any]) -> dict[str, Any]:
    """`train_updates` updates after learning starts, run by jaxrl's driver
    (`driver.train`, chunks of `DRIVER_CHUNK` updates): seconds per update of each
    chunk, acting and environment steps included. What a user's run does, end to end."""
    from jaxrl import config as cfg
    from jaxrl.algorithms import dreamer
    from jaxrl.training import driver

    probe = build(args)  # the workload's config, for its learning_starts
    c, per_update = probe.config, probe.steps_per_update
    steps = c.learning_starts + per_update * int(args["train_updates"])
    algo = dreamer.make(cfg.replace(c, total_steps=steps), probe.env, probe.env_params)
    run = driver.RunConfig(
        log_every=per_update * DRIVER_CHUNK, progress=False, checkpoint_minutes=None
    )
    result = driver.train(algo, run)
    rows = [
        {"update": row["update"], "seconds_per_update": per_update / row["steps_per_second"]}
        for row in result.metrics
    ]
    # chunks whose every update learns (learning starts after learning_starts steps)
    learning = [
        r["seconds_per_update"]
        for r in rows
        if (r["update"] - DRIVER_CHUNK) * per_update >= c.learning_starts
    ]
    return {
        "library": "jaxrl",
        "workload": args.get("workload", "length"),
        "mode": "driver",
        "steps_per_update": per_update,
        "chunks": rows,
        "seconds_per_update_after_learning_starts": learning,
        "summary": {k: v for k, v in result.summary.items() if "seconds" in k},
        "load_average_at_end": os.getloadavg()[0],
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    import jax

    if args.get("train_updates"):
        return train_with_driver(args)

    from jaxrl.plan import matmul_cost

    iters = int(args.get("iters", 5))
    algo = build(args)
    c = algo.config
    compile_seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    state = jax.jit(algo.init)(jax.random.key(int(args.get("seed", 0))), algo.hyperparams())
    fill_updates = -(-c.learning_starts // algo.steps_per_update)

    def fill(s):
        """The acting of the updates before learning starts (compiles no learning)."""
        s, _ = jax.lax.scan(algo._env_step, s, None, length=fill_updates * c.train_every)
        return s.replace(update_step=s.update_step + fill_updates)

    state = jax.block_until_ready(jax.jit(fill)(state))
    compile_seconds["init_and_fill"] = time.perf_counter() - t0

    key = jax.random.key(1)
    t0 = time.perf_counter()
    step = jax.jit(algo._train_step).lower(state, key).compile()
    compile_seconds["train_step"] = time.perf_counter() - t0
    temp_bytes = _temp_bytes(step)
    limit = float(args.get("memory_limit_gb", 12.0)) * 1e9
    if temp_bytes is not None and temp_bytes > limit:
        # e.g. full attention at L = 1024 keeps every step's KV cache for imagination
        return {
            "library": "jaxrl",
            "backbone": c.backbone,
            "batch_length": c.batch_length,
            "error": f"not run: the gradient step needs {temp_bytes / 1e9:.1f} GB of "
            f"temporaries (limit {limit / 1e9:.0f} GB, memory_limit_gb)",
            "temp_bytes": temp_bytes,
            "compile_seconds": compile_seconds,
        }
    faults = minor_faults()
    step_times = time_calls(lambda: jax.block_until_ready(step(state, key)), iters)
    faults_alone = (minor_faults() - faults) / (iters + 1)  # time_calls warms up once

    jaxpr = jax.make_jaxpr(algo._train_step)(state, key)
    looped, once = matmul_cost(jaxpr, loops=True), matmul_cost(jaxpr, loops=False)
    xla = _xla_flops(step)
    scale = looped.flops / once.flops if once.flops else 1.0
    flops = None if xla is None else xla * scale

    default_loop = 8 if args.get("workload") == "matched" else 2
    loop_length = int(args.get("loop_length", default_loop))
    in_loop_seconds = faults_in_loop = None
    if loop_length > 0:
        keys = jax.random.split(key, loop_length)
        t0 = time.perf_counter()
        looped_step = (
            jax.jit(lambda s, ks: jax.lax.scan(algo._train_step, s, ks)[0])
            .lower(state, keys)
            .compile()
        )
        compile_seconds["train_step_in_loop"] = time.perf_counter() - t0
        faults = minor_faults()
        loop_times = time_calls(lambda: jax.block_until_ready(looped_step(state, keys)), 1)
        faults_in_loop = (minor_faults() - faults) / (2 * loop_length)
        in_loop_seconds = loop_times["wall"] / loop_length

    update_times = {"wall": None, "wall_min": None}
    if args.get("update", True):
        t0 = time.perf_counter()
        update = jax.jit(algo.update).lower(state).compile()
        compile_seconds["update"] = time.perf_counter() - t0
        update_times = time_calls(lambda: jax.block_until_ready(update(state)), iters)

    floor = None
    if args.get("floor", args.get("workload") == "matched"):
        # Every product of the step timed alone x its trip count (benchmarks/matmul_floor.py).
        # Last: after compiling and running its ~100 small programs, the step in its scan
        # ran 19% slower in the same process (1.87 against 1.57 s, quiet, 2026-11-27).
        from matmul_floor import matmul_floor

        floor = matmul_floor(jaxpr)

    params = state.params
    count = lambda tree: int(sum(math.prod(x.shape) for x in jax.tree.leaves(tree)))  # noqa: E731
    return {
        "library": "jaxrl",
        "workload": args.get("workload", "length"),
        "conv": args.get("conv", "fast") if args.get("workload") == "matched" else None,
        "env": c.env if args.get("workload", "length") == "length" else "NoiseFrames64",
        "backbone": c.backbone,
        "posterior": c.resolved_posterior,
        "window": c.transformer_window if c.backbone == "transformer" else None,
        "model_size": c.model_size,
        "image_net": c.image_net,
        "batch_size": c.batch_size,
        "batch_length": c.batch_length,
        "imagination_starts": c.imagination_starts,
        "num_envs": c.num_envs,
        "train_every": c.train_every,
        "gradient_steps_per_update": c.gradient_steps,
        "iters": iters,
        "train_step_seconds": step_times["wall"],
        "train_step_seconds_min": step_times["wall_min"],
        "train_step_cpu_seconds": step_times["cpu"],
        "updates_per_second": 1.0 / step_times["wall"],
        "train_step_in_loop_seconds": in_loop_seconds,
        "minor_faults_per_step": {"alone": faults_alone, "in_loop": faults_in_loop},
        "train_step_matmul_floor": floor,
        "loop_length": loop_length,
        "update_seconds": update_times["wall"],
        "update_seconds_min": update_times["wall_min"],
        "env_steps_per_second": update_times["wall"]
        and algo.steps_per_update / update_times["wall"],
        "train_step_flops": flops,
        "train_step_flops_xla": xla,
        "train_step_matmul_flops": looped.flops,
        "gflop_per_s": None if flops is None else flops / step_times["wall"] / 1e9,
        "compile_seconds": compile_seconds,
        "temp_bytes": temp_bytes,
        "params": count(params),
        "params_world_model": count(params["world_model"]),
        "dtype": "float32",
        "load_average_at_end": os.getloadavg()[0],
        "jax_version": jax.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
