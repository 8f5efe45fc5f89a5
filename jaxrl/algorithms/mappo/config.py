"""MAPPO hyperparameters (the multi-agent PPO fields) and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl.algorithms.multiagent_ppo import MultiAgentPPOConfig


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(MultiAgentPPOConfig):
    """Multi-agent PPO with a centralised critic (Yu et al. 2022, "The Surprising
    Effectiveness of PPO in Cooperative Multi-Agent Games"): decentralised actors on
    their own observations, a critic on the environment's global state (with the
    agent's one-hot id under shared parameters: Yu et al.'s agent-specific global
    state), used only in training.

    Defaults are IPPO's (JaxMARL's `ippo_ff_mpe.yaml`), so the two compare like for like.
    """


# Per-environment overrides of the defaults (SimpleSpread-MPE's are the defaults).
PRESETS: dict[str, dict[str, Any]] = {"SimpleSpread-MPE": {}}
