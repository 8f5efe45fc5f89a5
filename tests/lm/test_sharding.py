"""Sharded forward passes on 8 fake CPU devices match the single-device model.

`--xla_force_host_platform_device_count` must be set before jax initialises, so the
multi-device part runs in a subprocess (`_SCRIPT`) and reports JSON; the rest of the test
session keeps its single device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest
from jax.sharding import PartitionSpec as P

from jaxrl.lm import sharding
from jaxrl.lm.config import ModelConfig

FIXTURES = Path(__file__).parent / "fixtures"

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jaxrl.lm import from_pretrained, init_cache
    from jaxrl.lm import sharding

    assert jax.device_count() == 8, jax.devices()
    fixtures = sys.argv[1]
    report = {}
    cases = {
        "qwen3": {"fsdp": (1, 8, 1), "tensor": (1, 1, 8), "mixed": (2, 2, 2)},
        "llama": {"mixed": (2, 2, 2)},
        "qwen2": {"mixed": (2, 2, 2)},
    }
    tokens = np.random.default_rng(0).integers(0, 256, (8, 10)).astype(np.int32)
    mask = np.ones((8, 10), bool)
    mask[:4, :3] = False  # some left padding
    for family, meshes in cases.items():
        model, params = from_pretrained(f"{fixtures}/{family}")
        ref = np.asarray(jax.jit(model.apply)(params, tokens, attention_mask=mask))
        for name, axes in meshes.items():
            mesh = sharding.make_mesh(*axes)
            sp = sharding.shard_params(params, mesh)
            bs = sharding.batch_sharding(mesh)
            fwd = jax.jit(
                lambda p, t, m: model.apply(p, t, attention_mask=m),
                in_shardings=(sharding.tree_shardings(sp, mesh), bs, bs),
            )
            out = fwd(sp, jax.device_put(tokens, bs), jax.device_put(mask, bs))
            layer = sp["params"]["layers_0"]
            r = report[f"{family}/{name}"] = dict(
                max_err=float(np.abs(np.asarray(out) - ref)[mask].max()),
                q_spec=str(layer["self_attn"]["q_proj"]["kernel"].sharding.spec),
                down_spec=str(layer["mlp"]["down_proj"]["kernel"].sharding.spec),
                embed_spec=str(sp["params"]["embed_tokens"]["embedding"].sharding.spec),
                q_shard_shape=list(
                    layer["self_attn"]["q_proj"]["kernel"].addressable_shards[0].data.shape
                ),
            )
            if name != "mixed":
                continue
            # Prefill through a sharded cache on the same mesh.
            cache = init_cache(model.config, 8, 16)
            cs = sharding.cache_sharding(model.config, mesh, 8)
            cache = cache.replace(k=jax.device_put(cache.k, cs), v=jax.device_put(cache.v, cs))
            cached, _ = jax.jit(
                lambda p, t, m, c: model.apply(p, t, attention_mask=m, cache=c)
            )(sp, tokens, mask, cache)
            r["cache_err"] = float(np.abs(np.asarray(cached) - ref)[mask].max())
            # from_pretrained(mesh=...) places params sharded directly.
            _, direct = from_pretrained(f"{fixtures}/{family}", mesh=mesh)
            r["direct_q_spec"] = str(
                direct["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"].sharding.spec
            )

    # generate with sharded params: the KV cache goes on the same mesh (batch over
    # data x fsdp, kv heads over tensor) and samples match the single-device run.
    from jax.sharding import PartitionSpec as P
    from jaxrl.lm import sampling

    model, params = from_pretrained(f"{fixtures}/llama")  # 2 kv heads: split over tensor
    mesh = sharding.make_mesh(2, 2, 2)
    sp = sharding.shard_params(params, mesh)
    kw = dict(prompt_mask=mask[:4], max_new_tokens=120, temperature=1.0, top_k=50,
              num_samples=2)  # 4 prompts x 2 = 8 rows; cache 130 slots: windows (64, 130)
    assert sampling.decode_windows(10, 130) == (64, 130)
    ref = sampling.generate(model, params, tokens[:4], jax.random.key(7), **kw)
    out = sampling.generate(model, sp, tokens[:4], jax.random.key(7), **kw)
    g = report["generate"] = dict(
        tokens_equal=bool(np.array_equal(np.asarray(ref.tokens), np.asarray(out.tokens))),
        logprob_err=float(np.abs(np.asarray(ref.logprobs) - np.asarray(out.logprobs)).max()),
        mesh=dict(sampling._params_mesh(sp).shape),
        single_mesh=str(sampling._params_mesh(params)),
    )
    placed = jax.jit(lambda c: sampling._place_cache(c, model.config, mesh))(
        init_cache(model.config, 8, 16)
    )
    full = lambda x: [str(a) for a in x.sharding.spec] + ["None"] * (x.ndim - len(x.sharding.spec))
    g["k_spec"], g["v_spec"] = full(placed.k[0]), full(placed.v[0])
    g["k_shard_shape"] = list(placed.k[0].addressable_shards[0].data.shape)
    g["mask_spec"] = full(placed.mask)
    # The compiled sampler really holds the cache partitioned: per-device K^T blocks of
    # (8 rows / 4, 2 kv heads / 2, head_dim 16, 130 slots) in the last decode segment.
    compiled = sampling._generate.lower(
        model, sp, jnp.asarray(tokens[:4]), jnp.asarray(mask[:4]), jax.random.key(7),
        jnp.float32(1.0), jnp.float32(1.0), jnp.zeros((0,), jnp.int32), jnp.int32(0),
        max_new_tokens=120, top_k=50, use_top_p=False, greedy=False, num_samples=2,
        windows=(64, 130), mesh=mesh,
    ).compile().as_text()
    g["local_cache_in_hlo"] = "f32[2,1,16,130]" in compiled
    g["global_cache_in_hlo"] = "f32[8,2,16,130]" in compiled
    print("REPORT" + json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report() -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(FIXTURES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT"))
    return json.loads(line.removeprefix("REPORT"))


@pytest.mark.parametrize(
    "case", ["qwen3/fsdp", "qwen3/tensor", "qwen3/mixed", "llama/mixed", "qwen2/mixed"]
)
def test_sharded_logits_match_single_device(report: dict, case: str) -> None:
    r = report[case]
    assert r["max_err"] < 1e-5, r
    if case.endswith("mixed"):  # prefill through a sharded KV cache
        assert r["cache_err"] < 1e-5, r


def test_params_really_sharded(report: dict) -> None:
    fsdp, tensor, mixed = (report[f"qwen3/{m}"] for m in ("fsdp", "tensor", "mixed"))
    assert fsdp["q_spec"] == str(P("fsdp", None))
    assert fsdp["q_shard_shape"] == [64 // 8, 128]
    assert tensor["q_spec"] == str(P(None, "tensor"))
    assert tensor["down_spec"] == str(P("tensor", None))
    assert tensor["q_shard_shape"] == [64, 128 // 8]
    assert mixed["q_spec"] == str(P("fsdp", "tensor"))
    assert mixed["embed_spec"] == str(P("tensor", "fsdp"))
    assert mixed["q_shard_shape"] == [64 // 2, 128 // 2]
    assert mixed["direct_q_spec"] == mixed["q_spec"]


def test_generate_with_sharded_params_places_cache_and_matches(report: dict) -> None:
    g = report["generate"]
    assert g["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2} and g["single_mesh"] == "None"
    assert g["tokens_equal"], g
    assert g["logprob_err"] < 5e-5, g
    batch = str(("data", "fsdp"))
    assert g["k_spec"] == g["v_spec"] == [batch, "tensor", "None", "None"], g
    assert g["k_shard_shape"] == [8 // 4, 2 // 2, 16, 16], g
    assert g["mask_spec"] == [batch, "None"], g
    assert g["local_cache_in_hlo"] and not g["global_cache_in_hlo"], g


# -- single-device unit tests of the rules --------------------------------------------------


def _tiny() -> ModelConfig:
    return ModelConfig(
        model_type="qwen2", vocab_size=96, hidden_size=32, intermediate_size=48,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        rope_theta=1e4, rms_norm_eps=1e-6, max_position_embeddings=64,
        tie_word_embeddings=False, attention_bias=True, qk_norm=False, value_head=True,
    )  # fmt: skip


def test_every_param_has_a_sharding_and_replicates_on_one_device() -> None:
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    sh = sharding.param_shardings(_tiny(), mesh)
    leaves = jax.tree.leaves(sh)
    assert leaves and all(s.spec == P(*([None] * len(s.spec))) for s in leaves)


def test_logical_axes_table() -> None:
    assert sharding.logical_axes(("layers_3", "mlp", "down_proj", "kernel"), 2) == ("mlp", "embed")
    assert sharding.logical_axes(("layers_0", "self_attn", "k_norm", "scale"), 1) == ("norm",)
    assert sharding.logical_axes(("something", "new"), 3) == (None, None, None)


def test_spec_drops_indivisible_axes() -> None:
    class FakeMesh:  # spec_for only reads .shape
        shape = {"data": 1, "fsdp": 4, "tensor": 3}

    spec = sharding.spec_for(("embed", "heads"), (8, 10), FakeMesh())  # 10 % 3 != 0
    assert spec == P("fsdp", None)
    spec = sharding.spec_for(("embed", "embed"), (8, 8), FakeMesh())  # no axis used twice
    assert spec == P("fsdp", None)


def test_make_mesh_validates() -> None:
    with pytest.raises(ValueError, match="needs"):
        sharding.make_mesh(2, 2, 2, devices=jax.devices()[:1])
    mesh = sharding.make_mesh(1, -1, 1)
    assert mesh.axis_names == sharding.MESH_AXES
