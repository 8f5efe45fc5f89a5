"""Behaviour cloning's hyperparameters, their validation, and per-environment presets.

`BCConfig` adds the discrete policy's encoder (the DQN family's: MLP or MinAtar's
convolution) to the fields every offline learner has
(`jaxrl.algorithms.offline.OfflineConfig`). Behaviour cloning has no critic and no
bootstrap: `critic_lr`, `tau` and `gamma` are the base's fields and unused here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.offline import OfflineConfig, minatar_preset
from jaxrl.algorithms.qlearning import MINATAR_GAMES, NETWORKS

__all__ = ["BCConfig", "PRESETS", "SWEEPABLE"]

SWEEPABLE = ("actor_lr", "gamma")


@dataclasses.dataclass(frozen=True)
class BCConfig(OfflineConfig):
    """Behaviour cloning: the policy regressed on the dataset's actions, nothing else.
    A Box action space gets TD3's deterministic actor and the squared error; a Discrete
    one a categorical policy (the DQN family's network, its outputs read as logits) and
    the cross-entropy. The baseline an offline learner must beat on the same data."""

    network: str = "auto"
    """Encoder of a discrete policy: "mlp", "conv" (MinAtar's) or "auto" (conv for images);
    a continuous policy is an MLP ("auto" or "mlp")."""
    conv_channels: int = 16
    """Channels of the conv encoder's 3x3 convolution (discrete policies)."""

    def validate(self) -> BCConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_choice(self, "network", NETWORKS)
        cfg.check_positive(self, "conv_channels")
        return self


PRESETS: dict[str, dict[str, Any]] = {
    # TD3+BC's Pendulum preset (the same actor and learning rate).
    "Pendulum-v1": {
        "total_steps": 20_000,
        "hidden_sizes": (128, 128),
        "actor_lr": 1e-3,
    },
    # CartPole as cql-discrete's preset.
    "CartPole-v1": {"total_steps": 10_000, "hidden_sizes": (64, 64), "actor_lr": 1e-3},
}
# MinAtar: cql-discrete's preset (`offline.minatar_preset`), so that the two compare on
# equal terms (bc_breakout_replay against cql_discrete_breakout_replay).
for _game in MINATAR_GAMES:
    PRESETS[f"{_game}-MinAtar"] = minatar_preset("actor_lr")
