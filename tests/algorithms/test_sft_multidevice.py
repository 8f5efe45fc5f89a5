"""An SFT update on 8 emulated CPU devices (FSDP, FSDP x tensor, data parallel) equals the
1-device update, and the parameters and Adam moments really are sharded.

`--xla_force_host_platform_device_count` must be set before JAX initialises, so the
work runs in a subprocess (`_SCRIPT`) that reports JSON; this test session keeps its one
device. Both sides run `jit(vmap(learn))` over a leading agent axis of 2, as the driver
does, placed with the algorithm's own `make_mesh`/`state_sharding`/`batch_sharding`
hooks. Sharding changes only the order of float32 sums (the gradient all-reduce), so
parameters after one AdamW step agree to ~1e-7; the tolerances below leave headroom and
still catch a wrong shard or a missing reduction, which moves parameters by about the
learning rate (1e-3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jaxrl import config as cfg
    from jaxrl.algorithms import sft

    assert jax.device_count() == 8, jax.devices()
    BASE = dict(digits=2, num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2,
                mlp_size=128, batch_size=16, total_steps=160, warmup=0.0)

    def one_update(fsdp, tensor, num_devices, extra):
        config = cfg.replace(sft.default_config(), **BASE, **extra,
                             mesh_fsdp=fsdp, mesh_tensor=tensor)
        algo = sft.make(config)
        mesh = algo.make_mesh(num_devices)
        keys = jnp.stack([jax.random.key(0), jax.random.key(1)])  # two agents
        hparams = jax.tree.map(lambda *x: jnp.stack(x), *[algo.hyperparams()] * 2)
        abstract = jax.eval_shape(jax.vmap(algo.init), keys, hparams)
        shardings = algo.state_sharding(abstract, mesh, 2)
        state = jax.jit(jax.vmap(algo.init), out_shardings=shardings)(keys, hparams)
        before = jax.device_get(state.params)
        batch, _, _ = algo.process(None, algo.init_host_state(0, 2))
        abstract_batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch)
        batch_shardings = algo.batch_sharding(abstract_batch, mesh, 2)
        batch = jax.device_put(batch, batch_shardings)
        learn = jax.jit(jax.vmap(algo.learn), in_shardings=(shardings, batch_shardings),
                        out_shardings=(shardings, None))
        with jax.set_mesh(mesh):  # as the driver runs every phase: the mesh in context
            state, metrics = learn(state, batch)
        return mesh, before, state, jax.device_get(metrics), batch

    def flat(tree):
        return np.concatenate([np.ravel(x) for x in jax.tree.leaves(jax.device_get(tree))])

    def describe(x):
        spec = [list(a) if isinstance(a, tuple) else a for a in x.sharding.spec]
        return dict(spec=spec, shard=list(x.sharding.shard_shape(x.shape)), shape=list(x.shape))

    report = {}
    cases = {"fsdp": (8, 1, {}), "fsdp_tensor": (4, 2, {}), "fsdp_lora": (8, 1, {"lora_rank": 4}),
             "data": (1, 1, {}), "data_lora": (1, 1, {"lora_rank": 4})}
    for name, (fsdp, tensor, extra) in cases.items():
        _, before, ref, ref_metrics, _ = one_update(1, 1, 1, extra)
        mesh, _, state, metrics, batch = one_update(fsdp, tensor, None, extra)
        model_params = state.base_params if extra else state.params
        layer = model_params["params"]["layers_0"]
        r = report[name] = dict(
            mesh=dict(mesh.shape),
            params_max_diff=float(np.abs(flat(state.params) - flat(ref.params)).max()),
            params_max_change=float(np.abs(flat(ref.params) - flat(before)).max()),
            metrics={k: np.asarray(v).tolist() for k, v in metrics.items()},
            ref_metrics={k: np.asarray(v).tolist() for k, v in ref_metrics.items()},
            q_proj=describe(layer["self_attn"]["q_proj"]["kernel"]),
            down_proj=describe(layer["mlp"]["down_proj"]["kernel"]),
            embed=describe(model_params["params"]["embed_tokens"]["embedding"]),
            update_step=describe(state.update_step),
            tokens=describe(batch["tokens"]),
        )
        mu = state.opt_state[1].mu  # Adam's first moment follows its parameter
        if extra:
            r["adapter"] = describe(state.params["layers_0"]["self_attn"]["q_proj"]["a"])
        else:
            r["mu_q_proj"] = describe(mu["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"])
    print("REPORT" + json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report() -> dict:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-4000:]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("REPORT")]
    return json.loads(line.removeprefix("REPORT"))


@pytest.mark.parametrize("case", ["fsdp", "fsdp_tensor", "fsdp_lora", "data", "data_lora"])
def test_sharded_update_equals_the_one_device_update(report, case):
    """`data`, `data_lora`: 8-way data parallel, each device's gradient computed in
    `shard_map` and summed in one flat all-reduce (`LMAlgorithm.accumulated_gradient`)."""
    r = report[case]
    assert r["params_max_change"] > 1e-4  # the update moved the parameters
    assert r["params_max_diff"] < 1e-4, r  # measured ~1e-5: one Adam step is ~lr * sign(g)
    for name, values in r["ref_metrics"].items():
        np.testing.assert_allclose(r["metrics"][name], values, rtol=1e-4, atol=1e-6, err_msg=name)


def test_fsdp_shards_every_matrix_over_its_hidden_axis(report):
    r = report["fsdp"]
    assert r["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    # (agents, in=hidden, out=heads*head_dim): hidden over fsdp, agent axis whole.
    assert r["q_proj"] == {"spec": [None, "fsdp", None], "shard": [2, 8, 64], "shape": [2, 64, 64]}
    assert r["down_proj"] == {
        "spec": [None, None, "fsdp"],
        "shard": [2, 128, 8],
        "shape": [2, 128, 64],
    }
    assert r["embed"]["spec"] == [None, None, "fsdp"] and r["embed"]["shard"][2] == 8
    assert r["mu_q_proj"] == r["q_proj"]  # optimiser moments sharded like their parameter
    assert r["update_step"] == {"spec": [None], "shard": [2], "shape": [2]}  # replicated
    assert r["tokens"] == {
        "spec": [None, "fsdp", None],
        "shard": [2, 2, r["tokens"]["shape"][2]],
        "shape": r["tokens"]["shape"],
    }  # batch rows over data x fsdp


def test_fsdp_x_tensor_shards_hidden_and_heads(report):
    r = report["fsdp_tensor"]
    assert r["mesh"] == {"data": 1, "fsdp": 4, "tensor": 2}
    assert r["q_proj"] == {
        "spec": [None, "fsdp", "tensor"],
        "shard": [2, 16, 32],
        "shape": [2, 64, 64],
    }
    assert r["down_proj"] == {
        "spec": [None, "tensor", "fsdp"],
        "shard": [2, 64, 16],
        "shape": [2, 128, 64],
    }
    assert r["mu_q_proj"] == r["q_proj"]
    assert r["tokens"]["spec"] == [None, "fsdp", None] and r["tokens"]["shard"][1] == 4


def test_lora_keeps_the_frozen_base_sharded_and_the_adapters_whole(report):
    r = report["fsdp_lora"]
    assert r["q_proj"]["spec"] == [None, "fsdp", None]  # base_params
    assert r["adapter"]["spec"] == [None, None, None]  # small: replicated
