"""ReBRAC hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.offline import OfflineConfig

__all__ = ["PRESETS", "ReBRACConfig", "SWEEPABLE"]

SWEEPABLE = (
    "actor_lr",
    "critic_lr",
    "gamma",
    "tau",
    "actor_bc",
    "critic_bc",
    "policy_noise",
    "noise_clip",
)


@dataclasses.dataclass(frozen=True)
class ReBRACConfig(OfflineConfig):
    """ReBRAC (Tarasov et al. 2023): TD3+BC with decoupled behaviour-cloning penalties in
    the actor (`actor_bc`) and the critic's target (`critic_bc`), LayerNorm networks,
    batches of 1024 and learning rates of 1e-3 (the paper's defaults; the two
    coefficients are tuned per dataset there)."""

    batch_size: int = 1024
    """Transitions per gradient step."""
    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critics."""
    actor_bc: float = 0.01
    """beta_actor: weight of |pi(s) - a|^2 in the actor's loss, >= 0."""
    critic_bc: float = 0.01
    """beta_critic: weight of |a' - a'_data|^2 subtracted in the critics' target, >= 0."""
    normalize_q: bool = True
    """Divide the actor's Q term by its mean magnitude (as TD3+BC's lambda)."""
    layer_norm: bool = True
    """LayerNorm after each hidden layer of the actor and the critics."""
    policy_delay: int = 2
    """Update the actor and the targets every k-th critic update (TD3's d)."""
    policy_noise: float = 0.2
    """Std of the Gaussian noise added to the target policy's action (target smoothing)."""
    noise_clip: float = 0.5
    """Clip the target smoothing noise to [-noise_clip, noise_clip]."""

    def validate(self) -> ReBRACConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        for name in ("actor_bc", "critic_bc", "noise_clip"):
            value = getattr(self, name)
            cfg.check(cfg.is_finite_number(value) and value >= 0, name, value, ">= 0")
        cfg.check_positive(self, "policy_delay", "policy_noise")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # Small networks and few gradient steps: Pendulum's datasets are small.
    "Pendulum-v1": {
        "total_steps": 20_000,
        "hidden_sizes": (128, 128),
        "batch_size": 256,
    },
    # Brax's Hopper medium-replay (benchmarks/offline_datasets.py): CORL's settings for
    # hopper-medium-replay (three hidden layers, actor_bc 0.05, critic_bc 0.5, learning
    # rates 1e-3) with 128-unit layers (CORL: 256) and batches of 256 (CORL: 1024) for
    # 30k gradient steps (CORL: 1M), what this 2-core CPU runs in minutes for 5 seeds;
    # LayerNorm in the actor too (one `layer_norm` field for both, the paper's default;
    # CORL's file has it in the critics only).
    "brax:hopper@positional": {
        "total_steps": 30_000,
        "eval_interval": 3_000,
        "hidden_sizes": (128, 128, 128),
        "batch_size": 256,
        "actor_bc": 0.05,
        "critic_bc": 0.5,
    },
}
