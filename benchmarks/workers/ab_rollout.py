"""Interleaved A/B in one process: jaxrl's rollout / update, base vs _jaxrl_variants rollouts.

python benchmarks/workers/ab_rollout.py SEEDS ROUNDS fused_bootstrap no_bootstrap
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import _jaxrl_variants as V

from jaxrl.algorithms.ppo import train as T
from jaxrl.algorithms.ppo.config import PPOConfig

seeds = int(sys.argv[1])
rounds = int(sys.argv[2])
names = sys.argv[3:]
base = T.make(PPOConfig())
algos = {"base": base}
for n in names:
    cls = type(
        "P_" + n,
        (T.PPO,),
        {"_rollout": V._make_rollout({"fused_bootstrap": "fused", "no_bootstrap": "none"}[n])},
    )
    a = object.__new__(cls)
    a.__dict__.update(base.__dict__)
    algos[n] = a
keys = jax.random.split(jax.random.key(0), seeds)
hp = jax.tree.map(lambda *xs: jnp.stack(xs), *[base.hyperparams() for _ in range(seeds)])
state0 = jax.jit(jax.vmap(base.init))(keys, hp)
fns = {}
for n, a in algos.items():
    fns[(n, "rollout")] = jax.jit(jax.vmap(lambda s, a=a: a._rollout(s)[:2]))
    fns[(n, "update")] = jax.jit(jax.vmap(a.update))
res = {k: [] for k in fns}
states = {k: jax.block_until_ready(f(state0))[0] for k, f in fns.items()}
for _ in range(rounds):
    for k, f in fns.items():
        t, c = time.perf_counter(), time.process_time()
        out = jax.block_until_ready(f(states[k]))
        states[k] = out[0]
        res[k].append((time.perf_counter() - t, time.process_time() - c))
out = {}
for (n, what), v in res.items():
    w, c = np.median([x[0] for x in v]) * 1e3, np.median([x[1] for x in v]) * 1e3
    out[f"{n}/{what}"] = (w, c)
for k, (w, c) in out.items():
    n, what = k.split("/")
    bw, bc = out[f"base/{what}"]
    print(
        f"seeds={seeds} {k:28s} wall {w:8.2f} ms  cpu {c:8.2f} ms   "
        f"base/this cpu {bc / c:5.3f} wall {bw / w:5.3f}"
    )
