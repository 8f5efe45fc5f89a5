"""CQL hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.offline import OfflineConfig, SoftOfflineConfig, minatar_preset
from jaxrl.algorithms.qlearning import MINATAR_GAMES, NETWORKS

__all__ = [
    "CQLConfig",
    "DISCRETE_PRESETS",
    "DISCRETE_SWEEPABLE",
    "DiscreteCQLConfig",
    "PRESETS",
    "SWEEPABLE",
]

SWEEPABLE = (
    "actor_lr",
    "critic_lr",
    "alpha_lr",
    "gamma",
    "tau",
    "alpha",
    "target_entropy",
    "cql_alpha",
    "cql_temperature",
)


@dataclasses.dataclass(frozen=True)
class CQLConfig(SoftOfflineConfig):
    """Conservative Q-Learning, CQL(H) with the SAC backbone (Kumar et al. 2020): SAC's
    twin critics, actor and temperature, plus the conservative penalty in the critics'
    loss. Defaults: the paper's for locomotion (alpha_cql 5, 10 sampled actions per
    proposal, actor learning rate 1e-4)."""

    actor_lr: float = 1e-4
    """Adam learning rate of the actor (the paper's 1e-4)."""
    cql_alpha: float = 5.0
    """Weight of the conservative penalty, >= 0 (0: SAC on the dataset)."""
    cql_temperature: float = 1.0
    """T of the penalty's T logsumexp(Q / T) (1: the paper's eq. 4)."""
    num_sampled_actions: int = 10
    """Actions per proposal (uniform, pi(s), pi(s')) in the log-sum-exp estimate."""

    def validate(self) -> CQLConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check(
            cfg.is_finite_number(self.cql_alpha) and self.cql_alpha >= 0,
            "cql_alpha",
            self.cql_alpha,
            ">= 0 (0: no conservative penalty)",
        )
        cfg.check_positive(self, "cql_temperature", "num_sampled_actions")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # Small networks and few gradient steps: Pendulum's datasets are small.
    "Pendulum-v1": {
        "total_steps": 20_000,
        "hidden_sizes": (128, 128),
        "actor_lr": 3e-4,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
    },
}


DISCRETE_SWEEPABLE = ("critic_lr", "gamma", "tau", "cql_alpha")


@dataclasses.dataclass(frozen=True)
class DiscreteCQLConfig(OfflineConfig):
    """Discrete CQL (Kumar et al. 2020, CQL(H) with a finite action set) for DQN-style
    tasks: a Q-network (the DQN family's, MLP or MinAtar's convolution), Double-Q
    targets from a Polyak-averaged target network, and the exact log-sum-exp penalty."""

    env: str = "CartPole-v1"
    """Environment id (a Discrete action space): the dataset's, where the policy is evaluated."""
    cql_alpha: float = 1.0
    """Weight of the conservative penalty, >= 0 (0: Double DQN on the dataset)."""
    double_q: bool = True
    """Double Q-learning targets (van Hasselt et al. 2016)."""
    network: str = "auto"
    """Observation encoder: "mlp", "conv" (MinAtar's) or "auto" (conv for images)."""
    conv_channels: int = 16
    """Channels of the conv torso's 3x3 convolution."""

    def validate(self) -> DiscreteCQLConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check(
            cfg.is_finite_number(self.cql_alpha) and self.cql_alpha >= 0,
            "cql_alpha",
            self.cql_alpha,
            ">= 0 (0: no conservative penalty)",
        )
        cfg.check_choice(self, "network", NETWORKS)
        cfg.check_positive(self, "conv_channels")
        return self


DISCRETE_PRESETS: dict[str, dict[str, Any]] = {
    # Small datasets of short episodes: few gradient steps, small networks.
    "CartPole-v1": {"total_steps": 10_000, "hidden_sizes": (64, 64), "critic_lr": 1e-3},
}
# MinAtar: the discrete offline learners' shared preset (`offline.minatar_preset`).
for _game in MINATAR_GAMES:
    DISCRETE_PRESETS[f"{_game}-MinAtar"] = minatar_preset("critic_lr")
