"""TD3 hyperparameters, their validation, and tuned per-environment presets.

TD3's config adds its noises and policy delay to the actor-critic fields it shares
with SAC (`jaxrl.algorithms.actor_critic.ActorCriticConfig`). Noise scales
are in the agent's normalised action box [-1, 1]^d, so 0.2 means a tenth of the
range whatever the environment's bounds (as CleanRL scales them by the bounds).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.actor_critic import ActorCriticConfig

# Numeric hyperparameters that may differ across a vmapped sweep: they live in the
# training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "actor_lr",
    "critic_lr",
    "gamma",
    "tau",
    "policy_noise",
    "noise_clip",
    "exploration_noise",
)


@dataclasses.dataclass(frozen=True)
class TD3Config(ActorCriticConfig):
    """Twin Delayed DDPG (Fujimoto et al. 2018, "Addressing Function Approximation Error
    in Actor-Critic Methods"): a deterministic tanh actor, twin critics with the
    clipped double-Q target, target policy smoothing, and actor and target updates
    delayed to every `policy_delay`-th critic update.

    The replay fields come from `OffPolicyConfig` (defaults: `ActorCriticConfig`);
    tuned per environment in `PRESETS`. The target networks move with the actor, every
    `policy_delay` gradient steps, so `target_update_interval` must stay 1.
    """

    policy_delay: int = 2
    """Update the actor and the target networks every k-th critic update (the paper's d)."""
    policy_noise: float = 0.2
    """Std of the Gaussian noise added to the target policy's action (target smoothing)."""
    noise_clip: float = 0.5
    """Clip the target smoothing noise to [-noise_clip, noise_clip]."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's actions while collecting data."""

    def validate(self) -> TD3Config:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "policy_delay", "policy_noise", "exploration_noise")
        cfg.check(
            cfg.is_finite_number(self.noise_clip) and self.noise_clip >= 0,
            "noise_clip",
            self.noise_clip,
            ">= 0",
        )
        cfg.check(
            self.target_update_interval == 1,
            "target_update_interval",
            self.target_update_interval,
            "1: TD3 updates its targets with the actor, every policy_delay gradient steps "
            "(set policy_delay instead)",
        )
        return self


# Tuned defaults per environment (like rl-zoo's hyperparameter files).
PRESETS: dict[str, dict[str, Any]] = {
    # rl-zoo's Pendulum TD3 (lr 1e-3, gamma 0.98, exploration noise 0.1 of the range,
    # 20k steps) at 12k steps and 128-unit layers; measured by
    # tests/algorithms/test_continuous_learning.py.
    "Pendulum-v1": {
        "total_steps": 12_000,
        "buffer_size": 12_000,
        "learning_starts": 1_000,
        "gamma": 0.98,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "hidden_sizes": (128, 128),
    },
    # rl-zoo's MountainCarContinuous TD3 explores with Ornstein-Uhlenbeck noise of 0.5;
    # here, Gaussian noise of that scale (in [-1, 1], a quarter of the range). Not measured.
    "MountainCarContinuous-v0": {
        "total_steps": 300_000,
        "learning_starts": 10_000,
        "exploration_noise": 0.5,
        "hidden_sizes": (400, 300),
    },
}


def default_config(env: str = "Pendulum-v1") -> TD3Config:
    """The tuned preset for `env` (`TD3Config`'s defaults otherwise)."""
    return cfg.replace(TD3Config(env=env), **PRESETS.get(env, {}))
