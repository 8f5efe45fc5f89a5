"""Interleaved A/B in one process: what the driver's chunk costs around jaxrl's PPO update.

    python benchmarks/workers/ab_driver_chunk.py SEEDS ROUNDS K     # e.g. 64 3 19

Times, alternately in ROUNDS rounds, four jitted programs of K vmapped
updates each (median per-update wall and CPU ms):
  driver_chunk      the driver's run_chunk: scan over K updates, each behind lax.cond
  plain_scan        the same scan without the cond
  scan_min_metrics  no cond, and only the metrics the driver needs (loss, episode_*)
  fori_no_metrics   fori_loop, no metrics at all (what rejax's train loop does)
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algorithms.ppo import train as T
from jaxrl.algorithms.ppo.config import PPOConfig

seeds, rounds, K = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
algo = T.make(PPOConfig())
keys = jax.random.split(jax.random.key(0), seeds)
hp = jax.tree.map(lambda *xs: jnp.stack(xs), *[algo.hyperparams() for _ in range(seeds)])
state0 = jax.jit(jax.vmap(algo.init))(keys, hp)
update = jax.vmap(algo.update)
mshape = jax.eval_shape(update, state0)[1]


def driver_chunk(s, start):
    def body(s, i):
        skip = lambda s: (s, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), mshape))
        return jax.lax.cond(start + i < 10**6, update, skip, s)

    return jax.lax.scan(body, s, jnp.arange(K))


def plain(s, start):
    return jax.lax.scan(lambda s, i: update(s), s, jnp.arange(K))


KEEP = ("loss", "episode_return", "episode_length", "episodes")


def min_metrics(s, start):
    def body(s, i):
        s, m = update(s)
        return s, {k: m[k] for k in KEEP}

    return jax.lax.scan(body, s, jnp.arange(K))


def no_metrics(s, start):
    return jax.lax.fori_loop(0, K, lambda i, s: update(s)[0], s), None


fns = {
    n: jax.jit(f, donate_argnums=0)
    for n, f in [
        ("driver_chunk", driver_chunk),
        ("plain_scan", plain),
        ("scan_min_metrics", min_metrics),
        ("fori_no_metrics", no_metrics),
    ]
}
states = {}
for n, f in fns.items():
    states[n] = jax.block_until_ready(f(jax.tree.map(jnp.copy, state0), jnp.int32(0)))[0]
res = {n: [] for n in fns}
for _ in range(rounds):
    for n, f in fns.items():
        t, c = time.perf_counter(), time.process_time()
        out = f(states[n], jnp.int32(0))
        if out[1] is not None:
            jax.tree.map(np.asarray, out[1])  # host sync of metrics, as the driver
        states[n] = jax.block_until_ready(out[0])
        res[n].append(((time.perf_counter() - t) / K, (time.process_time() - c) / K))
b = None
for n, v in res.items():
    w, c = np.median([x[0] for x in v]) * 1e3, np.median([x[1] for x in v]) * 1e3
    b = b or (w, c)
    print(
        f"seeds={seeds} K={K} {n:16s} per update: wall {w:7.2f} ms cpu {c:7.2f} ms  "
        f"driver/this cpu {b[1] / c:5.3f} wall {b[0] / w:5.3f}"
    )
