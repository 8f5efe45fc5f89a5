"""A2C hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg


@dataclasses.dataclass(frozen=True)
class A2CConfig:
    """Synchronous advantage actor-critic (A2C; Mnih et al. 2016, the synchronous form
    of A3C that OpenAI baselines named A2C).

    One update steps `num_envs` environments `num_steps` times, then takes one
    gradient step on the whole rollout.
    """

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`); A2C here needs a discrete action space."""
    total_steps: int = 500_000
    """Environment steps per agent (whole updates: rounded down to num_envs * num_steps)."""
    num_envs: int = 16
    """Environments stepped in parallel (vmap) per agent."""
    num_steps: int = 8
    """Rollout length per environment and update (the n of the n-step return)."""
    lr: float = 7e-4
    """RMSProp learning rate."""
    rms_decay: float = 0.99
    """RMSProp decay of the squared-gradient average (Mnih et al. 2016 use 0.99)."""
    rms_eps: float = 1e-5
    """RMSProp epsilon."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda; 1.0 gives the paper's n-step return advantages."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradients are rescaled to at most this global L2 norm."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the actor and of the critic MLP."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, gelu or silu."""

    @property
    def num_updates(self) -> int:
        return self.total_steps // (self.num_envs * self.num_steps)

    def validate(self) -> A2CConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "num_steps", "lr")
        cfg.check_positive(self, "rms_eps", "max_grad_norm")
        for name in ("gamma", "gae_lambda", "rms_decay"):
            cfg.check_range(self, name, 0.0, 1.0)
        for name in ("ent_coef", "vf_coef"):
            cfg.check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        cfg.check_choice(self, "activation", ("tanh", "relu", "gelu", "silu"))
        cfg.check(
            len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive layer sizes",
        )
        cfg.check(
            self.num_updates >= 1,
            "total_steps",
            self.total_steps,
            f">= num_envs * num_steps = {self.num_envs * self.num_steps} (one update)",
        )
        return self


# Per-environment overrides of the defaults (CartPole-v1's are the defaults).
PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {},
    "Acrobot-v1": {"ent_coef": 0.0},
}
