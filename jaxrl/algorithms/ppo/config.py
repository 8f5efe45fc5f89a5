"""PPO hyperparameters, their validation, and tuned per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.ppo_common import GRAD_CLIPS, SWEEPABLE, PPOFields

# The sweepable hyperparameters and the clipping kinds are the PPO family's
# (`jaxrl/algorithms/ppo_common.py`), re-exported here where they always were.
__all__ = ["GRAD_CLIPS", "PRESETS", "SWEEPABLE", "PPOConfig", "default_config"]


@dataclasses.dataclass(frozen=True)
class PPOConfig(PPOFields):
    """Proximal Policy Optimization (Schulman et al. 2017).

    Defaults are PureJaxRL's CartPole configuration. One update collects
    `num_envs * num_steps` transitions, then runs `update_epochs` passes of
    `num_minibatches` minibatches over them. The fields PPO shares with IPPO and MAPPO
    are `PPOFields`'; these are PPO's own.
    """

    reset_ratio: int = 1
    """Optimistic resets: environments per fresh episode start drawn on each step.

    1 (default): every environment draws its own start on every step (the plain
    auto-reset). R > 1: each step draws num_envs / R starts and hands them to the
    environments whose episode ended (`jaxrl.envs.optimistic_resets`; the Craftax
    baselines' optimistic resets), exact in distribution while at most num_envs / R
    episodes end on one step. Pays off when a reset costs much (Craftax draws a world).
    """
    grad_clip: str = "global_norm"
    """How max_grad_norm clips gradients: "global_norm" (rescale all) or "per_element".

    "global_norm" rescales the whole gradient when its L2 norm exceeds max_grad_norm
    (OpenAI baselines, PureJaxRL, CleanRL, SB3). "per_element" clips every component
    to [-max_grad_norm, max_grad_norm] (`optax.clip`), which is what rejax's PPO does.
    """
    normalize_obs: bool = False
    """Normalise observations by running mean and variance."""
    obs_clip: float = 10.0
    """Clip normalised observations to [-obs_clip, obs_clip]."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return (Engstrom et al. 2020)."""
    reward_clip: float = 10.0
    """Clip scaled rewards to [-reward_clip, reward_clip]."""
    diagnostics: bool = True
    """Also log policy_loss, value_loss, entropy, approx_kl and clip_fraction.

    False logs only the loss, the episode statistics and the learning rate, so an update
    does the work rejax's does (which computes no diagnostics).
    """
    tanh_squash: bool = False
    """Continuous actions: squash Gaussian samples with tanh into the Box bounds."""
    init_log_std: float = 0.0
    """Continuous actions: initial log standard deviation of the Gaussian policy."""
    rnn_head_sizes: tuple[int, ...] | None = None
    """With recurrent: the hidden layers of the actor's and of the critic's head after
    the GRU (None: `hidden_sizes`, which also sizes the embedding before it). The Craftax
    baselines' `ppo_rnn.py` has one 512-wide embedding layer and two per head."""

    def validate(self) -> PPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "obs_clip", "reward_clip", "reset_ratio")
        cfg.check(
            self.num_envs % self.reset_ratio == 0,
            "reset_ratio",
            self.reset_ratio,
            f"a divisor of num_envs={self.num_envs} (num_envs / reset_ratio starts per step)",
        )
        cfg.check_choice(self, "grad_clip", GRAD_CLIPS)
        if self.rnn_head_sizes is not None:
            cfg.check(
                self.recurrent,
                "rnn_head_sizes",
                self.rnn_head_sizes,
                "None unless recurrent=True (a feed-forward policy's layers are hidden_sizes)",
            )
            cfg.check(
                len(self.rnn_head_sizes) > 0 and all(n > 0 for n in self.rnn_head_sizes),
                "rnn_head_sizes",
                self.rnn_head_sizes,
                "a non-empty tuple of positive layer sizes, or None",
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
    # lambda 0.8, grad norm 1.0, LR 2e-4, a 512-wide embedding, GRU and two 512-wide
    # layers per head), at fewer environments
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
        "rnn_head_sizes": (512, 512),
        # The baselines' optimistic resets (their default ratio): 16 fresh worlds per
        # step instead of one per environment (drawing a world costs more than a step).
        "reset_ratio": 16,
        # One seed's hour here.
        "total_steps": 500_000,
    },
    # MuJoCo Playground's DM Control PPO hyperparameters (Zakka et al. 2025,
    # `dm_control_suite_params.brax_ppo_config`: LR 1e-3 constant, discount 0.995, clip
    # 0.3 without value clipping, entropy 0.01, 16 epochs, observations normalised) at
    # the batch this CPU affords: 128 environments x 120 steps in 4 minibatches (their
    # 2,048 x 30 x 16 on an accelerator). benchmarks/locomotion_side_by_side.py runs
    # Brax's own PPO trainer at this sizing; needs the playground extra.
    "playground:CheetahRun": {
        "num_envs": 128,
        "num_steps": 120,
        "update_epochs": 16,
        "num_minibatches": 4,
        "lr": 1e-3,
        "anneal_lr": False,
        "adam_eps": 1e-8,
        "gamma": 0.995,
        "gae_lambda": 0.95,
        "clip_eps": 0.3,
        "clip_value": False,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 1.0,
        "normalize_obs": True,
        "normalize_reward": True,
        "tanh_squash": True,
        "activation": "silu",
        "hidden_sizes": (64, 64),
        "total_steps": 4_915_200,
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
