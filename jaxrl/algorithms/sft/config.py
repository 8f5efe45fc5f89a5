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
    The defaults are a short warm start for RL on 3-digit addition: 625 updates at a
    constant learning rate of 1e-3 (~65 s of training on a 2-core CPU; held-out exact
    match 0.28 at seed 0, so RL has room). The constant rate matters: a model annealed
    to a zero learning rate sits where GRPO's steps only hurt held-out prompts (see
    benchmarks/README.md, "GRPO learning"). The slow test
    `tests/algorithms/test_sft_learning.py` documents a budget that reaches >= 0.9
    held-out exact match. Model, LoRA, mesh and optimiser fields: see `LMConfig`.
    """

    max_len: int | None = None
    """Tokens per training row (None: the task's longest example)."""
    # -- budget (samples per agent; see the module docstring)
    total_steps: int = 40_000
    """Training samples (prompt/answer sequences) per agent."""
    batch_size: int = 64
    """Samples per update."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    lr_schedule: str = "constant"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""

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
        super().validate()
        return self


def default_config() -> SFTConfig:
    """The default SFT config: a short warm start on 3-digit addition."""
    return SFTConfig()
