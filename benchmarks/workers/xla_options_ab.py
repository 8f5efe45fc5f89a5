"""In-process A/B of XLA CPU compiler options on jaxrl's PPO chunk program.

    python benchmarks/workers/xla_options_ab.py SEEDS ROUNDS K [OPTION_SET ...]
    python benchmarks/workers/xla_options_ab.py 1 25 16       # every option set below

Compiles the driver's program (a `lax.scan` of K PPO updates over the agents,
PureJaxRL's CartPole config) once per option set, then times the programs
alternately, ROUNDS times each, and prints per-update wall (min, median) and
CPU (min, median) milliseconds. The minimum is the least load-sensitive
estimate on a shared machine. Option sets are XLA `DebugOptions` passed to
`Lowered.compile(compiler_options=...)`.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algorithms.ppo import train as ppo
from jaxrl.algorithms.ppo.config import PPOConfig
from jaxrl.training.driver import scan_updates

OPTION_SETS = {
    "default": {},
    "no_ynn": {"xla_cpu_experimental_ynn_fusion_type": ""},
    "no_xnn": {"xla_cpu_experimental_xnn_fusion_type": ""},
    "single_thread_eigen": {"xla_cpu_multi_thread_eigen": False},
    "concurrency_scheduler": {"xla_cpu_enable_concurrency_optimized_scheduler": True},
}


def main(seeds: int, rounds: int, k: int, names: list[str]) -> None:
    algo = ppo.make(PPOConfig(num_envs=4, num_steps=128, update_epochs=4, num_minibatches=4))
    keys = jax.random.split(jax.random.key(0), seeds)
    hparams = jax.tree.map(lambda *xs: jnp.stack(xs), *[algo.hyperparams() for _ in range(seeds)])
    state0 = jax.jit(jax.vmap(algo.init))(keys, hparams)
    chunk = scan_updates(algo, seeds, k)  # the driver's chunk program

    programs = {}
    for name in names:
        t0 = time.perf_counter()
        programs[name] = jax.jit(chunk).lower(state0).compile(compiler_options=OPTION_SETS[name])
        print(f"{name}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    states = {n: jax.block_until_ready(p(state0)[0]) for n, p in programs.items()}
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in programs}
    for _ in range(rounds):
        for name, program in programs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            state, metrics = program(states[name])
            jax.tree.map(np.asarray, metrics)  # the driver's host sync
            states[name] = jax.block_until_ready(state)
            times[name].append(
                ((time.perf_counter() - t0) / k * 1e3, (time.process_time() - c0) / k * 1e3)
            )
    base = None
    for name, rows in times.items():
        wall, cpu = np.asarray(rows).T
        base = base or wall.min()
        print(
            f"{name:24s} wall min {wall.min():7.2f} median {np.median(wall):7.2f} | "
            f"cpu min {cpu.min():7.2f} median {np.median(cpu):7.2f} ms/update | "
            f"speed vs first (wall min) {base / wall.min():.2f}x"
        )


if __name__ == "__main__":
    seeds, rounds, k = (int(x) for x in sys.argv[1:4])
    main(seeds, rounds, k, sys.argv[4:] or list(OPTION_SETS))
