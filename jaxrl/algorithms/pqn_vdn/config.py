"""PQN-VDN hyperparameters (PQN's, `jaxrl/algorithms/pqn_common.py`, with their own
defaults, and parameter sharing) and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl import config as cfg
from jaxrl.algorithms.pqn_common import SWEEPABLE, PQNFields
from jaxrl.nn.multiagent import PARAMETER_SHARING


@dataclasses.dataclass(frozen=True)
class PQNVDNConfig(PQNFields):
    """PQN with value decomposition for N cooperating agents (VDN: Sunehag et al. 2018,
    "Value-Decomposition Networks For Cooperative Multi-Agent Learning"; PQN: Gallici et
    al. 2024, "Simplifying Deep Temporal Difference Learning"; purejaxql's PQN-VDN).

    The team's Q-value is the sum of the agents' Q-values, each agent's Q-network
    reading only its own observation; it is learned from the team reward (the mean of
    the agents' rewards) with PQN's Q(lambda) targets, without replay buffer or target
    network. Defaults follow purejaxql's `pqn_vdn_rnn_smax.yaml` (lr 2.5e-4 annealed,
    lambda 0.85, gradient norm 1, 4 epochs), scaled down to 32 environments. The fields
    are PQN's (`PQNFields`) with these defaults, and parameter sharing.
    """

    env: str = "SimpleSpread-MPE"
    """Multi-agent environment id with Discrete agent actions (see `jaxrl envs`)."""
    total_steps: int = 1_000_000
    """Environment steps per run (all agents act in one step; whole updates)."""
    num_envs: int = 32
    """Environments stepped in parallel (vmap) per run."""
    num_steps: int = 32
    """Rollout length per environment and update."""
    num_minibatches: int = 4
    """Minibatches (gradient steps) per epoch."""
    lr: float = 2.5e-4
    """Learning rate."""
    max_grad_norm: float = 1.0
    """Clip the gradient to this global L2 norm before the optimiser."""
    q_lambda: float = 0.85
    """Lambda of the Q(lambda) targets (0: one-step Q-learning, 1: Monte-Carlo returns)."""
    eps_start: float = 1.0
    """Epsilon-greedy exploration (each agent on its own): epsilon at the first update."""
    reward_scale: float = 1.0
    """The team reward is multiplied by this for learning (returns stay the environment's)."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from max Q_tot(final observation); False: terminal,
    as purejaxql does."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer sizes of the Q-network."""
    parameter_sharing: str = "shared"
    """How agents get parameters: "shared" (one Q-network, one-hot agent ids in its inputs)
    or "separate" (one Q-network per agent, on a leading agent axis)."""

    def validate(self) -> PQNVDNConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_choice(self, "parameter_sharing", PARAMETER_SHARING)
        return self


__all__ = ["PRESETS", "SWEEPABLE", "PQNVDNConfig"]

# Per-environment overrides of the defaults (SimpleSpread-MPE's are the defaults).
PRESETS: dict[str, dict[str, Any]] = {"SimpleSpread-MPE": {}}
