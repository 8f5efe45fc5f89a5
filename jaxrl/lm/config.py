"""Model configuration for the decoder-only LM policy stack.

`ModelConfig` is a frozen (hashable, jit-static) description of a Llama / Qwen2 / Qwen3
decoder, read from and written back to a Hugging Face `config.json` dict. It holds only
architecture and dtype choices; weights live in checkpoint.py, the network in model.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp

SUPPORTED_MODEL_TYPES: tuple[str, ...] = ("llama", "qwen2", "qwen3")
SUPPORTED_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
# rope_scaling["rope_type"] values we implement; anything else is rejected, not ignored.
SUPPORTED_ROPE_TYPES: tuple[str, ...] = ("default", "linear", "llama3")

_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
# Non-HF key we add to config.json so a saved value head round-trips.
VALUE_HEAD_KEY = "jaxrl_value_head"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Llama-family decoder (see module docstring)."""

    model_type: str  # "llama" | "qwen2" | "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int  # defaults to hidden_size // num_attention_heads when absent in HF config
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # q/k/v biases (always on for qwen2; o_proj too for llama/qwen3)
    qk_norm: bool  # per-head RMSNorm on q and k before rotary (qwen3)
    value_head: bool = False  # optional scalar value head (critics / reward models)
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    # HF `rope_scaling` as sorted (key, value) pairs (hashable); None = plain RoPE.
    rope_scaling: tuple[tuple[str, Any], ...] | None = None

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived ------------------------------------------------------------------------
    @property
    def o_proj_bias(self) -> bool:
        """HF Qwen2 hard-codes bias on q/k/v only; Llama/Qwen3 put `attention_bias` on o too."""
        return self.attention_bias and self.model_type != "qwen2"

    @property
    def num_groups(self) -> int:
        """Query heads sharing one key/value head (grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @property
    def params_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.param_dtype)

    def rope_scaling_dict(self) -> dict[str, Any] | None:
        return None if self.rope_scaling is None else dict(self.rope_scaling)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    # -- HF conversion ------------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_config: dict, **overrides: Any) -> ModelConfig:
        """Build from a HF `config.json` dict; `overrides` (e.g. dtype=...) win.

        Raises ValueError for unsupported architectures or features we would silently
        get wrong (sliding-window attention, MLP biases, unknown rope scaling, non-SiLU).
        """
        mt = hf_config.get("model_type")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {mt!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        act = hf_config.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(f"unsupported hidden_act {act!r}; only 'silu' (SwiGLU) is supported")
        if hf_config.get("mlp_bias", False):
            raise ValueError("mlp_bias=True is not supported")
        if hf_config.get("use_sliding_window", False):
            raise ValueError("sliding-window attention (use_sliding_window=True) is not supported")
        # transformers >= 5 nests rope_theta/scaling in `rope_parameters`; older configs use
        # top-level `rope_theta` + `rope_scaling`. Accept both.
        rope_params = dict(hf_config.get("rope_parameters") or {})
        rope_theta = hf_config.get("rope_theta") or rope_params.get("rope_theta", 10000.0)
        partial = hf_config.get("partial_rotary_factor") or rope_params.get(
            "partial_rotary_factor", 1.0
        )
        if partial != 1.0:
            raise ValueError(f"partial rotary embeddings are not supported ({partial=})")
        max_pos = int(hf_config.get("max_position_embeddings", 4096))
        rope_scaling = _normalise_rope_scaling(
            hf_config.get("rope_scaling") or rope_params or None, max_pos
        )
        n_heads = int(hf_config["num_attention_heads"])
        hidden = int(hf_config["hidden_size"])
        head_dim = hf_config.get("head_dim") or hidden // n_heads
        fields: dict[str, Any] = dict(
            model_type=mt,
            vocab_size=int(hf_config["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(hf_config["intermediate_size"]),
            num_hidden_layers=int(hf_config["num_hidden_layers"]),
            num_attention_heads=n_heads,
            num_key_value_heads=int(hf_config.get("num_key_value_heads") or n_heads),
            head_dim=int(head_dim),
            rope_theta=float(rope_theta),
            rms_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
            attention_bias=True if mt == "qwen2" else bool(hf_config.get("attention_bias", False)),
            qk_norm=mt == "qwen3",
            value_head=bool(hf_config.get(VALUE_HEAD_KEY, False)),
            rope_scaling=rope_scaling,
        )
        fields.update(overrides)
        if isinstance(fields.get("rope_scaling"), dict):
            fields["rope_scaling"] = _normalise_rope_scaling(fields["rope_scaling"], max_pos)
        return cls(**fields)

    def to_hf(self) -> dict:
        """HF `config.json` dict that transformers (and `from_hf`) can load."""
        d: dict[str, Any] = {
            "architectures": [_ARCHITECTURES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling_dict(),
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": self.param_dtype,
        }
        if self.model_type != "qwen2":  # qwen2 has no such key: its q/k/v biases are fixed
            d["attention_bias"] = self.attention_bias
        if self.model_type == "qwen2":
            d["use_sliding_window"] = False
        if self.value_head:
            d[VALUE_HEAD_KEY] = True
        return d


def _normalise_rope_scaling(
    rs: dict | None, max_position_embeddings: int
) -> tuple[tuple[str, Any], ...] | None:
    """Validate HF rope scaling and turn it into hashable sorted pairs (None if plain RoPE)."""
    if rs is None:
        return None
    rs = dict(rs)
    if any(isinstance(v, dict) for v in rs.values()):
        raise ValueError("per-layer-type rope parameters are not supported")
    rope_type = rs.pop("rope_type", rs.pop("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"unsupported rope_scaling type {rope_type!r}; supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return None
    rs.pop("rope_theta", None)
    rs.pop("partial_rotary_factor", None)
    if "factor" not in rs:
        raise ValueError(f"rope_scaling of type {rope_type!r} needs a 'factor'")
    out: dict[str, Any] = {"rope_type": rope_type, "factor": float(rs["factor"])}
    if rope_type == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            if key not in rs:
                raise ValueError(f"llama3 rope_scaling needs {key!r}")
            out[key] = float(rs[key])
        # HF falls back to max_position_embeddings when this is absent.
        out["original_max_position_embeddings"] = int(
            rs.get("original_max_position_embeddings", max_position_embeddings)
        )
    return tuple(sorted(out.items()))


def _validate(c: ModelConfig) -> None:
    if c.model_type not in SUPPORTED_MODEL_TYPES:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        raise ValueError(f"unsupported model_type {c.model_type!r}; supported: {supported}")
    for name in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ):
        v = getattr(c, name)
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if c.num_attention_heads % c.num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({c.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({c.num_key_value_heads})"
        )
    if c.head_dim % 2:
        raise ValueError(f"head_dim must be even for rotary embeddings, got {c.head_dim}")
    if not (c.rope_theta > 0 and math.isfinite(c.rope_theta)):
        raise ValueError(f"rope_theta must be positive, got {c.rope_theta}")
    if not c.rms_norm_eps > 0:
        raise ValueError(f"rms_norm_eps must be positive, got {c.rms_norm_eps}")
    for name in ("dtype", "param_dtype"):
        if getattr(c, name) not in SUPPORTED_DTYPES:
            raise ValueError(
                f"{name} must be one of {', '.join(SUPPORTED_DTYPES)}, got {getattr(c, name)!r}"
            )
