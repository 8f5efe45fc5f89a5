"""DQN hyperparameters, their validation, and tuned per-environment presets.

`DQNConfig` adds the regression loss to the fields every value-based agent on the
shared replay base has (`jaxrl.algorithms.qlearning.QLearningConfig`: the optimiser,
the epsilon-greedy schedule, Double-Q, dueling heads and the network torso); C51's
config adds the return distribution's support instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.qlearning import MINATAR_GAMES, SWEEPABLE, QLearningConfig

__all__ = ["DQNConfig", "LOSSES", "PRESETS", "QLearningConfig", "SWEEPABLE", "default_config"]

# Regression losses on the TD error (see `DQNConfig.loss`).
LOSSES = ("huber", "mse")


@dataclasses.dataclass(frozen=True)
class DQNConfig(QLearningConfig):
    """Deep Q-Networks (Mnih et al. 2015) with the Double-Q, dueling, n-step and
    prioritised-replay extensions (as combined in Rainbow, Hessel et al. 2018, minus the
    distributional head and noisy networks).

    The replay fields (num_envs, train_frequency, gradient_steps, batch_size,
    buffer_size, learning_starts, n_step, prioritised, tau, target_update_interval)
    come from `OffPolicyConfig`; the defaults are SB3's DQN defaults, tuned per
    environment in `PRESETS`.
    """

    loss: str = "mse"
    """Loss on the TD error: "mse" (CleanRL) or "huber" (Mnih et al. 2015's error
    clipping; SB3).

    Huber's gradient is the error clipped to [-1, 1]: with Atari's clipped rewards most
    errors are small, but with unclipped returns of ~100 (CartPole) nearly all exceed 1
    and Huber becomes an L1 regression, under which rarely taken actions' values are
    barely corrected; DQN then diverges on CartPole (Q-values in the millions in our
    runs), where "mse" learns.
    """

    def validate(self) -> DQNConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_choice(self, "loss", LOSSES)
        return self


# Tuned defaults per environment (like rl-zoo's hyperparameter files), measured by
# tests/algorithms/test_dqn_learning.py.
PRESETS: dict[str, dict[str, Any]] = {
    # CleanRL's CartPole DQN (dqn_jax.py: MSE, target copies every 500 environment
    # steps, 10 environment steps per gradient step of 128) on 4 environments, at half
    # its budget, with Double-Q.
    "CartPole-v1": {
        "total_steps": 250_000,
        "num_envs": 4,
        "train_frequency": 10,
        "gradient_steps": 4,
        "batch_size": 128,
        "buffer_size": 10_000,
        "learning_starts": 10_000,
        "lr": 2.5e-4,
        "target_update_interval": 50,
        "max_grad_norm": 0.0,
        "eps_fraction": 0.5,
        "hidden_sizes": (120, 84),
    },
    # SB3 rl-zoo's Acrobot and MountainCar DQN.
    "Acrobot-v1": {
        "total_steps": 100_000,
        "num_envs": 4,
        "train_frequency": 1,
        "gradient_steps": 1,
        "batch_size": 128,
        "buffer_size": 50_000,
        "learning_starts": 0,
        "lr": 6.3e-4,
        "target_update_interval": 250,
        "eps_fraction": 0.12,
        "eps_end": 0.1,
        "hidden_sizes": (256, 256),
    },
    "MountainCar-v0": {
        "total_steps": 120_000,
        "num_envs": 4,
        "train_frequency": 4,
        "gradient_steps": 8,
        "batch_size": 128,
        "buffer_size": 10_000,
        "learning_starts": 1_000,
        "lr": 4e-3,
        "target_update_interval": 150,
        "eps_fraction": 0.2,
        "eps_end": 0.07,
        "gamma": 0.98,
        "hidden_sizes": (256, 256),
    },
}
# MinAtar: Young & Tian 2019's DQN (one 3x3 convolution with 16 channels, one hidden
# layer of 128; batch 32, target copies every 1000 gradient steps, epsilon 1 -> 0.1)
# with Adam and 16 environments.
for _game in MINATAR_GAMES:
    PRESETS[f"{_game}-MinAtar"] = {
        "total_steps": 5_000_000,
        "num_envs": 16,
        "train_frequency": 1,
        "gradient_steps": 4,
        "batch_size": 32,
        "buffer_size": 100_000,
        "learning_starts": 5_000,
        "lr": 2.5e-4,
        "target_update_interval": 1_000,
        "eps_end": 0.1,
        "eps_fraction": 0.1,
        "network": "conv",
        "hidden_sizes": (128,),
    }


def default_config(env: str = "CartPole-v1") -> DQNConfig:
    """The tuned preset for `env` (SB3's DQN defaults otherwise)."""
    return cfg.replace(DQNConfig(env=env), **PRESETS.get(env, {}))
