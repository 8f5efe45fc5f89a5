"""C51 hyperparameters, their validation, and tuned per-environment presets.

C51 shares DQN's fields (`jaxrl.algorithms.qlearning.QLearningConfig`: replay,
optimiser, epsilon schedule, Double-Q, dueling, network) and adds the support of
the return distribution.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.qlearning import MINATAR_GAMES, SWEEPABLE, QLearningConfig

__all__ = ["C51Config", "PRESETS", "SWEEPABLE", "default_config"]


@dataclasses.dataclass(frozen=True)
class C51Config(QLearningConfig):
    """C51, the categorical distributional DQN (Bellemare et al. 2017, "A Distributional
    Perspective on Reinforcement Learning").

    The network outputs, per action, a categorical distribution over `num_atoms` evenly
    spaced returns in `[v_min, v_max]`; it learns by cross-entropy to the projected
    n-step distributional target. Prioritised replay uses the per-sample cross-entropy
    as the priority (as Rainbow, Hessel et al. 2018). Everything else is DQN's.
    """

    num_atoms: int = 51
    """Atoms of the return distribution's support (51 in the paper)."""
    v_min: float = -10.0
    """Smallest return of the support (targets below it are clipped onto it)."""
    v_max: float = 10.0
    """Largest return of the support (targets above it are clipped onto it)."""

    def validate(self) -> C51Config:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check(
            isinstance(self.num_atoms, int) and self.num_atoms >= 2,
            "num_atoms",
            self.num_atoms,
            "an integer >= 2 (the support needs two atoms to split mass between)",
        )
        for name in ("v_min", "v_max"):
            value = getattr(self, name)
            cfg.check(cfg.is_finite_number(value), name, value, "a finite number")
        cfg.check(self.v_min < self.v_max, "v_min", self.v_min, f"< v_max={self.v_max}")
        return self


# Tuned defaults per environment, measured by tests/algorithms/test_dqn_learning.py.
# The support covers the discounted returns: CartPole's are at most 1 / (1 - gamma).
PRESETS: dict[str, dict[str, Any]] = {
    # CleanRL's CartPole C51 (c51_jax.py) on 4 environments, at half its budget, as
    # DQN's preset.
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
        "v_min": 0.0,
        "v_max": 100.0,
    },
    "Acrobot-v1": {
        "total_steps": 100_000,
        "num_envs": 4,
        "batch_size": 128,
        "buffer_size": 50_000,
        "learning_starts": 0,
        "lr": 6.3e-4,
        "target_update_interval": 250,
        "eps_fraction": 0.12,
        "eps_end": 0.1,
        "v_min": -100.0,
        "v_max": 0.0,
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
        "v_min": -50.0,
        "v_max": 0.0,
    },
}
for _game in MINATAR_GAMES:
    PRESETS[f"{_game}-MinAtar"] = {
        "total_steps": 5_000_000,
        "num_envs": 16,
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
        "v_min": -10.0,
        "v_max": 10.0,
    }


def default_config(env: str = "CartPole-v1") -> C51Config:
    """The tuned preset for `env` (the paper's support [-10, 10] otherwise)."""
    return cfg.replace(C51Config(env=env), **PRESETS.get(env, {}))
