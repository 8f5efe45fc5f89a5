"""The JAX Transformer reproduces Hugging Face transformers' logits, and its cache/padding
paths reproduce its own full forward pass.

Fixtures (tests/lm/fixtures/<family>/) come from make_fixtures.py: tiny random HF models
plus `tokens.npy` and HF's float32 `reference_logits.npy`, so no torch is needed here.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.lm import ModelConfig, Transformer, from_pretrained, init_cache, lm_head_weight

FIXTURES = Path(__file__).parent / "fixtures"
FAMILIES = ["llama", "qwen2", "qwen3"]


@functools.cache
def _load(family: str, dtype: str = "float32"):
    return from_pretrained(FIXTURES / family, dtype=dtype)


@functools.cache
def _jit(model: Transformer):
    """Jitted `model.apply` (op-by-op eager dispatch is slow on small CPUs)."""
    return jax.jit(model.apply, static_argnames=("return_hidden",))


def _fixture(family: str) -> tuple[np.ndarray, np.ndarray]:
    d = FIXTURES / family
    return np.load(d / "tokens.npy"), np.load(d / "reference_logits.npy")


def _rel_err(a, b) -> float:
    """max |a - b| / max |b|: relative to the logits' scale, robust to near-zero entries."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_hf_reference(family: str) -> None:
    model, params = _load(family)
    tokens, ref = _fixture(family)
    logits = _jit(model)(params, jnp.asarray(tokens))
    assert logits.dtype == jnp.float32 and logits.shape == ref.shape
    assert _rel_err(logits, ref) < 1e-4


def test_fixture_configs_cover_the_features() -> None:
    cfgs = {f: _load(f)[0].config for f in FAMILIES}
    assert cfgs["llama"].rope_scaling_dict()["rope_type"] == "llama3"
    assert cfgs["qwen2"].tie_word_embeddings and cfgs["qwen2"].attention_bias
    assert cfgs["qwen3"].qk_norm and cfgs["qwen3"].head_dim == 32
    assert all(c.rope_theta != 10000.0 for c in cfgs.values())
    assert all(c.num_key_value_heads < c.num_attention_heads for c in cfgs.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_decoding_matches_full_forward(family: str) -> None:
    model, params = _load(family)
    tokens = jnp.asarray(_fixture(family)[0])
    full = _jit(model)(params, tokens)
    step = jax.jit(lambda p, t, c: model.apply(p, t, cache=c))
    cache = init_cache(model.config, tokens.shape[0], 16)
    logits, cache = step(params, tokens[:, :5], cache)  # prefill
    outs = [logits]
    for t in range(5, tokens.shape[1]):  # then one token at a time
        logits, cache = step(params, tokens[:, t : t + 1], cache)
        outs.append(logits)
    assert int(cache.index) == tokens.shape[1]
    assert _rel_err(jnp.concatenate(outs, axis=1), full) < 1e-5


@pytest.mark.parametrize("family", ["qwen3"])  # masking/positions are family-independent
def test_left_padding_matches_unpadded_sequences(family: str) -> None:
    model, params = _load(family)
    tokens = _fixture(family)[0]
    lengths = [tokens.shape[1], 7]
    seqs = [tokens[0], tokens[1, :7]]
    width = max(lengths)
    padded = np.zeros((2, width), np.int32)
    mask = np.zeros((2, width), bool)
    for i, s in enumerate(seqs):
        padded[i, width - len(s) :] = s
        mask[i, width - len(s) :] = True
    batch_logits = _jit(model)(params, jnp.asarray(padded), attention_mask=jnp.asarray(mask))
    for i, s in enumerate(seqs):
        alone = _jit(model)(params, jnp.asarray(s)[None])[0]
        assert _rel_err(batch_logits[i, width - len(s) :], alone) < 1e-5

    # Same through the cache: padded prefill, then two decode steps.
    cache = init_cache(model.config, 2, width + 2)
    _, cache = _jit(model)(
        params, jnp.asarray(padded), attention_mask=jnp.asarray(mask), cache=cache
    )
    nxt = np.array([[3], [5]], np.int32)
    step_logits, cache = _jit(model)(params, jnp.asarray(nxt), cache=cache)
    for i, s in enumerate(seqs):
        alone = _jit(model)(params, jnp.asarray(np.append(s, nxt[i]))[None])[0, -1]
        assert _rel_err(step_logits[i, -1], alone) < 1e-5


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_bfloat16_compute_is_close(family: str) -> None:
    model, params = _load(family, "bfloat16")
    tokens, ref = _fixture(family)
    assert model.config.dtype == "bfloat16"
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))  # params stay f32
    logits = _jit(model)(params, jnp.asarray(tokens))
    assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()
    assert _rel_err(logits, ref) < 0.08
    assert (np.asarray(logits).argmax(-1) == ref.argmax(-1)).mean() > 0.85
    cache = init_cache(model.config, 2, 16)
    assert all(k.dtype == jnp.bfloat16 for k in cache.k)
    _, cache = _jit(model)(params, jnp.asarray(tokens), cache=cache)


def test_return_hidden_and_lm_head_weight() -> None:
    for family in ("qwen2", "qwen3"):  # tied and untied
        model, params = _load(family)
        tokens = jnp.asarray(_fixture(family)[0])
        hidden = _jit(model)(params, tokens, return_hidden=True)
        assert hidden.shape == (*tokens.shape, model.config.hidden_size)
        w = lm_head_weight(params)
        assert w.shape == (model.config.hidden_size, model.config.vocab_size)
        np.testing.assert_allclose(hidden @ w, _jit(model)(params, tokens), atol=1e-5)


def test_explicit_positions_and_rope_relativity() -> None:
    model, params = _load("qwen3")
    apply = jax.jit(model.apply)
    tokens = jnp.asarray(_fixture("qwen3")[0])
    base = apply(params, tokens)
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    np.testing.assert_array_equal(apply(params, tokens, positions=pos), base)
    # RoPE scores depend only on position differences: a uniform shift changes nothing...
    assert _rel_err(apply(params, tokens, positions=pos + 37), base) < 1e-4
    # ...but stretching the positions does.
    assert _rel_err(apply(params, tokens, positions=2 * pos), base) > 1e-2


def test_value_head_outputs() -> None:
    model, params = from_pretrained(FIXTURES / "qwen2", value_head=True)
    tokens = jnp.asarray(_fixture("qwen2")[0])
    logits, values = _jit(model)(params, tokens)
    assert values.shape == tokens.shape and values.dtype == jnp.float32
    np.testing.assert_array_equal(values, 0.0)  # fresh head on a base LM starts at V = 0
    base_model, base_params = _load("qwen2")
    np.testing.assert_allclose(logits, _jit(base_model)(base_params, tokens))
    cache = init_cache(model.config, 2, 16)
    logits_c, cache, values_c = _jit(model)(params, tokens, cache=cache)
    assert values_c.shape == tokens.shape and int(cache.index) == tokens.shape[1]


def test_jit_vmap_and_remat() -> None:
    model, params = _load("llama")
    tokens = jnp.asarray(_fixture("llama")[0])
    full = _jit(model)(params, tokens)
    per_row = jax.jit(jax.vmap(lambda t: model.apply(params, t[None])[0]))(tokens)
    np.testing.assert_allclose(per_row, full, atol=1e-5)

    remat = Transformer(model.config, remat=True)
    loss = lambda m: lambda p: jnp.mean(jax.nn.log_softmax(m.apply(p, tokens))[..., 0])
    g_plain = jax.jit(jax.grad(loss(model)))(params)
    g_remat = jax.jit(jax.grad(loss(remat)))(params)
    for a, b in zip(jax.tree.leaves(g_plain), jax.tree.leaves(g_remat), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_output_span_equals_slicing_the_full_outputs(family: str) -> None:
    """`output_span` computes the last layer for a span of positions only; logits, hidden
    states, values, the cache and gradients equal those of the full forward, sliced."""
    model, params = _load(family)
    tokens = jnp.asarray(_fixture(family)[0])
    seq = tokens.shape[1]
    apply = jax.jit(model.apply, static_argnames=("return_hidden", "output_span"))
    full = apply(params, tokens)
    for span in ((0, seq), (3, seq - 1), (seq - 1, seq), (0, 1)):
        np.testing.assert_allclose(
            apply(params, tokens, output_span=span), full[:, span[0] : span[1]], atol=1e-5
        )
    hidden = apply(params, tokens, return_hidden=True)
    np.testing.assert_allclose(
        apply(params, tokens, return_hidden=True, output_span=(2, 5)), hidden[:, 2:5], atol=1e-5
    )
    # With a cache (a prefill that only needs its last position): the same cache.
    cache = init_cache(model.config, tokens.shape[0], 16)
    logits_c, cache_full = apply(params, tokens, cache=cache)
    last, cache_span = apply(params, tokens, cache=cache, output_span=(seq - 1, seq))
    np.testing.assert_allclose(last, logits_c[:, -1:], atol=1e-5)
    for a, b in zip(jax.tree.leaves(cache_full), jax.tree.leaves(cache_span), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Gradients through the skipped positions' keys and values (remat too).
    for m in (model, Transformer(model.config, remat=True)):
        grad = lambda span, m=m: jax.jit(  # noqa: E731
            jax.grad(lambda p: jnp.sum(jnp.sin(m.apply(p, tokens, output_span=span))))
        )(params)
        g_full = jax.jit(
            jax.grad(lambda p, m=m: jnp.sum(jnp.sin(m.apply(p, tokens)[:, 3 : seq - 1])))
        )(params)
        for a, b in zip(jax.tree.leaves(grad((3, seq - 1))), jax.tree.leaves(g_full), strict=True):
            assert _rel_err(a, b) < 1e-5


def test_output_span_with_value_head_and_bad_spans() -> None:
    model, params = from_pretrained(FIXTURES / "qwen2", value_head=True)
    params = jax.tree_util.tree_map_with_path(  # a non-zero value head
        lambda path, x: x + 0.1 if "value_head" in jax.tree_util.keystr(path) else x, params
    )
    tokens = jnp.asarray(_fixture("qwen2")[0])
    logits, values = model.apply(params, tokens)
    logits_s, values_s = model.apply(params, tokens, output_span=(1, 4))
    np.testing.assert_allclose(logits_s, logits[:, 1:4], atol=1e-5)
    np.testing.assert_allclose(values_s, values[:, 1:4], atol=1e-5)
    assert np.abs(np.asarray(values_s)).max() > 0
    seq = tokens.shape[1]
    for bad in ((2, 2), (-1, 3), (0, seq + 1), (0.0, 2), 3, (1, 2, 3)):
        with pytest.raises(ValueError, match="output_span"):
            model.apply(params, tokens, output_span=bad)


def test_unsupported_architecture_lists_supported() -> None:
    with pytest.raises(ValueError, match="supported: llama, qwen2, qwen3"):
        ModelConfig.from_hf({"model_type": "gpt2", "vocab_size": 10})


@pytest.mark.optional
@pytest.mark.parametrize("family", FAMILIES)
def test_live_against_transformers(family: str, tmp_path: Path) -> None:
    """Re-run HF on fresh tokens (incl. a left-padded batch), and load our export in HF."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from jaxrl.lm import save_pretrained

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        FIXTURES / family, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    model, params = _load(family)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 256, (3, 20)).astype(np.int64)
    mask = np.ones_like(tokens)
    mask[0, :6] = 0  # left padding; HF positions = cumsum(mask) - 1 as in generate()
    pos = np.clip(mask.cumsum(-1) - 1, 0, None)
    with torch.no_grad():
        ref = hf(
            input_ids=torch.from_numpy(tokens),
            attention_mask=torch.from_numpy(mask),
            position_ids=torch.from_numpy(pos),
        ).logits.numpy()
    ours = _jit(model)(params, jnp.asarray(tokens, jnp.int32), attention_mask=jnp.asarray(mask))
    real = mask.astype(bool)
    assert _rel_err(np.asarray(ours)[real], ref[real]) < 1e-4

    save_pretrained(tmp_path, model.config, params, max_shard_bytes=100_000)  # sharded export
    hf2 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32)
    with torch.no_grad():
        ref2 = hf2(input_ids=torch.from_numpy(tokens[1:])).logits.numpy()
    assert _rel_err(ref2, ref[1:]) < 1e-5


@pytest.mark.optional
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_live_attention_bias_variants(family: str, tmp_path: Path) -> None:
    """attention_bias=True puts biases on q/k/v *and* o_proj for llama/qwen3 (not qwen2)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cls = {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config}[family]
    config = cls(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=1, attention_bias=True,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(0.2 * torch.randn_like(p) + (1.0 if "norm" in name else 0.0))
    hf.save_pretrained(tmp_path)
    tokens = np.random.default_rng(0).integers(0, 128, (2, 9))
    with torch.no_grad():
        ref = hf(input_ids=torch.from_numpy(tokens)).logits.numpy()
    model, params = from_pretrained(tmp_path)
    assert model.config.o_proj_bias
    assert _rel_err(model.apply(params, jnp.asarray(tokens, jnp.int32)), ref) < 1e-4
