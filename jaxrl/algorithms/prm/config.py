"""Process-reward-model hyperparameters and their validation.

Budget units: `total_steps` counts labelled *solutions* per agent (the CLI's
`--total-steps`, progress unit "samples"); one update trains on `batch_size` of them, so
a run makes `total_steps // batch_size` updates. The task, model, mesh and optimiser
fields are every language-model algorithm's (`LMConfig`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.algorithms.lm_common import LMConfig

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = ("lr", "weight_decay", "max_grad_norm")

__all__ = ["SWEEPABLE", "PRMConfig", "default_config"]


@dataclasses.dataclass(frozen=True)
class PRMConfig(LMConfig):
    """A process reward model: a causal LM with a scalar head scoring every step.

    Trained on a step task's labelled solutions (`jaxrl.tasks.StepTask`: correct and
    corrupted solutions with one binary label per step, Math-Shepherd and PRM800K style)
    with binary cross-entropy on the head's logit at each step's end token only (TRL's
    `PRMTrainer`; Lightman et al. 2023, "Let's verify step by step"; Uesato et al. 2022).
    Evaluated by held-out step accuracy. Start from an SFT run of the same task with
    `model` (the policy's own warm start): from a random model the step labels alone
    teach it far slower, since it must first learn to read the arithmetic (the runs:
    benchmarks/notes, "process rewards"). The exported
    `model/` is what GRPO and PPO-LM read with `--process-reward RUN_DIR`. Model, mesh and
    optimiser fields: see `LMConfig` (LoRA is not supported: the head and the body train
    together).
    """

    task: str = "addition_steps"
    """Task: a step task with a step verifier (addition_steps)."""
    corrupt_fraction: float = 0.5
    """Fraction of training solutions with a corrupted step (the rest are correct)."""
    max_len: int | None = None
    """Tokens per row, prompt + solution + eos (None: the task's longest)."""
    # -- budget (solutions per agent; see the module docstring)
    total_steps: int = 128_000
    """Labelled solutions per agent. A PRM from the SFT warm start first predicts the
    label prior (every step "correct") and leaves that plateau after a number of updates
    that varies from seed to seed, so the budget leaves the slow seeds room to finish
    (the per-seed accuracies: benchmarks/results/prm_addition_steps.json)."""
    batch_size: int = 64
    """Solutions per update."""
    micro_batches: int = 1
    """Gradient-accumulation steps per update (same update, less activation memory)."""
    lr: float = 3e-4
    """Peak learning rate (AdamW). Fine-tuning the warm start's body with its new head:
    at SFT's 1e-3 some seeds barely left the label prior (the notes above)."""
    lr_schedule: str = "cosine"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> PRMConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "batch_size", "micro_batches")
        cfg.check(
            0 <= self.corrupt_fraction <= 1,
            "corrupt_fraction",
            self.corrupt_fraction,
            "a fraction in [0, 1]",
        )
        cfg.check(
            self.max_len is None or self.max_len >= 2, "max_len", self.max_len, "None or >= 2"
        )
        cfg.check(
            self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= batch_size={self.batch_size} (one update; total_steps counts solutions)",
        )
        cfg.check(
            self.batch_size % self.micro_batches == 0,
            "micro_batches",
            self.micro_batches,
            f"a divisor of batch_size={self.batch_size}",
        )
        cfg.check(
            self.lora_rank == 0,
            "lora_rank",
            self.lora_rank,
            "0 (a PRM trains its whole model with its head; LoRA is not supported)",
        )
        super().validate()
        return self


def default_config() -> PRMConfig:
    """A PRM on 3-digit step-by-step addition; pass `model=` an SFT run of
    `addition_steps` to start from the policy (the tiny random model otherwise)."""
    return PRMConfig()
