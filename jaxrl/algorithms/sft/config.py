"""SFT hyperparameters and their validation.

Budget units: `total_steps` counts training *samples* (prompt/answer sequences) per
agent, the SFT meaning of the CLI's `--total-steps`; one update trains on `batch_size`
of them, so a run makes `total_steps // batch_size` updates. The task, model, LoRA,
mesh and optimiser fields are every language-model algorithm's (`LMConfig`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.algorithms.lm_common import LR_SCHEDULES, LMConfig

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = ("lr", "weight_decay", "max_grad_norm")

__all__ = ["LR_SCHEDULES", "SWEEPABLE", "SFTConfig", "default_config"]


@dataclasses.dataclass(frozen=True)
class SFTConfig(LMConfig):
    """Supervised fine-tuning of a causal LM on a task's (prompt, answer) pairs.

    Teacher forcing on `prompt + answer + eos`, loss on the answer and eos tokens only.
    The defaults make a warm start for RL on 3-digit addition: a constant learning rate
    of 1e-3 until the running greedy exact match of the training batches reaches 0.3
    (`stop_at_train_accuracy`), at most 128,000 samples. Stopping on accuracy rather
    than after a fixed budget is what makes the warm start the same on every seed: the
    loss sits on a plateau until the model learns to carry, and when it leaves depends
    on the seed and even the CPU's rounding (a fixed budget left some seeds near zero
    held-out exact match and others nearly solved), while GRPO needs some reward to
    work from and room to improve. The constant rate matters too: a model annealed to a
    zero learning rate sits where GRPO's steps only hurt held-out prompts
    (benchmarks/notes, "GRPO learning"; the warm start's own result is
    `sft_addition_default` in benchmarks/results). `stop_at_train_accuracy=None` trains the
    whole budget; 128,000 samples reach >= 0.9 held-out exact match
    (`tests/algorithms/test_sft_learning.py`). Model, LoRA, mesh and optimiser fields: see
    `LMConfig`.
    """

    max_len: int | None = None
    """Tokens per training row (None: the task's longest example)."""
    # -- budget (samples per agent; see the module docstring)
    total_steps: int = 128_000
    """Training samples (prompt/answer sequences) per agent (a cap when
    `stop_at_train_accuracy` stops the run earlier)."""
    batch_size: int = 64
    """Samples per update."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    lr_schedule: str = "constant"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""
    # -- warm-start stop
    stop_at_train_accuracy: float | None = 0.3
    """Stop an agent once its running training accuracy reaches this (None: never).
    Training accuracy is greedy decoding's exact match on each training batch, which
    teacher forcing gives for free (every answer token is the argmax;
    `losses.greedy_exact_match`), averaged over updates with decay
    `train_accuracy_decay`. A stopped agent keeps its parameters while the others of a
    vmapped run go on; the run ends when every agent has stopped."""
    train_accuracy_decay: float = 0.9
    """EMA decay of the running training accuracy (~1/(1-decay) updates of memory)."""

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> SFTConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "batch_size")
        cfg.check(
            self.max_len is None or self.max_len >= 2, "max_len", self.max_len, "None or >= 2"
        )
        cfg.check(
            self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= batch_size={self.batch_size} (one update; total_steps counts samples)",
        )
        cfg.check(
            self.stop_at_train_accuracy is None or 0 < self.stop_at_train_accuracy <= 1,
            "stop_at_train_accuracy",
            self.stop_at_train_accuracy,
            "None or in (0, 1]",
        )
        cfg.check(
            0 <= self.train_accuracy_decay < 1,
            "train_accuracy_decay",
            self.train_accuracy_decay,
            "in [0, 1)",
        )
        super().validate()
        return self


def default_config() -> SFTConfig:
    """The default SFT config: a warm start for RL on 3-digit addition (stops at 0.3
    running training accuracy)."""
    return SFTConfig()
