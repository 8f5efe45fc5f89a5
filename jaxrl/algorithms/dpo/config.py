"""Preference-optimisation hyperparameters and their validation.

Budget units: `total_steps` counts preference *pairs* per agent (the CLI's
`--total-steps`, progress unit "samples"); one update trains on `batch_size` pairs, so
a run makes `total_steps // batch_size` updates. With a `data` file, `epochs > 0` sets
the budget in passes over its training pairs instead. The task, model, LoRA, mesh and
optimiser fields are every language-model algorithm's (`LMConfig`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.algorithms.lm_common import LMConfig

from . import losses

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = (
    "lr",
    "weight_decay",
    "max_grad_norm",
    "beta",
    "gamma",
    "label_smoothing",
    "nll_weight",
)
# Every objective: the policy losses of `losses.preference_loss` and the reward model.
LOSSES = (*losses.PREFERENCE_LOSSES, "bt")
# Losses against a frozen reference policy (a reference model is kept only for these).
REFERENCE_LOSSES = ("dpo", "ipo")
# Logistic losses, which `label_smoothing` applies to.
LOGISTIC_LOSSES = ("dpo", "simpo", "bt")

__all__ = ["LOSSES", "REFERENCE_LOSSES", "SWEEPABLE", "DPOConfig", "default_config"]


@dataclasses.dataclass(frozen=True)
class DPOConfig(LMConfig):
    """Preference optimisation of a causal LM on (prompt, chosen, rejected) pairs.

    `preference_loss` picks the objective: `dpo` (Rafailov et al. 2023), `ipo` (Azar et
    al. 2023) against the frozen starting model as reference; `simpo` (Meng et al. 2024),
    reference-free with length-normalised rewards and a target margin `gamma`; `bt`, a
    Bradley-Terry reward model (Ouyang et al. 2022) trained on a value head whose output
    at a completion's last token is its reward. Pairs come from `data` (a JSONL file of
    `{"prompt", "chosen", "rejected"}`) or are made from `task` (the reference answer over
    a corrupted one; `jaxrl/tasks/preferences.py`). DPO is a fine-tuning method: the
    defaults (512 updates of 32 pairs at a constant 1e-4) fine-tune the default SFT
    warm start (`jaxrl train sft --task addition`, then `model=` its run directory) on
    3-digit addition pairs, to raise held-out reward accuracy and greedy exact match
    (the `dpo_addition` result in benchmarks/results; benchmarks/notes, "DPO
    learning"). Model, LoRA, mesh and optimiser fields: see `LMConfig`.
    """

    data: str | None = None
    """JSONL file of {"prompt", "chosen", "rejected"} pairs (None: pairs made from task)."""
    preference_loss: str = "dpo"
    """Objective: dpo, ipo, simpo (policy losses) or bt (a Bradley-Terry reward model)."""
    beta: float = 0.1
    """DPO/IPO/SimPO reward scale (IPO: tau; SimPO papers use about 2)."""
    gamma: float = 0.0
    """SimPO: target reward margin (Meng et al. 2024 use 0.5 to 1.5 with beta about 2)."""
    label_smoothing: float = 0.0
    """Probability that a label is flipped (conservative DPO; dpo, simpo and bt only)."""
    nll_weight: float = 0.0
    """RPO's alpha: weight of the chosen completion's per-token NLL added to the policy
    loss (Pang et al. 2024; TRL's `rpo_alpha`; the paper uses 1). 0: the plain loss."""
    max_len: int | None = None
    """Tokens per row, prompt + completion + eos (None: the longest pair's)."""
    # -- budget (pairs per agent; see the module docstring)
    total_steps: int = 16_384
    """Preference pairs per agent (ignored when epochs > 0)."""
    epochs: float = 0.0
    """With data: passes over the file's training pairs (0: the budget is total_steps)."""
    batch_size: int = 32
    """Pairs per update."""
    micro_batches: int = 1
    """Gradient-accumulation steps per update (same update, less activation memory)."""
    lr: float = 1e-4
    """Peak learning rate (AdamW; 3e-4 already lets the chosen log-probs fall after SFT)."""
    lr_schedule: str = "constant"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""

    @property
    def uses_reference(self) -> bool:
        """Whether the loss compares the policy with a frozen reference (DPO, IPO)."""
        return self.preference_loss in REFERENCE_LOSSES

    def validate(self) -> DPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_choice(self, "preference_loss", LOSSES)
        cfg.check_positive(self, "beta", "total_steps", "batch_size", "micro_batches")
        cfg.check(self.gamma >= 0, "gamma", self.gamma, ">= 0")
        cfg.check(
            self.gamma == 0 or self.preference_loss == "simpo",
            "gamma",
            self.gamma,
            f"0 unless preference_loss='simpo' (it is SimPO's margin; got "
            f"{self.preference_loss!r})",
        )
        cfg.check(
            0 <= self.label_smoothing < 0.5,
            "label_smoothing",
            self.label_smoothing,
            "in [0, 0.5) (a flip probability; 0.5 would make labels noise)",
        )
        cfg.check(
            self.label_smoothing == 0 or self.preference_loss in LOGISTIC_LOSSES,
            "label_smoothing",
            self.label_smoothing,
            f"0 with preference_loss={self.preference_loss!r} (it applies to "
            f"{list(LOGISTIC_LOSSES)})",
        )
        cfg.check(self.nll_weight >= 0, "nll_weight", self.nll_weight, ">= 0")
        cfg.check(
            self.nll_weight == 0 or self.preference_loss != "bt",
            "nll_weight",
            self.nll_weight,
            "0 with preference_loss='bt' (a reward model has no policy likelihood; it "
            "applies to dpo, ipo and simpo)",
        )
        cfg.check(
            self.data is None or (isinstance(self.data, str) and bool(self.data)),
            "data",
            self.data,
            "None or the path of a JSONL file",
        )
        cfg.check(self.epochs >= 0, "epochs", self.epochs, ">= 0 (0: total_steps)")
        cfg.check(
            self.epochs == 0 or self.data is not None,
            "epochs",
            self.epochs,
            "0 without data (pairs made from a task are an endless stream: use total_steps)",
        )
        cfg.check(
            self.max_len is None or self.max_len >= 2, "max_len", self.max_len, "None or >= 2"
        )
        cfg.check(
            self.epochs > 0 or self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= batch_size={self.batch_size} (one update; total_steps counts pairs)",
        )
        cfg.check(
            self.batch_size % self.micro_batches == 0,
            "micro_batches",
            self.micro_batches,
            f"a divisor of batch_size={self.batch_size}",
        )
        super().validate()
        return self


def default_config() -> DPOConfig:
    """DPO on synthetic 3-digit addition pairs; pass `model=` an SFT run to start from."""
    return DPOConfig()
