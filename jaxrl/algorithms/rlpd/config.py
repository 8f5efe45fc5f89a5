"""RLPD hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.actor_critic import ActorCriticConfig

__all__ = ["PRESETS", "RLPDConfig", "SWEEPABLE"]

SWEEPABLE = ("actor_lr", "critic_lr", "alpha_lr", "gamma", "tau", "alpha", "target_entropy")


@dataclasses.dataclass(frozen=True)
class RLPDConfig(ActorCriticConfig):
    """RLPD (Ball, Smith, Kostrikov & Levine 2023, "Efficient Online Reinforcement
    Learning with Offline Data"): online SAC whose every batch is drawn half from the
    replay buffer and half from an offline dataset (symmetric sampling), with LayerNorm
    critics and several gradient steps per environment step (update-to-data ratio).
    `init_from` starts the actor and critics from an offline run's checkpoint; without
    `dataset`, it fine-tunes online without retaining the offline data."""

    dataset: str = ""
    """Offline dataset (.npz) mixed into every batch ("": online data only)."""
    offline_ratio: float = 0.5
    """Share of each batch drawn from the dataset (RLPD's symmetric sampling: 0.5)."""
    init_from: str = ""
    """An offline run directory (cql, sac-n, iql, td3-bc or rebrac with the same layer
    sizes and critics) whose agent 0 actor and critics start this run ("": fresh)."""
    num_critics: int = 2
    """Critics in the ensemble (RLPD's paper: 10)."""
    critic_subset: int = 2
    """Critics the target's minimum is over, drawn at random from the ensemble at every
    gradient step (RLPD's paper: 2 of 10, as REDQ); = num_critics: the minimum over all."""
    layer_norm: bool = True
    """LayerNorm after each hidden layer of the critics (RLPD, sec. 3.2)."""
    actor_layer_norm: bool = False
    """LayerNorm after each hidden layer of the actor (to start from a ReBRAC actor, which
    has it)."""
    gradient_steps: int = 10
    """Gradient steps per environment step: the update-to-data ratio (RLPD: 20)."""
    learning_starts: int = 1_000
    """Environment steps of uniformly random actions before learning starts."""
    alpha_lr: float = 3e-4
    """Adam learning rate of the temperature's logarithm (with autotune)."""
    alpha: float = 1.0
    """Entropy temperature: its initial value with autotune, else fixed."""
    autotune: bool = True
    """Tune alpha so the policy's entropy tracks target_entropy."""
    target_entropy: float | None = None
    """Entropy the temperature tuning aims at (None: -action_dim)."""

    def validate(self) -> RLPDConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_range(self, "offline_ratio", 0.0, 1.0, closed=False)
        cfg.check(
            isinstance(self.num_critics, int) and self.num_critics >= 2,
            "num_critics",
            self.num_critics,
            "an integer >= 2",
        )
        cfg.check(
            isinstance(self.critic_subset, int) and 1 <= self.critic_subset <= self.num_critics,
            "critic_subset",
            self.critic_subset,
            f"an integer in [1, num_critics={self.num_critics}]",
        )
        cfg.check_positive(self, "alpha_lr", "alpha")
        cfg.check(
            self.target_entropy is None or cfg.is_finite_number(self.target_entropy),
            "target_entropy",
            self.target_entropy,
            "a finite number, or None for -action_dim",
        )
        return self

    @property
    def offline_batch(self) -> int:
        """Transitions of each batch drawn from the dataset (0 without one)."""
        return int(round(self.batch_size * self.offline_ratio)) if self.dataset else 0


PRESETS: dict[str, dict[str, Any]] = {
    # SAC's Pendulum preset (rl-zoo's learning rates, 128-unit layers), 5 gradient steps
    # per environment step.
    "Pendulum-v1": {
        "total_steps": 6_000,
        "buffer_size": 6_000,
        "learning_starts": 500,
        "gradient_steps": 5,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
        "hidden_sizes": (128, 128),
    },
}
