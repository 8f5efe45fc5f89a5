"""PPO hyperparameters, their validation, and tuned per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg

# Numeric hyperparameters that may differ across a vmapped sweep: they live in
# the training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "lr",
    "gamma",
    "gae_lambda",
    "clip_eps",
    "vf_clip_eps",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
)

# How `max_grad_norm` clips gradients (see `PPOConfig.grad_clip`).
GRAD_CLIPS = ("global_norm", "per_element")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Proximal Policy Optimization (Schulman et al. 2017).

    Defaults are PureJaxRL's CartPole configuration. One update collects
    `num_envs * num_steps` transitions, then runs `update_epochs` passes of
    `num_minibatches` minibatches over them.
    """

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`)."""
    total_steps: int = 500_000
    """Environment steps per agent (whole updates: rounded down to num_envs * num_steps)."""
    num_envs: int = 4
    """Environments stepped in parallel (vmap) per agent."""
    num_steps: int = 128
    """Rollout length per environment and update."""
    reset_ratio: int = 1
    """Optimistic resets: environments per fresh episode start drawn on each step.

    1 (default): every environment draws its own start on every step (the plain
    auto-reset). R > 1: each step draws num_envs / R starts and hands them to the
    environments whose episode ended (`jaxrl.envs.optimistic_resets`; the Craftax
    baselines' optimistic resets), exact in distribution while at most num_envs / R
    episodes end on one step. Pays off when a reset costs much (Craftax draws a world).
    """
    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches (gradient steps) per epoch."""
    lr: float = 2.5e-4
    """Adam learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016)."""
    clip_eps: float = 0.2
    """Policy ratio clipping range."""
    clip_value: bool = True
    """Clip the value update around the rollout's values (OpenAI baselines' PPO2)."""
    vf_clip_eps: float = 0.2
    """Value clipping range (with clip_value)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping threshold (global norm, or per element: see grad_clip)."""
    grad_clip: str = "global_norm"
    """How max_grad_norm clips gradients: "global_norm" (rescale all) or "per_element".

    "global_norm" rescales the whole gradient when its L2 norm exceeds max_grad_norm
    (OpenAI baselines, PureJaxRL, CleanRL, SB3). "per_element" clips every component
    to [-max_grad_norm, max_grad_norm] (`optax.clip`), which is what rejax's PPO does.
    """
    adam_eps: float = 1e-5
    """Adam epsilon."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch (mean 0, std 1)."""
    normalize_obs: bool = False
    """Normalise observations by running mean and variance."""
    obs_clip: float = 10.0
    """Clip normalised observations to [-obs_clip, obs_clip]."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return (Engstrom et al. 2020)."""
    reward_clip: float = 10.0
    """Clip scaled rewards to [-reward_clip, reward_clip]."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from V(final observation); False: treat as terminal.

    True adds gamma * V(final observation) to the reward of a truncated step (Pardo et
    al. 2018, "Time Limits in Reinforcement Learning"). False treats a time limit like a
    termination, as PureJaxRL and rejax do, and skips the critic pass over final
    observations.
    """
    diagnostics: bool = True
    """Also log policy_loss, value_loss, entropy, approx_kl and clip_fraction.

    False logs only the loss, the episode statistics and the learning rate, so an update
    does the work rejax's does (which computes no diagnostics).
    """
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the actor and of the critic MLP."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, gelu or silu."""
    recurrent: bool = False
    """Put a GRU between the MLP torso and the heads (for partially observable tasks)."""
    rnn_hidden_size: int = 128
    """GRU state size (with recurrent)."""
    tanh_squash: bool = False
    """Continuous actions: squash Gaussian samples with tanh into the Box bounds."""
    init_log_std: float = 0.0
    """Continuous actions: initial log standard deviation of the Gaussian policy."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> PPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "num_steps", "update_epochs")
        cfg.check_positive(self, "num_minibatches", "lr", "max_grad_norm", "adam_eps")
        cfg.check_positive(self, "obs_clip", "reward_clip", "rnn_hidden_size", "reset_ratio")
        cfg.check(
            self.num_envs % self.reset_ratio == 0,
            "reset_ratio",
            self.reset_ratio,
            f"a divisor of num_envs={self.num_envs} (num_envs / reset_ratio starts per step)",
        )
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "gae_lambda", 0.0, 1.0)
        cfg.check_positive(self, "clip_eps", "vf_clip_eps")
        for name in ("ent_coef", "vf_coef"):
            cfg.check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        cfg.check_choice(self, "activation", ("tanh", "relu", "gelu", "silu"))
        cfg.check_choice(self, "grad_clip", GRAD_CLIPS)
        cfg.check(
            len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive layer sizes",
        )
        cfg.check(
            self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= num_envs * num_steps = {self.batch_size} (one update)",
        )
        # Feed-forward PPO shuffles single transitions; recurrent PPO must keep
        # whole sequences together, so it splits over environments instead.
        if self.recurrent:
            cfg.check(
                self.num_envs % self.num_minibatches == 0,
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_envs={self.num_envs} (recurrent PPO splits minibatches by env)",
            )
        else:
            cfg.check(
                self.batch_size % self.num_minibatches == 0,
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_envs * num_steps = {self.batch_size}",
            )
        return self


# Tuned defaults per environment (like rl-zoo's hyperparameter files). Each is
# measured by tests/algorithms/test_ppo_learning.py or `python -m benchmarks.reproduce`.
PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {},
    "Acrobot-v1": {
        "num_envs": 16,
        "num_steps": 128,
        "lr": 1e-3,
        "ent_coef": 0.0,
        "normalize_obs": True,
        "total_steps": 500_000,
    },
    "MountainCar-v0": {"num_envs": 16, "normalize_obs": True, "total_steps": 1_000_000},
    "Pendulum-v1": {
        "num_envs": 16,
        "num_steps": 256,
        "update_epochs": 10,
        "num_minibatches": 16,
        "lr": 1e-3,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "ent_coef": 0.0,
        "max_grad_norm": 0.5,
        "normalize_obs": True,
        "normalize_reward": True,
        "total_steps": 1_000_000,
        "clip_value": False,
        "init_log_std": -0.5,
    },
    "MountainCarContinuous-v0": {
        "num_envs": 16,
        "normalize_obs": True,
        "normalize_reward": True,
        "ent_coef": 0.0,
        "total_steps": 1_000_000,
    },
    "CartPole-POMDP-v1": {
        "recurrent": True,
        "num_envs": 16,
        "num_steps": 128,
        "num_minibatches": 4,
        "lr": 1e-3,
        "total_steps": 1_000_000,
        "hidden_sizes": (64,),
        "rnn_hidden_size": 128,
    },
    "MemoryChain-v0": {
        "recurrent": True,
        "num_envs": 16,
        "num_steps": 64,
        "lr": 1e-3,
        "total_steps": 200_000,
        "hidden_sizes": (64,),
        "rnn_hidden_size": 64,
    },
    # The Craftax baselines' ppo_rnn.py (Matthews et al. 2024: 1024 envs x 64 steps, GAE
    # lambda 0.8, grad norm 1.0, LR 2e-4, 512-wide layers and GRU), at fewer environments
    # and the budget that fits an hour on this CPU for one seed (benchmarks/registry.py's
    # ppo_rnn_craftax_classic); needs the craftax extra.
    "craftax:Craftax-Classic-Symbolic-v1": {
        "recurrent": True,
        "num_envs": 256,
        "num_steps": 64,
        "update_epochs": 4,
        "num_minibatches": 8,
        "lr": 2e-4,
        "gamma": 0.99,
        "gae_lambda": 0.8,
        "clip_eps": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 1.0,
        "activation": "relu",
        "hidden_sizes": (512,),
        "rnn_hidden_size": 512,
        # The baselines' optimistic resets (their default ratio): 16 fresh worlds per
        # step instead of one per environment (drawing a world costs more than a step).
        "reset_ratio": 16,
        # One seed's hour here.
        "total_steps": 500_000,
    },
}
# MinAtar: PureJaxRL's MinAtar PPO settings.
for _game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders"):
    PRESETS[f"{_game}-MinAtar"] = {
        "num_envs": 64,
        "num_steps": 128,
        "update_epochs": 4,
        "num_minibatches": 8,
        "lr": 5e-4,
        "gamma": 0.99,
        "gae_lambda": 0.95,
        "ent_coef": 0.01,
        "activation": "relu",
        "hidden_sizes": (256, 256),
        "total_steps": 10_000_000,
    }


def default_config(env: str = "CartPole-v1") -> PPOConfig:
    """The tuned preset for `env` (PureJaxRL's CartPole defaults otherwise)."""
    return cfg.replace(PPOConfig(env=env), **PRESETS.get(env, {}))
