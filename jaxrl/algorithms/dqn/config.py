"""DQN hyperparameters, their validation, and tuned per-environment presets.

`QLearningConfig` holds what every value-based agent on the shared replay base
(`jaxrl/algorithms/offpolicy.py`) adds to `OffPolicyConfig`: the optimiser, the
epsilon-greedy schedule, Double-Q, dueling heads and the network torso. `DQNConfig`
adds the regression loss; C51's config (`jaxrl/algorithms/c51/config.py`) adds the
return distribution's support instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.offpolicy import OffPolicyConfig
from jaxrl.algorithms.qlearning import NETWORKS

# Numeric hyperparameters that may differ across a vmapped sweep: they live in the
# training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "lr",
    "gamma",
    "tau",
    "max_grad_norm",
    "eps_start",
    "eps_end",
    "eps_fraction",
)

# Regression losses on the TD error (see `DQNConfig.loss`).
LOSSES = ("huber", "mse")

MINATAR_GAMES = ("Breakout", "Asterix", "Freeway", "SpaceInvaders")


@dataclasses.dataclass(frozen=True)
class QLearningConfig(OffPolicyConfig):
    """Fields shared by DQN and C51: optimiser, exploration, Double-Q, network."""

    lr: float = 2.5e-4
    """Adam learning rate."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    max_grad_norm: float = 10.0
    """Clip gradients to this global L2 norm before Adam (0: no clipping)."""
    eps_start: float = 1.0
    """Epsilon-greedy exploration: epsilon when learning starts (actions are uniformly
    random before learning_starts anyway)."""
    eps_end: float = 0.05
    """Epsilon-greedy exploration: epsilon after the decay (and for `jaxrl eval` sampling)."""
    eps_fraction: float = 0.1
    """Fraction of total_steps over which epsilon decays linearly from eps_start to eps_end.

    SB3's and CleanRL's exploration_fraction: epsilon(t) = eps_start + (eps_end -
    eps_start) * min(t / (eps_fraction * total_steps), 1) at environment step t (counted
    in whole updates). 0 means eps_end from the start.
    """
    double_q: bool = True
    """Double Q-learning targets (van Hasselt et al. 2016): the online network picks the
    next action, the target network values it; False: max of the target network."""
    dueling: bool = False
    """Dueling heads (Wang et al. 2016): Q = V + A - mean_a A."""
    network: str = "auto"
    """Observation encoder: "mlp", "conv" (image observations, as MinAtar's DQN) or
    "auto" ("conv" for (H, W, C) observations, else "mlp")."""
    conv_channels: int = 16
    """Channels of the 3x3 convolution of the "conv" torso (MinAtar's DQN: 16)."""

    def validate(self) -> QLearningConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "lr", "adam_eps", "conv_channels")
        cfg.check(
            cfg.is_finite_number(self.max_grad_norm) and self.max_grad_norm >= 0,
            "max_grad_norm",
            self.max_grad_norm,
            ">= 0 (0: no clipping)",
        )
        cfg.check_range(self, "eps_start", 0.0, 1.0)
        cfg.check_range(self, "eps_end", 0.0, 1.0)
        cfg.check_range(self, "eps_fraction", 0.0, 1.0)
        cfg.check(
            self.eps_end <= self.eps_start,
            "eps_end",
            self.eps_end,
            f"<= eps_start={self.eps_start} (epsilon decays)",
        )
        cfg.check_choice(self, "network", NETWORKS)
        return self


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
