"""HF safetensors checkpoint I/O: exact round trips, sharding, and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from jaxrl.lm import ModelConfig, from_pretrained, save_pretrained
from jaxrl.lm.checkpoint import INDEX_FILE, hf_name, param_shapes

FIXTURES = Path(__file__).parent / "fixtures"


def _tiny(**kw) -> ModelConfig:
    fields = dict(
        model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        rope_theta=20000.0, rms_norm_eps=1e-5, max_position_embeddings=128,
        tie_word_embeddings=False, attention_bias=False, qk_norm=False,
    )  # fmt: skip
    fields.update(kw)
    return ModelConfig(**fields)


def _init(config: ModelConfig, seed: int = 0) -> dict:
    """Random params of the right tree/shapes (no compile: shapes come from eval_shape)."""
    rng = np.random.default_rng(seed)
    flat = {
        p: jnp.asarray(rng.normal(size=shape).astype(np.float32))
        for p, shape in param_shapes(config).items()
    }
    return {"params": flax.traverse_util.unflatten_dict(flat)}


def _assert_trees_equal(a, b) -> None:
    fa = flax.traverse_util.flatten_dict(a)
    fb = flax.traverse_util.flatten_dict(b)
    assert fa.keys() == fb.keys()
    for k in fa:
        assert fa[k].dtype == fb[k].dtype, k
        np.testing.assert_array_equal(np.asarray(fa[k]), np.asarray(fb[k]), err_msg=str(k))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(model_type="qwen2", attention_bias=True, tie_word_embeddings=True),
        dict(model_type="qwen3", qk_norm=True, attention_bias=True, value_head=True),
    ],
    ids=["llama", "qwen2-tied", "qwen3-bias-value"],
)
def test_round_trip_is_exact(tmp_path: Path, kw: dict) -> None:
    config = _tiny(**kw)
    params = _init(config)
    save_pretrained(tmp_path, config, params)
    assert (tmp_path / "model.safetensors").exists() and not (tmp_path / INDEX_FILE).exists()
    model, loaded = from_pretrained(tmp_path)
    assert model.config == config
    _assert_trees_equal(loaded, params)
    names = set(load_file(tmp_path / "model.safetensors"))
    assert ("lm_head.weight" in names) == (not config.tie_word_embeddings)
    assert ("value_head.weight" in names) == config.value_head


def test_sharded_save_and_load(tmp_path: Path) -> None:
    config = _tiny()
    params = _init(config)
    save_pretrained(tmp_path, config, params, max_shard_bytes=20_000)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    n_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    assert index["metadata"]["total_size"] == n_bytes
    for f in files:
        with safe_open(tmp_path / f, framework="np") as st:
            assert st.metadata() == {"format": "pt"}
    _assert_trees_equal(from_pretrained(tmp_path)[1], params)
    # Re-saving unsharded removes the stale shards and index.
    save_pretrained(tmp_path, config, params)
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["model.safetensors"]
    assert not (tmp_path / INDEX_FILE).exists()


def test_hf_fixture_resaves_bit_identically(tmp_path: Path) -> None:
    """Our export uses HF's names, layouts (transposes) and dtypes exactly."""
    src = FIXTURES / "qwen3"
    model, params = from_pretrained(src)
    save_pretrained(tmp_path, model.config, params)
    ours, theirs = load_file(tmp_path / "model.safetensors"), load_file(src / "model.safetensors")
    assert ours.keys() == theirs.keys()
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    assert ModelConfig.from_hf(json.loads((tmp_path / "config.json").read_text())) == model.config


def test_bfloat16_storage(tmp_path: Path) -> None:
    config = _tiny()
    params = _init(config)
    save_pretrained(tmp_path, config, params, dtype="bfloat16")
    with safe_open(tmp_path / "model.safetensors", framework="np") as st:
        assert st.get_tensor("model.norm.weight").dtype == ml_dtypes.bfloat16
    _, loaded = from_pretrained(tmp_path)  # read back into float32 params
    rounded = jax.tree.map(lambda x: x.astype(jnp.bfloat16).astype(jnp.float32), params)
    _assert_trees_equal(loaded, rounded)
    _, bf = from_pretrained(tmp_path, dtype="bfloat16", param_dtype="bfloat16")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(bf))


def _copy_fixture(tmp_path: Path, family: str = "llama") -> Path:
    dst = tmp_path / family
    shutil.copytree(FIXTURES / family, dst)
    return dst


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    tensors = load_file(d / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(KeyError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        from_pretrained(d)


def test_wrong_shape_names_tensor_and_shapes(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 64), np.float32)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"k_proj\.weight.*\(16, 64\).*\(32, 64\)"):
        from_pretrained(d)


def test_unsupported_architecture_and_missing_files(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "mistral"}))
    with pytest.raises(ValueError, match="unsupported model_type 'mistral'.*llama, qwen2, qwen3"):
        from_pretrained(d)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="safetensors"):
        from_pretrained(d)
    with pytest.raises(FileNotFoundError, match="config.json"):
        from_pretrained(tmp_path / "nowhere")


def test_unexpected_tensors_warn(tmp_path: Path) -> None:
    d = _copy_fixture(tmp_path)
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)  # ignored
    tensors["model.extra.weight"] = np.ones(3, np.float32)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(UserWarning, match="model.extra.weight"):
        from_pretrained(d)


def test_config_from_hf_variants() -> None:
    base = _tiny().to_hf()
    assert ModelConfig.from_hf(base) == _tiny()
    legacy = {**base, "rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert ModelConfig.from_hf(legacy).rope_scaling_dict() == {"rope_type": "linear", "factor": 2.0}
    no_head_dim = {k: v for k, v in base.items() if k != "head_dim"}
    assert ModelConfig.from_hf(no_head_dim).head_dim == 32 // 4
    assert ModelConfig.from_hf(base, dtype="bfloat16").dtype == "bfloat16"
    for bad, match in [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
        ({"use_sliding_window": True}, "sliding"),
        ({"hidden_act": "gelu"}, "gelu"),
        ({"num_key_value_heads": 3}, "multiple"),
    ]:
        with pytest.raises(ValueError, match=match):
            ModelConfig.from_hf({**base, **bad})
    with pytest.raises(ValueError, match="dtype"):
        _tiny(dtype="float64")


def test_hf_names() -> None:
    assert hf_name(("layers_11", "self_attn", "q_norm", "scale")) == (
        "model.layers.11.self_attn.q_norm.weight"
    )
    assert hf_name(("embed_tokens", "embedding")) == "model.embed_tokens.weight"
    assert hf_name(("lm_head", "kernel")) == "lm_head.weight"
    assert hf_name(("layers_0", "self_attn", "q_proj", "bias")) == (
        "model.layers.0.self_attn.q_proj.bias"
    )
