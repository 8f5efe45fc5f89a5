"""Language-model policy stack for token-rollout RL (Llama / Qwen2 / Qwen3 in JAX).

Model and checkpoints: config.py, model.py, checkpoint.py; multi-device: sharding.py;
adapters: lora.py; generation and log-probs: sampling.py. See docs/lm.md.
"""

from jaxrl.lm.checkpoint import from_pretrained, save_pretrained
from jaxrl.lm.config import SUPPORTED_MODEL_TYPES, ModelConfig
from jaxrl.lm.lora import LoRAConfig, apply_lora, init_lora, load_lora, merge_lora, save_lora
from jaxrl.lm.model import KVCache, Transformer, init_cache, lm_head_weight
from jaxrl.lm.sampling import (
    SampleOutput,
    generate,
    prefill,
    sample_from_cache,
    sample_logits,
    token_logprobs,
    top_k_filter,
    top_p_filter,
)
from jaxrl.lm.sharding import (
    DEFAULT_RULES,
    batch_sharding,
    cache_sharding,
    make_mesh,
    param_shardings,
    shard_params,
)
from jaxrl.lm.tokenizer import (
    CharTokenizer,
    HFTokenizer,
    Tokenizer,
    decode_completions,
    encode_batch_left_padded,
    load_tokenizer,
    save_char_tokenizer,
)

__all__ = [
    "DEFAULT_RULES",
    "SUPPORTED_MODEL_TYPES",
    "KVCache",
    "LoRAConfig",
    "ModelConfig",
    "Transformer",
    "apply_lora",
    "batch_sharding",
    "cache_sharding",
    "from_pretrained",
    "init_cache",
    "init_lora",
    "load_lora",
    "lm_head_weight",
    "make_mesh",
    "merge_lora",
    "param_shardings",
    "save_lora",
    "save_pretrained",
    "shard_params",
    # sampling.py
    "SampleOutput",
    "sample_from_cache",
    "generate",
    "prefill",
    "sample_logits",
    "token_logprobs",
    "top_k_filter",
    "top_p_filter",
    # tokenizer.py
    "CharTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "decode_completions",
    "encode_batch_left_padded",
    "load_tokenizer",
    "save_char_tokenizer",
]
