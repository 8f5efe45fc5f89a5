"""PQN-VDN hyperparameters, their validation, and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.qlearning import check_epsilon_schedule
from jaxrl.nn.multiagent import PARAMETER_SHARING

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = (
    "lr",
    "gamma",
    "q_lambda",
    "max_grad_norm",
    "eps_start",
    "eps_end",
    "eps_fraction",
    "reward_scale",
)
OPTIMIZERS = ("radam", "adam")
NORMS = ("layer_norm", "none")


@dataclasses.dataclass(frozen=True)
class PQNVDNConfig:
    """PQN with value decomposition for N cooperating agents (VDN: Sunehag et al. 2018,
    "Value-Decomposition Networks For Cooperative Multi-Agent Learning"; PQN: Gallici et
    al. 2024, "Simplifying Deep Temporal Difference Learning"; purejaxql's PQN-VDN).

    The team's Q-value is the sum of the agents' Q-values, each agent's Q-network
    reading only its own observation; it is learned from the team reward (the mean of
    the agents' rewards) with PQN's Q(lambda) targets, without replay buffer or target
    network. Defaults follow purejaxql's `pqn_vdn_rnn_smax.yaml` (lr 2.5e-4 annealed,
    lambda 0.85, gradient norm 1, 4 epochs), scaled down to 32 environments.
    """

    env: str = "SimpleSpread-MPE"
    """Multi-agent environment id with Discrete agent actions (see `jaxrl envs`)."""
    total_steps: int = 1_000_000
    """Environment steps per run (all agents act in one step; whole updates)."""
    num_envs: int = 32
    """Environments stepped in parallel (vmap) per run."""
    num_steps: int = 32
    """Rollout length per environment and update."""
    num_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches (gradient steps) per epoch."""
    lr: float = 2.5e-4
    """Learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    optimizer: str = "radam"
    """Optimiser: "radam" (as purejaxql's PQN) or "adam"."""
    adam_eps: float = 1e-8
    """Epsilon of Adam/RAdam's denominator."""
    max_grad_norm: float = 1.0
    """Clip the gradient to this global L2 norm before the optimiser."""
    gamma: float = 0.99
    """Discount factor."""
    q_lambda: float = 0.85
    """Lambda of the Q(lambda) targets (0: one-step Q-learning, 1: Monte-Carlo returns)."""
    eps_start: float = 1.0
    """Epsilon-greedy exploration (each agent on its own): epsilon at the first update."""
    eps_end: float = 0.05
    """Epsilon after the decay (and for `jaxrl eval` sampling)."""
    eps_fraction: float = 0.2
    """Fraction of the run over which epsilon decays linearly from eps_start to eps_end."""
    reward_scale: float = 1.0
    """The team reward is multiplied by this for learning (returns stay the environment's)."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from max Q_tot(final observation); False: terminal,
    as purejaxql does."""
    norm: str = "layer_norm"
    """Normalisation after each hidden layer: "layer_norm" (PQN's key ingredient) or "none"."""
    parameter_sharing: str = "shared"
    """How agents get parameters: "shared" (one Q-network, one-hot agent ids in its inputs)
    or "separate" (one Q-network per agent, on a leading agent axis)."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer sizes of the Q-network."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> PQNVDNConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "num_steps", "num_epochs")
        cfg.check_positive(self, "num_minibatches", "lr", "max_grad_norm", "adam_eps")
        cfg.check_positive(self, "reward_scale")
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "q_lambda", 0.0, 1.0)
        check_epsilon_schedule(self)
        cfg.check_choice(self, "optimizer", OPTIMIZERS)
        cfg.check_choice(self, "norm", NORMS)
        cfg.check_choice(self, "parameter_sharing", PARAMETER_SHARING)
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
        cfg.check(
            self.batch_size % self.num_minibatches == 0,
            "num_minibatches",
            self.num_minibatches,
            f"a divisor of num_envs * num_steps = {self.batch_size}",
        )
        return self


# Per-environment overrides of the defaults (SimpleSpread-MPE's are the defaults).
PRESETS: dict[str, dict[str, Any]] = {"SimpleSpread-MPE": {}}
