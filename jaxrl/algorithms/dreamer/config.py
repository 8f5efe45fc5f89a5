"""Dreamer hyperparameters, model-size presets (data), and their validation.

One set of hyperparameters is the default for every environment (DreamerV3's
point: Hafner et al. 2023, "Mastering Diverse Domains through World Models",
arXiv:2301.04104, table of hyperparameters in appendix); what changes between
problems is the model size (`model_size`, a preset in `MODEL_SIZES`) and the
sequence backbone (`backbone`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg

# Numeric hyperparameters that may differ across a vmapped sweep (float32 leaves of
# the training state). Everything else is static structure.
SWEEPABLE = ("model_lr", "actor_lr", "critic_lr", "entropy_coef", "gamma", "lam")

BACKBONES = ("gru", "transformer", "ssm")
# Where the posterior z_t gets its context (see `DreamerConfig.posterior`).
POSTERIORS = ("auto", "history", "observation")
# Image encoder and decoder (see `DreamerConfig.image_net`).
IMAGE_NETS = ("minatar", "dreamerv3")

# Model sizes as data: the widths of every part. The names follow DreamerV3's
# XS/S/M; the sizes are smaller than the paper's (its XS has a 256-unit GRU with
# 32x32 latents and 256-unit MLPs) so that CPU runs finish in minutes.
MODEL_SIZES: dict[str, dict[str, int]] = {
    #        MLP width, MLP layers, backbone state, latents x classes
    # "debug": for tests and smoke runs (compiles and steps fast, learns little).
    "debug": {"units": 16, "layers": 1, "hidden_size": 16, "num_latents": 4, "num_classes": 4},
    "xs": {"units": 128, "layers": 2, "hidden_size": 128, "num_latents": 16, "num_classes": 16},
    "s": {"units": 256, "layers": 2, "hidden_size": 256, "num_latents": 32, "num_classes": 16},
    "m": {"units": 512, "layers": 3, "hidden_size": 512, "num_latents": 32, "num_classes": 32},
    # DreamerV3's own smallest preset (`size1m` of the dreamer 3.3.1 code: 32 latents
    # of 4 classes, 64 units), for benchmarks/dreamer_throughput.py's matched-shape row
    # (with image_net="dreamerv3" and conv_depth=4). Its recurrent state is 512 wide but
    # block-diagonal (8 blocks); our dense GRU matches its size and arithmetic at 256.
    "1m": {"units": 64, "layers": 2, "hidden_size": 256, "num_latents": 32, "num_classes": 4},
}


@dataclasses.dataclass(frozen=True)
class DreamerConfig:
    """A DreamerV3-style agent (Hafner et al. 2023) whose world model's sequence
    backbone is a switch: `gru` (the RSSM), `transformer` (STORM/TWM-style causal
    attention) or `ssm` (an S5/LRU-style diagonal state-space model, as in R2I).

    One update steps `num_envs` environments `train_every` times with the policy,
    adds the steps to the on-device replay buffer, then (once `learning_starts`
    steps are stored) takes `gradient_steps` gradient steps: each samples
    `batch_size` sequences of `batch_length` steps, trains the world model on them,
    imagines `horizon` steps from every posterior state with the actor, and trains
    the actor and critic on the imagined trajectories.
    """

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`): discrete or 1-D Box actions, vector or image
    observations."""
    total_steps: int = 100_000
    """Environment steps per agent (whole updates: rounded down to num_envs * train_every)."""
    num_envs: int = 4
    """Environments stepped in parallel (vmap) per agent."""
    train_every: int = 8
    """Steps of every environment between two learning phases."""
    train_ratio: float = 64.0
    """Replayed steps per environment step (DreamerV3's train ratio): gradient steps per
    update = train_ratio * num_envs * train_every / (batch_size * batch_length), which
    must be a whole number. 64 (one gradient step per 16 environment steps) is where
    every backbone solved CartPole within 100k steps and 32 was not (benchmarks/notes,
    "Dreamer learning"; the `dreamer_cartpole_*` results measure it at the current
    code); DreamerV3 itself uses 512 and more, which a CPU cannot afford."""
    batch_size: int = 16
    """Replayed sequences per gradient step."""
    batch_length: int = 64
    """Steps per replayed sequence."""
    buffer_size: int = 100_000
    """Replay capacity in environment steps (per agent)."""
    learning_starts: int = 1_024
    """Environment steps (per agent) collected before the first gradient step."""
    backbone: str = "gru"
    """Sequence model of the world model: gru (RSSM), transformer or ssm."""
    posterior: str = "auto"
    """Context of the posterior q(z_t): "history" (DreamerV3's RSSM: the backbone's state
    and the observation; training steps the backbone one step at a time), "observation"
    (the observation only, as STORM, TWM and R2I: the backbone runs over the whole
    sequence in parallel) or "auto" (history for gru, observation otherwise)."""
    model_size: str = dataclasses.field(default="xs", metadata={"choices": tuple(MODEL_SIZES)})
    """Model-size preset: a key of `MODEL_SIZES` (units, layers, latents)."""
    transformer_window: int = 16
    """transformer backbone: steps each position attends to (itself included)."""
    transformer_heads: int = 4
    """transformer backbone: attention heads."""
    num_backbone_layers: int = 2
    """transformer and ssm backbones: layers (the gru backbone is one GRU)."""
    imagination_starts: int = 256
    """Posterior states imagination starts from, drawn without replacement from the
    batch_size * batch_length replayed steps each gradient step. DreamerV3 starts from
    all of them (1,024 here); a quarter keeps a CPU gradient step affordable."""
    horizon: int = 15
    """Imagination horizon (steps imagined from each posterior state)."""
    gamma: float = 0.997
    """Discount factor (DreamerV3: 1 - 1/333)."""
    lam: float = 0.95
    """Lambda of the lambda-returns in imagination."""
    model_lr: float = 1e-4
    """World-model learning rate (Adam)."""
    actor_lr: float = 3e-5
    """Actor learning rate (Adam)."""
    critic_lr: float = 3e-4
    """Critic learning rate (Adam). Ten times DreamerV3's 3e-5: a 100k-step CPU run makes
    only a few thousand gradient steps, after which a critic at 3e-5 still far
    undershot CartPole's discounted returns, so the actor saw only short-horizon
    consequences; at 3e-4 the critic tracks them (benchmarks/notes, "Dreamer
    learning")."""
    adam_eps: float = 1e-8
    """Epsilon of Adam's denominator (all three optimisers)."""
    model_grad_clip: float = 1000.0
    """Global gradient-norm clip of the world model."""
    actor_critic_grad_clip: float = 100.0
    """Global gradient-norm clip of the actor and of the critic."""
    entropy_coef: float = 3e-4
    """Actor entropy bonus eta (on returns normalised to about [0, 1])."""
    unimix: float = 0.01
    """Uniform mixture of latent and actor categoricals (DreamerV3: 1%)."""
    free_nats: float = 1.0
    """Free bits of each KL term: KL below this many nats is not penalised."""
    dyn_scale: float = 0.5
    """Weight of the dynamics KL (trains the prior towards the posterior)."""
    rep_scale: float = 0.1
    """Weight of the representation KL (trains the posterior towards the prior)."""
    num_bins: int = 255
    """Bins of the two-hot symexp reward and value distributions."""
    slow_critic_decay: float = 0.98
    """EMA decay of the slow critic (the critic's regularisation target)."""
    slow_critic_coef: float = 1.0
    """Weight of the critic's regulariser towards the slow critic's prediction."""
    return_norm_decay: float = 0.99
    """EMA decay of the 5th and 95th return percentiles that normalise advantages."""
    conv_depth: int = 16
    """Image observations: channels of the first convolution of the "minatar" encoder,
    or the base depth of the "dreamerv3" one (its four stages have conv_depth x 2, 3, 4
    and 4 channels; DreamerV3's smallest preset uses 4)."""
    image_net: str = "minatar"
    """Image encoder and decoder (image observations only). "minatar": two 3x3
    convolutions and a dense decoder, for MinAtar's 10x10 frames. "dreamerv3": DreamerV3's
    conv stack (Hafner et al. 2023; the dreamer 3.3.1 code's `rssm.Encoder`/`Decoder`):
    four stages of a 5x5 convolution and a 2x2 max-pool (RMSNorm, SiLU) down to 1/16 of
    the frame (4x4 for 64x64 frames), and a mirrored decoder of 2x upsampling and 5x5
    convolutions; height and width must be multiples of 16, pixels in [0, 1]. Its
    convolutions run in the forms `jaxrl.nn.conv` measured fastest on CPU (the same
    arithmetic as the plain convolutions)."""

    @property
    def sizes(self) -> dict[str, int]:
        return MODEL_SIZES[self.model_size]

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.train_every

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.steps_per_update

    @property
    def gradient_steps(self) -> int:
        """Gradient steps per update (see `train_ratio`)."""
        return round(self.train_ratio * self.steps_per_update / self.replayed_per_step)

    @property
    def replayed_per_step(self) -> int:
        return self.batch_size * self.batch_length

    @property
    def resolved_posterior(self) -> str:
        if self.posterior != "auto":
            return self.posterior
        return "history" if self.backbone == "gru" else "observation"

    def validate(self) -> DreamerConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "train_every", "train_ratio")
        cfg.check_positive(self, "batch_size", "batch_length", "buffer_size", "horizon")
        cfg.check_positive(self, "model_lr", "actor_lr", "critic_lr", "adam_eps")
        cfg.check_positive(self, "model_grad_clip", "actor_critic_grad_clip", "conv_depth")
        cfg.check_positive(self, "transformer_window", "transformer_heads", "num_backbone_layers")
        cfg.check(
            1 <= self.imagination_starts <= self.replayed_per_step,
            "imagination_starts",
            self.imagination_starts,
            f"in [1, batch_size * batch_length = {self.replayed_per_step}]",
        )
        cfg.check_choice(self, "backbone", BACKBONES)
        cfg.check_choice(self, "posterior", POSTERIORS)
        cfg.check_choice(self, "image_net", IMAGE_NETS)
        cfg.check_choice(self, "model_size", tuple(MODEL_SIZES))
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "lam", 0.0, 1.0)
        cfg.check(0.0 <= self.unimix < 1.0, "unimix", self.unimix, "in [0, 1)")
        cfg.check_range(self, "slow_critic_decay", 0.0, 1.0)
        cfg.check_range(self, "return_norm_decay", 0.0, 1.0)
        for name in ("entropy_coef", "free_nats", "dyn_scale", "rep_scale", "slow_critic_coef"):
            value = getattr(self, name)
            cfg.check(cfg.is_finite_number(value) and value >= 0, name, value, ">= 0")
        cfg.check(
            self.num_bins >= 3 and self.num_bins % 2 == 1,
            "num_bins",
            self.num_bins,
            "an odd integer >= 3 (so that 0 is a bin)",
        )
        cfg.check(
            self.total_steps >= self.steps_per_update,
            "total_steps",
            self.total_steps,
            f">= num_envs * train_every = {self.steps_per_update} (one update)",
        )
        replayed = self.train_ratio * self.steps_per_update
        cfg.check(
            replayed >= self.replayed_per_step
            and abs(replayed / self.replayed_per_step - self.gradient_steps) < 1e-9,
            "train_ratio",
            self.train_ratio,
            f"such that train_ratio * num_envs * train_every ({self.steps_per_update}) is a "
            f"positive multiple of batch_size * batch_length ({self.replayed_per_step}), "
            f"e.g. {self.replayed_per_step / self.steps_per_update:g} for one gradient step "
            "per update",
        )
        rows = self.buffer_size // self.num_envs
        cfg.check(
            rows >= self.batch_length,
            "buffer_size",
            self.buffer_size,
            f">= num_envs * batch_length = {self.num_envs * self.batch_length} (each "
            "environment's column must hold a whole sequence)",
        )
        cfg.check(
            self.learning_starts >= self.num_envs * self.batch_length,
            "learning_starts",
            self.learning_starts,
            f">= num_envs * batch_length = {self.num_envs * self.batch_length} (a whole "
            "sequence per environment before sampling)",
        )
        run_steps = self.num_updates * self.steps_per_update
        cfg.check(
            self.learning_starts < run_steps,
            "learning_starts",
            self.learning_starts,
            f"< total_steps={self.total_steps} (in whole updates: {run_steps}), or the agent "
            "never learns",
        )
        return self


# Per-environment presets: only budgets and model sizes, never the learning
# hyperparameters (one set everywhere).
PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {"total_steps": 100_000},
    "Acrobot-v1": {"total_steps": 100_000},
    "Pendulum-v1": {"total_steps": 100_000},
}
# MinAtar: 150k steps with the xs model, chosen on Breakout, where returns still rose
# from 100k to 150k (benchmarks/notes, "Dreamer on Breakout-MinAtar"). What each game
# reaches is its `dreamer_*` result in benchmarks/results; on Asterix and Freeway this
# budget did not beat random play (on Freeway the rare rewards leave the advantages ~0).
for _game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders"):
    PRESETS[f"{_game}-MinAtar"] = {"total_steps": 150_000, "model_size": "xs"}


def default_config(env: str = "CartPole-v1") -> DreamerConfig:
    """The preset for `env` (the defaults otherwise)."""
    return cfg.replace(DreamerConfig(env=env), **PRESETS.get(env, {}))
