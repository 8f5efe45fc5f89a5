"""Decoder-only transformer (Llama / Qwen2 / Qwen3) in flax.linen, with a KV cache.

What lives here: the network (`Transformer`), its KV cache (`KVCache`, `init_cache`) and
`lm_head_weight`. What does not: weight loading (checkpoint.py), sampling and log-prob
computation (sampling.py), sharding rules (sharding.py), adapters (lora.py).

Parameter tree (flax names, HF names in comments; Dense kernels are HF weights transposed):
    embed_tokens/embedding                      model.embed_tokens.weight  (vocab, hidden)
    layers_{i}/input_layernorm/scale            model.layers.{i}.input_layernorm.weight
    layers_{i}/self_attn/{q,k,v,o}_proj/kernel  model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
    layers_{i}/self_attn/{q,k}_norm/scale       (qwen3) model.layers.{i}.self_attn.{q,k}_norm.weight
    layers_{i}/post_attention_layernorm/scale   model.layers.{i}.post_attention_layernorm.weight
    layers_{i}/mlp/{gate,up,down}_proj/kernel   model.layers.{i}.mlp.{gate,up,down}_proj.weight
    norm/scale                                  model.norm.weight
    lm_head/kernel                              lm_head.weight (absent when embeddings are tied)
    value_head/{kernel,bias}                    (jaxrl only) value_head.{weight,bias}

Padding convention: prompts are LEFT-padded; `attention_mask` is True for real tokens.
Rotary positions count real tokens only, so a padded row sees exactly the positions the
unpadded sequence would.
"""

from __future__ import annotations

import math
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.lm.config import ModelConfig
from jaxrl.nn.layers import Dense

# Finite "minus infinity" for masked attention scores: rows with no visible key (padding
# queries) get a uniform softmax instead of NaN, and their outputs are ignored anyway.
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)
_INIT = nn.initializers.normal(stddev=0.02)


@flax.struct.dataclass
class KVCache:
    """Per-layer keys/values for incremental decoding.

    k:     tuple with one (batch, num_kv_heads, head_dim, max_len) array per layer: keys
           TRANSPOSED (length last), stored after rotary embedding.
    v:     tuple with one (batch, num_kv_heads, max_len, head_dim) array per layer.
    Both in the compute dtype. Why this layout (measured on CPU, see docs/lm_sampling.md):
    one array per layer, not one stacked array, so a layer's attention reads its cache
    directly instead of slicing a copy out of the stack every step; (batch, kv head)
    leading so both attention contractions are plain batched matmuls, q @ K^T over
    head_dim and probs @ V over length, with their contracted dimension where the matmul
    wants it, so XLA never transposes (copies) the cache; a decode step writes one
    column of K^T and one row of V per (batch, kv head) in place.
    index: int32 scalar, number of slots already written (shared by the whole batch).
    mask:  bool (batch, max_len), True where a written slot holds a real (non-pad) token.
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    index: jax.Array
    mask: jax.Array


def init_cache(config: ModelConfig, batch: int, max_len: int) -> KVCache:
    """Empty cache for `batch` sequences of up to `max_len` tokens (prompt + generation)."""
    k_shape = (batch, config.num_key_value_heads, config.head_dim, max_len)
    v_shape = (batch, config.num_key_value_heads, max_len, config.head_dim)
    layers = range(config.num_hidden_layers)
    return KVCache(
        k=tuple(jnp.zeros(k_shape, config.compute_dtype) for _ in layers),
        v=tuple(jnp.zeros(v_shape, config.compute_dtype) for _ in layers),
        index=jnp.zeros((), jnp.int32),
        mask=jnp.zeros((batch, max_len), jnp.bool_),
    )


def lm_head_weight(params: Any) -> jax.Array:
    """Output projection (hidden, vocab): `lm_head` kernel, or the tied embedding transposed.

    Accepts the full variables dict ({"params": ...}) or the inner params dict.
    """
    p = params.get("params", params)
    if "lm_head" in p:
        return p["lm_head"]["kernel"]
    return p["embed_tokens"]["embedding"].T


# -- rotary embeddings --------------------------------------------------------------------


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse frequencies theta^(-2i/d), i < d/2 (RoFormer, Su et al. 2021, eq. 15).

    Optional scaling: "linear" divides all frequencies by `factor` (position interpolation,
    Chen et al. 2023); "llama3" divides only low frequencies and blends the middle band
    (Llama 3 report, Meta 2024, "RoPE scaling"), as HF's `rope_type="llama3"`.
    """
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
    inv = inv.astype(np.float32)
    rs = config.rope_scaling_dict()
    if rs is None:
        return inv
    factor = float(rs["factor"])
    if rs["rope_type"] == "linear":
        return (inv / factor).astype(np.float32)
    # llama3: wavelengths longer than old_ctx/low_freq_factor are scaled by 1/factor,
    # shorter than old_ctx/high_freq_factor kept, and the band between interpolated with
    # smooth = (old_ctx / wavelen - low) / (high - low).
    low, high = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    old_ctx = float(rs["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, blended, scaled).astype(np.float32)


def rope_cos_sin(positions: jax.Array, inv_freq: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """cos and sin of the rotary angles position*inv_freq, float32 (batch, seq, 1, head_dim/2).

    Computed once per forward pass and shared by every layer's queries and keys.
    """
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # (b, s, d/2)
    return jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate (batch, seq, heads, head_dim) by the angles of ``rope_cos_sin``, HF "rotate_half"
    layout.

    Pairs are (x[i], x[i + d/2]): out = x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1].
    Computed in float32 and cast back.
    """
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


# -- layers -------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * scale (Zhang & Sennrich 2019); statistics in float32."""

    eps: float
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        # HF casts back to the input dtype before multiplying by the weight.
        return xf.astype(self.dtype) * scale.astype(self.dtype)


def _dense(config: ModelConfig, features: int, use_bias: bool, name: str) -> Dense:
    return Dense(
        features,
        use_bias=use_bias,
        dtype=config.compute_dtype,
        param_dtype=config.params_dtype,
        kernel_init=_INIT,
        name=name,
    )


class Attention(nn.Module):
    """Grouped-query self-attention (Ainslie et al. 2023) with rotary embeddings.

    `kv` is None (no cache: keys are this call's tokens) or this layer's cache arrays
    (k (batch, kv_heads, head_dim, max_len), v (batch, kv_heads, max_len, head_dim)) plus
    the write `index`; the new keys/values are written at [index, index+seq) and the
    updated pair is returned.
    `rope` is the (cos, sin) pair of ``rope_cos_sin`` for this call's positions and
    `allowed` the boolean (batch, seq, key_len) visibility matrix.
    `query_span` (start, stop): only positions [start, stop) ask queries, so the output is
    (batch, stop - start, hidden); keys and values still cover every position.
    """

    config: ModelConfig
    query_span: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, x, rope, allowed, kv=None, index=None):
        c = self.config
        b, s, _ = x.shape
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        cos, sin = rope
        lo, hi = self.query_span or (0, s)
        x_q, cos_q, sin_q, allowed = x[:, lo:hi], cos[:, lo:hi], sin[:, lo:hi], allowed[:, lo:hi]
        s_q = hi - lo
        q = _dense(c, nh * hd, c.attention_bias, "q_proj")(x_q).reshape(b, s_q, nh, hd)
        k = _dense(c, nkv * hd, c.attention_bias, "k_proj")(x).reshape(b, s, nkv, hd)
        v = _dense(c, nkv * hd, c.attention_bias, "v_proj")(x).reshape(b, s, nkv, hd)
        if c.qk_norm:  # Qwen3: RMSNorm over head_dim of each head, before rotary
            q = RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name="q_norm")(q)
            k = RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name="k_norm")(k)
        q = apply_rope(q, cos_q, sin_q)
        k = apply_rope(k, cos, sin)

        # The cache layout (see KVCache): K^T (b, kv, hd, len), V (b, kv, len, hd).
        k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
        new_kv = None
        if kv is not None:
            k_cache, v_cache = kv
            k_cache = jax.lax.dynamic_update_slice(
                k_cache, k.astype(k_cache.dtype), (0, 0, 0, index)
            )
            v_cache = jax.lax.dynamic_update_slice(
                v_cache, v.astype(v_cache.dtype), (0, 0, index, 0)
            )
            new_kv = (k_cache, v_cache)
            k, v = k_cache.astype(c.compute_dtype), v_cache.astype(c.compute_dtype)

        # Query head h = g_idx * groups + j uses kv head g_idx (HF `repeat_kv` order); the
        # groups share their kv head, K/V are never repeated. Both contractions are written
        # as batched matmuls over (batch, kv head) with rows (group, query) -- q @ K^T
        # contracting head_dim, probs @ V contracting length -- so XLA runs them as plain
        # [M, K] x [K, N] matmuls straight from the cache layout (no transposed operand).
        g = c.num_groups
        q = q.reshape(b, s_q, nkv, g, hd).transpose(0, 2, 3, 1, 4).reshape(b, nkv, g * s_q, hd)
        batch_dims = ((0, 1), (0, 1))
        scores = jax.lax.dot_general(
            q, k, (((3,), (2,)), batch_dims), preferred_element_type=jnp.float32
        ).reshape(b, nkv, g, s_q, -1)
        scores = scores * (hd**-0.5)  # scaled dot product (Vaswani et al. 2017)
        scores = jnp.where(allowed[:, None, None, :, :], scores, _MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1).astype(c.compute_dtype)
        probs = probs.reshape(b, nkv, g * s_q, -1)
        out = jax.lax.dot_general(probs, v, (((3,), (2,)), batch_dims))  # (b, nkv, g*s, hd)
        out = out.reshape(b, nkv, g, s_q, hd).transpose(0, 3, 1, 2, 4).reshape(b, s_q, nh * hd)
        out = _dense(c, c.hidden_size, c.o_proj_bias, "o_proj")(out)
        return out, new_kv


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x)) (Shazeer 2020)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        gate = _dense(c, c.intermediate_size, False, "gate_proj")(x)
        up = _dense(c, c.intermediate_size, False, "up_proj")(x)
        return _dense(c, c.hidden_size, False, "down_proj")(jax.nn.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm decoder layer: x += attn(norm(x)); x += mlp(norm(x)).

    `query_span` (start, stop): compute the layer's output for positions [start, stop)
    only (see `Attention`); the last layer of `Transformer(..., output_span=...)`."""

    config: ModelConfig
    query_span: tuple[int, int] | None = None

    @nn.compact
    def __call__(self, x, rope, allowed, kv=None, index=None):
        c = self.config
        norm = lambda name: RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name=name)
        h, new_kv = Attention(c, self.query_span, name="self_attn")(
            norm("input_layernorm")(x), rope, allowed, kv, index
        )
        lo, hi = self.query_span or (0, x.shape[1])
        x = x[:, lo:hi] + h
        x = x + MLP(c, name="mlp")(norm("post_attention_layernorm")(x))
        return x, new_kv


def default_positions(attention_mask: jax.Array, offset: jax.Array | int = 0) -> jax.Array:
    """Rotary positions that count real tokens only: offset + cumsum(mask) - 1, clipped at 0."""
    pos = jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1
    return jnp.maximum(pos, 0) + jnp.asarray(offset, jnp.int32)[..., None]


def _checked_span(span: Any, seq: int) -> tuple[int, int]:
    """`Transformer`'s `output_span` as a (start, stop) tuple of static ints with
    0 <= start < stop <= seq; anything else raises, naming the rule."""
    if isinstance(span, (tuple, list)) and len(span) == 2:
        start, stop = span
        if isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= seq:
            return start, stop
    raise ValueError(
        f"output_span must be static ints (start, stop) with 0 <= start < stop <= seq "
        f"({seq}), got {span!r}"
    )


class LMHead(nn.Module):
    """Untied output projection; returns its (hidden, vocab) kernel (HF `lm_head.weight`.T)."""

    vocab_size: int
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, hidden: int) -> jax.Array:
        return self.param("kernel", _INIT, (hidden, self.vocab_size), self.param_dtype)


class Transformer(nn.Module):
    """Causal LM over `config`; see the module docstring for parameter names.

    remat: recompute each layer's activations in the backward pass (less memory, more
    compute); parameter names are unchanged.
    """

    config: ModelConfig
    remat: bool = False

    @nn.compact
    def __call__(
        self,
        tokens: jax.Array,
        *,
        positions: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        cache: KVCache | None = None,
        return_hidden: bool = False,
        output_span: tuple[int, int] | None = None,
    ):
        """Forward pass.

        tokens: int32 (batch, seq). attention_mask: bool (batch, seq), True for real tokens
        (default all True). positions: int32 (batch, seq), default counts real tokens,
        continuing from the cache's count when a cache is given.

        output_span: static (start, stop); outputs (logits, hidden states, values) only for
        positions [start, stop), and the last layer computes its queries, attention and
        MLP there only (every layer's keys and values, the cache included, still cover all
        positions). The same values as slicing the full outputs, with less work when few
        positions are needed: re-scoring a completion after a prompt skips the last
        layer's work on the prompt, a large share of a learning step when completions are
        short next to their prompts (benchmarks/grpo_step.py measures it).

        Returns logits float32 (batch, seq, vocab) -- or the final normed hidden states
        (batch, seq, hidden) if return_hidden -- then the new cache if one was given, then
        values float32 (batch, seq) if config.value_head. A single output is returned bare,
        several as a tuple in that order.
        """
        c = self.config
        b, s = tokens.shape
        if output_span is not None:
            output_span = _checked_span(output_span, s)
        if attention_mask is None:
            attention_mask = jnp.ones((b, s), jnp.bool_)
        attention_mask = attention_mask.astype(jnp.bool_)

        if cache is None:
            if positions is None:
                positions = default_positions(attention_mask)
            causal = jnp.tril(jnp.ones((s, s), jnp.bool_))
            allowed = causal[None] & attention_mask[:, None, :]
            index = None
        else:
            index = cache.index
            if positions is None:
                seen = jnp.sum(cache.mask, axis=-1, dtype=jnp.int32)  # real tokens so far
                positions = default_positions(attention_mask, seen)
            key_mask = jax.lax.dynamic_update_slice(cache.mask, attention_mask, (0, index))
            key_slot = jnp.arange(cache.mask.shape[1])
            query_slot = index + jnp.arange(s)
            allowed = (key_slot[None, :] <= query_slot[:, None])[None] & key_mask[:, None, :]

        embed = nn.Embed(
            c.vocab_size,
            c.hidden_size,
            dtype=c.compute_dtype,
            param_dtype=c.params_dtype,
            embedding_init=_INIT,
            name="embed_tokens",
        )
        x = embed(tokens).astype(c.compute_dtype)
        rope = rope_cos_sin(positions, rope_inv_freq(c))
        block_cls = nn.remat(Block) if self.remat else Block
        new_k, new_v = [], []
        for i in range(c.num_hidden_layers):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            span = output_span if i == c.num_hidden_layers - 1 else None
            x, kv = block_cls(c, span, name=f"layers_{i}")(x, rope, allowed, kv, index)
            if kv is not None:
                new_k.append(kv[0])
                new_v.append(kv[1])
        x = RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name="norm")(x)

        if c.tie_word_embeddings:
            w = embed.embedding.T
        else:  # created even when return_hidden, so init always makes the full tree
            w = LMHead(c.vocab_size, c.params_dtype, name="lm_head")(c.hidden_size)
        if return_hidden:
            out = x
        else:
            out = jnp.einsum(
                "bsh,hv->bsv", x, w.astype(c.compute_dtype), preferred_element_type=jnp.float32
            )

        outputs: list[Any] = [out]
        if cache is not None:
            outputs.append(KVCache(k=tuple(new_k), v=tuple(new_v), index=index + s, mask=key_mask))
        if c.value_head:
            values = Dense(
                1,
                dtype=jnp.float32,
                param_dtype=c.params_dtype,
                kernel_init=nn.initializers.zeros,
                name="value_head",
            )(x.astype(jnp.float32))
            outputs.append(values[..., 0])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
