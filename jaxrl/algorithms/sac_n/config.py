"""SAC-N / EDAC hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.offline import SoftOfflineConfig

__all__ = ["PRESETS", "SACNConfig", "SWEEPABLE"]

# eta is static (not swept): eta = 0 skips the diversity term's gradients altogether.
SWEEPABLE = ("actor_lr", "critic_lr", "alpha_lr", "gamma", "tau", "alpha", "target_entropy")


@dataclasses.dataclass(frozen=True)
class SACNConfig(SoftOfflineConfig):
    """SAC-N and EDAC (An et al. 2021): SAC with an ensemble of `num_critics` critics,
    vmapped, whose minimum is pessimistic off the data; `eta` > 0 adds EDAC's
    ensemble-diversity term (eta = 0: SAC-N). Defaults: EDAC's (N = 10, eta = 1 is its
    usual setting; here eta defaults to 0, SAC-N)."""

    num_critics: int = 10
    """Critics in the ensemble (N), run as one vmapped network."""
    eta: float = 0.0
    """Weight of EDAC's ensemble-diversity term (0: SAC-N)."""

    def validate(self) -> SACNConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check(
            isinstance(self.num_critics, int) and self.num_critics >= 2,
            "num_critics",
            self.num_critics,
            "an integer >= 2",
        )
        cfg.check(
            cfg.is_finite_number(self.eta) and self.eta >= 0, "eta", self.eta, ">= 0 (0: SAC-N)"
        )
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # Small networks, few critics and gradient steps: Pendulum's datasets are small.
    "Pendulum-v1": {
        "total_steps": 20_000,
        "hidden_sizes": (128, 128),
        "num_critics": 5,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
    },
}
