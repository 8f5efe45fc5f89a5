"""The official DreamerV3's train step, for benchmarks/dreamer_throughput.py (runs in the
venv `benchmarks/.venvs/dreamer`: the PyPI package `dreamer==3.3.1`, Hafner et al. 2023,
with the jax it pins, 0.4.33, as the CPU build).

    python dreamer_official.py '{"iters": 5}'

Builds `dreamerv3.agent.Agent` the way its `main.make_agent` does, at its smallest size
preset (`size1m`) with a 64x64x3 uint8 image observation and 4 discrete actions, batch
16 x 64 (+ 1 step of replay context, as its replay hands it), compute dtype float32
(its default is bfloat16; the agent reports the dtype it ran), and times its train step:
`Agent.train(carry, batch)` followed by `block_until_ready` on the updated parameters
(compile excluded and reported apart; `iters` calls after one warm-up; median, minimum,
process CPU seconds). Prints ONE JSON line.

The PyPI sdist of dreamer 3.3.1 ships neither `dreamerv3/configs.yaml` nor
`embodied/envs/`, and its `setup.py` reads a `requirements.txt` it does not ship (so
`pip install dreamer==3.3.1` fails; benchmarks/dreamer_throughput.py puts its source on
the venv's path instead). Hence:

* `CONFIG` below holds the configuration values the agent reads: the `defaults` of that
  release's configs.yaml with its `size1m` preset applied (RSSM deter 512, hidden 64,
  32 latents of 4 classes; conv depth 4 with multipliers 2, 3, 4, 4 and 5x5 kernels;
  64 units everywhere) and `jax.platform = cpu`, `jax.compute_dtype = float32`;
* an empty module stands in for `embodied.envs` (the agent never uses it).

FLOPs per update: XLA's cost analysis of the compiled train function
(`agent._train.cost_analysis()`), which counts a loop body once, scaled by the ratio of
the loop-weighted to the once-counted dot and convolution FLOPs of the train function's
jaxpr (`_matmul_flops`; the loops are the RSSM's observe scan over 65 steps and the
imagination scan over 15), as benchmarks/workers/jaxrl_dreamer.py counts jaxrl's.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness
from _harness import minor_faults, time_calls  # noqa: E402

BATCH_SIZE, BATCH_LENGTH = 16, 64
IMAGE = (64, 64, 3)
NUM_ACTIONS = 4

# The agent's configuration: dreamer 3.3.1's configs.yaml `defaults`, `size1m` applied.
_MLP = {"act": "silu", "norm": "rms", "winit": "trunc_normal_in"}
_CONV = {"depth": 4, "mults": [2, 3, 4, 4], "layers": 3, "units": 64, "kernel": 5}
CONFIG = {
    "loss_scales": {
        "rec": 1.0,
        "rew": 1.0,
        "con": 1.0,
        "dyn": 1.0,
        "rep": 0.1,
        "policy": 1.0,
        "value": 1.0,
        "repval": 0.3,
    },
    "opt": {
        "lr": 4e-5,
        "agc": 0.3,
        "eps": 1e-20,
        "beta1": 0.9,
        "beta2": 0.999,
        "momentum": True,
        "wd": 0.0,
        "schedule": "const",
        "warmup": 1000,
        "anneal": 0,
    },
    "ac_grads": False,
    "dyn": {
        "typ": "rssm",
        "rssm": {
            "deter": 512,
            "hidden": 64,
            "stoch": 32,
            "classes": 4,
            "unimix": 0.01,
            "outscale": 1.0,
            "imglayers": 2,
            "obslayers": 1,
            "dynlayers": 1,
            "absolute": False,
            "blocks": 8,
            "free_nats": 1.0,
            **_MLP,
        },
    },
    "enc": {
        "typ": "simple",
        "simple": {**_CONV, **_MLP, "symlog": True, "outer": False, "strided": False},
    },
    "dec": {
        "typ": "simple",
        "simple": {**_CONV, **_MLP, "outscale": 1.0, "outer": False, "bspace": 8, "strided": False},
    },
    "rewhead": {
        "layers": 1,
        "units": 64,
        "output": "symexp_twohot",
        "outscale": 0.0,
        "bins": 255,
        **_MLP,
    },
    "conhead": {"layers": 1, "units": 64, "output": "binary", "outscale": 1.0, **_MLP},
    "policy": {
        "layers": 3,
        "units": 64,
        "minstd": 0.1,
        "maxstd": 1.0,
        "outscale": 0.01,
        "unimix": 0.01,
        **_MLP,
    },
    "value": {
        "layers": 3,
        "units": 64,
        "output": "symexp_twohot",
        "outscale": 0.0,
        "bins": 255,
        **_MLP,
    },
    "policy_dist_disc": "categorical",
    "policy_dist_cont": "bounded_normal",
    "imag_last": 0,
    "imag_length": 15,
    "horizon": 333,
    "contdisc": True,
    "imag_loss": {"slowtar": False, "lam": 0.95, "actent": 3e-4, "slowreg": 1.0},
    "repl_loss": {"slowtar": False, "lam": 0.95, "slowreg": 1.0},
    "slowvalue": {"rate": 0.02, "every": 1},
    "retnorm": {
        "impl": "perc",
        "rate": 0.01,
        "limit": 1.0,
        "perclo": 5.0,
        "perchi": 95.0,
        "debias": False,
    },
    "valnorm": {"impl": "none", "rate": 0.01, "limit": 1e-8},
    "advnorm": {"impl": "none", "rate": 0.01, "limit": 1e-8},
    "reward_grad": True,
    "repval_loss": True,
    "repval_grad": True,
    "report": True,
    "report_gradnorms": False,
    "seed": 0,
    "batch_size": BATCH_SIZE,
    "batch_length": BATCH_LENGTH,
    "replay_context": 1,
    "report_length": 32,
    "replica": 0,
    "replicas": 1,
    "jax": {
        "platform": "cpu",
        "compute_dtype": "float32",
        "policy_devices": [0],
        "train_devices": [0],
        "mock_devices": 0,
        "prealloc": False,
        "jit": True,
        "debug": False,
        "expect_devices": 0,
        "enable_policy": True,
        "coordinator_address": "",
        # Options of this benchmark: compile explicitly (timed), no profiler traces.
        "precompile": False,
        "profiler": False,
    },
}


def _import_agent():
    """`dreamerv3.agent.Agent`, with a stand-in for the `embodied.envs` the sdist lacks."""
    sys.modules.setdefault("embodied.envs", types.ModuleType("embodied.envs"))
    import dreamerv3.agent

    return dreamerv3.agent.Agent


def _matmul_flops(jaxpr, loops: bool) -> float:
    """2 x multiply-adds of every dot and convolution in `jaxpr`, loop bodies weighted by
    their trip counts when `loops` (a standalone copy of `jaxrl.plan.matmul_cost`'s
    counting, which this venv cannot import)."""
    from jax import core

    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, out = eqn.invars[0].aval, eqn.outvars[0].aval
            (contract, _), _ = eqn.params["dimension_numbers"]
            total += 2.0 * math.prod(out.shape) * math.prod(lhs.shape[i] for i in contract)
        elif name == "conv_general_dilated":
            rhs, out = eqn.invars[1].aval, eqn.outvars[0].aval
            out_features = rhs.shape[eqn.params["dimension_numbers"].rhs_spec[0]]
            total += 2.0 * math.prod(out.shape) * math.prod(rhs.shape) / out_features
        elif name == "scan":
            inner = _matmul_flops(eqn.params["jaxpr"].jaxpr, loops)
            total += inner * (eqn.params["length"] if loops else 1)
        else:
            for sub in core.jaxprs_in_params(eqn.params):
                total += _matmul_flops(sub, loops)
    return total


def main(args: dict) -> dict:
    import elements
    import jax
    import numpy as np

    iters = int(args.get("iters", 5))
    Agent = _import_agent()
    from embodied.jax import internal, nets

    obs_space = {
        "image": elements.Space(np.uint8, IMAGE),
        "reward": elements.Space(np.float32),
        "is_first": elements.Space(bool),
        "is_last": elements.Space(bool),
        "is_terminal": elements.Space(bool),
    }
    act_space = {"action": elements.Space(np.int32, (), 0, NUM_ACTIONS)}
    logdir = tempfile.mkdtemp(prefix="dreamer_official_")
    t0 = time.perf_counter()
    agent = Agent(obs_space, act_space, elements.Config(**CONFIG, logdir=logdir))
    init_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    with agent.train_mesh:
        agent._compile_train()
    compile_seconds = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    shape = (BATCH_SIZE, BATCH_LENGTH + CONFIG["replay_context"])
    data = agent._zeros(agent.spaces, shape)
    data["image"] = rng.integers(0, 256, (*shape, *IMAGE), dtype=np.uint8)
    data["reward"] = rng.normal(size=shape).astype(np.float32)
    data["action"] = rng.integers(0, NUM_ACTIONS, shape, dtype=np.int32)
    data["is_first"][:, 0] = True
    data = internal.device_put(data, agent.train_sharded)
    carry = [agent.init_train(BATCH_SIZE)]
    counter = [0]

    def train_once():
        counter[0] += 1
        batch = {**data, "seed": agent._seeds(counter[0], agent.train_mirrored)}
        carry[0], _, _ = agent.train(carry[0], batch)
        jax.block_until_ready(agent.params)

    faults = minor_faults()
    times = time_calls(train_once, iters)
    faults = (minor_faults() - faults) / (iters + 1)  # per call; time_calls warms up once

    compiled = agent._train
    cost = compiled.cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else None
    xla = float(cost["flops"]) if cost and cost.get("flops") else None
    # The loop weighting needs the train function's jaxpr: trace the (uncompiled) pure
    # function the agent compiled, with the same arguments.
    flops, matmul = xla, None
    try:
        import ninjax as nj

        allo = {k: v for k, v in agent.params.items() if k in agent.policy_keys}
        dona = {k: v for k, v in agent.params.items() if k not in agent.policy_keys}
        seed = agent._seeds(0, agent.train_mirrored)
        params = {**dona, **allo}
        fn = nj.pure(agent.model.train)
        jaxpr = jax.make_jaxpr(lambda p, s, c, d: fn(p, c, d, seed=s))(
            params, seed, agent.init_train(BATCH_SIZE), data
        ).jaxpr
        looped, once = _matmul_flops(jaxpr, True), _matmul_flops(jaxpr, False)
        matmul = looped
        if xla is not None and once:
            flops = xla * looped / once
    except Exception as error:  # the count is a report, not the measurement
        print(f"loop weighting failed: {error!r}", file=sys.stderr)

    # What its optimiser trains (not the slow critic's copy, not the optimiser's state).
    params = {k: v for k, v in agent.params.items() if not k.startswith(("opt/", "slowval/"))}
    return {
        "library": "dreamerv3",
        "version": "dreamer 3.3.1",
        "workload": "matched",
        "preset": "size1m",
        "batch_size": BATCH_SIZE,
        "batch_length": BATCH_LENGTH,
        "iters": iters,
        "train_step_seconds": times["wall"],
        "train_step_seconds_min": times["wall_min"],
        "train_step_cpu_seconds": times["cpu"],
        "updates_per_second": 1.0 / times["wall"],
        "minor_faults_per_step": {"alone": faults},
        "train_step_flops": flops,
        "train_step_flops_xla": xla,
        "train_step_matmul_flops": matmul,
        "gflop_per_s": None if flops is None else flops / times["wall"] / 1e9,
        "compile_seconds": {"init": init_seconds, "train_step": compile_seconds},
        "params": int(sum(math.prod(v.shape) for v in params.values())),
        "params_all": int(sum(math.prod(v.shape) for v in agent.params.values())),
        "dtype": str(np.dtype(nets.COMPUTE_DTYPE)),
        "param_dtypes": sorted({str(v.dtype) for v in agent.params.values()}),
        "load_average_at_end": os.getloadavg()[0],
        "jax_version": jax.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
