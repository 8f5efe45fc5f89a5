"""SFT hyperparameters and their validation.

Budget units: `total_steps` counts training *samples* (prompt/answer sequences) per
agent, the SFT meaning of the CLI's `--total-steps`; one update trains on `batch_size`
of them, so a run makes `total_steps // batch_size` updates.
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.lm.config import SUPPORTED_DTYPES
from jaxrl.lm.lora import LINEAR_TARGETS

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = ("lr", "weight_decay", "max_grad_norm")
LR_SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning of a causal LM on a task's (prompt, answer) pairs.

    Teacher forcing on `prompt + answer + eos`, loss on the answer and eos tokens only.
    The defaults are a short warm start on 3-digit addition (640 updates, ~95 s of training
    on a 2-core CPU; held-out exact match 0.59 at seed 0, so RL has room); the slow
    test `tests/algorithms/test_sft_learning.py` documents a budget that reaches >= 0.9
    held-out exact match.

    Model: `model=None` builds a small random Llama with a character tokenizer from the
    size fields below; a directory in Hugging Face layout (config.json, safetensors,
    tokenizer.json), or a run directory holding one in `model/`, is loaded instead and
    the size fields are ignored. `lora_rank=0` trains every parameter; `> 0` trains LoRA
    adapters (Hu et al. 2021) on `lora_targets` and keeps the base frozen.
    """

    # -- data
    task: str = "addition"
    """Task: "addition" or "jsonl:PATH" (one {"prompt", "answer"} object per line)."""
    digits: int = 3
    """Addition: digits of each operand (the difficulty knob)."""
    num_eval: int = 256
    """Held-out prompts for eval_accuracy (jsonl: at most a fifth of the file)."""
    split_seed: int = 0
    """Which prompts are held out; independent of the run's seed."""
    max_len: int | None = None
    """Tokens per training row (None: the task's longest example)."""
    # -- budget (samples per agent; see the module docstring)
    total_steps: int = 40_960
    """Training samples (prompt/answer sequences) per agent."""
    batch_size: int = 64
    """Samples per update."""
    # -- model
    model: str | None = None
    """HF-layout model directory or SFT run directory to start from (None: random tiny Llama)."""
    num_layers: int = 2
    """Random model: transformer layers."""
    hidden_size: int = 128
    """Random model: hidden size."""
    num_heads: int = 4
    """Random model: attention heads."""
    num_kv_heads: int = 4
    """Random model: key/value heads (grouped-query attention when fewer)."""
    mlp_size: int = 512
    """Random model: MLP intermediate size."""
    context_len: int = 128
    """Random model: max_position_embeddings."""
    dtype: str = "float32"
    """Compute dtype (parameters stay float32)."""
    remat: bool = False
    """Recompute layer activations in the backward pass (less memory, more compute)."""
    logprob_chunk: int = 512
    """Tokens per vocabulary-projection block of the loss (no full logits)."""
    # -- optimiser: clip(global norm) -> Adam -> decoupled weight decay -> -lr * schedule
    lr: float = 2e-3
    """Peak learning rate (AdamW)."""
    weight_decay: float = 0.1
    """Decoupled weight decay (AdamW)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    adam_b1: float = 0.9
    """Adam beta1."""
    adam_b2: float = 0.98
    """Adam beta2."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    warmup: float = 0.05
    """Fraction of the updates with a linear learning-rate warmup."""
    lr_schedule: str = "cosine"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""
    # -- LoRA
    lora_rank: int = 0
    """LoRA rank (0: full fine-tuning; > 0: adapters on a frozen base)."""
    lora_alpha: float = 16.0
    """LoRA scale numerator (the update is alpha / rank * B A)."""
    lora_targets: tuple[str, ...] = ("all-linear",)
    """Modules that get adapters ("all-linear" or projection names)."""
    # -- mesh: data x fsdp x tensor; data gets the devices fsdp and tensor leave
    mesh_fsdp: int = 1
    """Devices of the mesh's fsdp axis (parameters sharded ZeRO-3 style)."""
    mesh_tensor: int = 1
    """Devices of the mesh's tensor axis (heads and MLP split); data gets the rest."""
    # -- evaluation (held-out greedy exact match)
    eval_batch_size: int = 256
    """Prompts per greedy-decoding batch in evaluation."""

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> SFTConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check(isinstance(self.task, str) and bool(self.task), "task", self.task, "a task name")
        cfg.check_positive(self, "digits", "num_eval", "total_steps", "batch_size")
        cfg.check(self.split_seed >= 0, "split_seed", self.split_seed, "an integer >= 0")
        cfg.check(
            self.max_len is None or self.max_len >= 2, "max_len", self.max_len, "None or >= 2"
        )
        cfg.check(
            self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= batch_size={self.batch_size} (one update; total_steps counts samples)",
        )
        cfg.check_positive(self, "num_layers", "hidden_size", "num_heads", "num_kv_heads")
        cfg.check_positive(self, "mlp_size", "context_len", "logprob_chunk", "eval_batch_size")
        cfg.check(
            self.hidden_size % self.num_heads == 0
            and (self.hidden_size // self.num_heads) % 2 == 0,
            "num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size} leaving an even head size",
        )
        cfg.check(
            self.num_heads % self.num_kv_heads == 0,
            "num_kv_heads",
            self.num_kv_heads,
            f"a divisor of num_heads={self.num_heads}",
        )
        cfg.check_choice(self, "dtype", SUPPORTED_DTYPES)
        cfg.check_positive(self, "lr", "max_grad_norm", "adam_eps")
        cfg.check(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        cfg.check_range(self, "adam_b1", 0.0, 1.0, closed=False)
        cfg.check_range(self, "adam_b2", 0.0, 1.0, closed=False)
        cfg.check(0 <= self.warmup < 1, "warmup", self.warmup, "a fraction in [0, 1)")
        cfg.check_choice(self, "lr_schedule", LR_SCHEDULES)
        cfg.check(self.lora_rank >= 0, "lora_rank", self.lora_rank, ">= 0 (0: full fine-tuning)")
        cfg.check_positive(self, "lora_alpha")
        allowed = ("all-linear", *LINEAR_TARGETS)
        cfg.check(
            len(self.lora_targets) > 0
            and all(t in allowed for t in self.lora_targets)
            and ("all-linear" not in self.lora_targets or len(self.lora_targets) == 1),
            "lora_targets",
            self.lora_targets,
            f"'all-linear' or a list of {list(LINEAR_TARGETS)}",
        )
        cfg.check_positive(self, "mesh_fsdp", "mesh_tensor")
        return self


def default_config() -> SFTConfig:
    """The default SFT config: a short warm start on 3-digit addition."""
    return SFTConfig()
