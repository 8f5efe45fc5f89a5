"""PQN hyperparameters, their validation, and tuned per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.pqn_common import NORMS, OPTIMIZERS, SWEEPABLE, PQNFields
from jaxrl.algorithms.qlearning import NETWORKS

# The sweepable hyperparameters, optimisers and norms are the PQN family's
# (`jaxrl/algorithms/pqn_common.py`), re-exported here where they always were.
__all__ = ["NORMS", "OPTIMIZERS", "PRESETS", "SWEEPABLE", "PQNConfig", "default_config"]


@dataclasses.dataclass(frozen=True)
class PQNConfig(PQNFields):
    """Parallel Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference
    Learning", arXiv:2407.04811).

    Defaults are purejaxql's CartPole configuration (`pqn_cartpole.yaml`) except that
    rewards are not scaled (`reward_scale`, 0.1 there) and exploration ends at
    `eps_end` 0.05 (0.2 there: purejaxql reports greedy test episodes, the summary
    here reports the training episodes). One update
    steps `num_envs` environments `num_steps` times with an epsilon-greedy policy,
    computes Q(lambda) targets over that rollout, then runs `num_epochs` passes of
    `num_minibatches` minibatches of the squared TD error over it. There is no replay
    buffer and no target network: LayerNorm keeps the bootstrapped targets stable. The
    fields PQN shares with PQN-VDN are `PQNFields`'; these are PQN's own.
    """

    network: str = "auto"
    """Observation encoder: "mlp" (flattened observations), "conv" (images, e.g. MinAtar)
    or "auto" (conv for (H, W, C) observations, else mlp)."""
    conv_channels: int = 16
    """Channels of the 3x3 convolution of the "conv" torso."""

    def validate(self) -> PQNConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "conv_channels")
        cfg.check_choice(self, "network", NETWORKS)
        return self


# Tuned defaults per environment (like rl-zoo's hyperparameter files), measured by
# tests/algorithms/test_pqn_learning.py.
PRESETS: dict[str, dict[str, Any]] = {
    # purejaxql's reward scale; 128 units (purejaxql's network default) learned more
    # reliably than 256 in 300k steps (8 seeds: all >= 497 against one of 8 at 133).
    "CartPole-v1": {"total_steps": 300_000, "hidden_sizes": (128, 128), "reward_scale": 0.1},
    # purejaxql runs Acrobot with its CartPole configuration.
    "Acrobot-v1": {"total_steps": 500_000, "hidden_sizes": (128, 128), "reward_scale": 0.1},
}
# MinAtar: purejaxql's `pqn_minatar.yaml` with its CNN (one 3x3 convolution, one
# hidden layer of 128).
for _game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders"):
    PRESETS[f"{_game}-MinAtar"] = {
        "total_steps": 10_000_000,
        "num_envs": 128,
        "num_steps": 32,
        "num_epochs": 2,
        "num_minibatches": 32,
        "lr": 5e-4,
        "q_lambda": 0.65,
        "eps_end": 0.05,
        "eps_fraction": 0.1,
        "network": "conv",
        "hidden_sizes": (128,),
    }


def default_config(env: str = "CartPole-v1") -> PQNConfig:
    """The tuned preset for `env` (purejaxql's CartPole defaults otherwise)."""
    return cfg.replace(PQNConfig(env=env), **PRESETS.get(env, {}))
