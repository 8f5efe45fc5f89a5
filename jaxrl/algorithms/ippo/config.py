"""IPPO hyperparameters (the multi-agent PPO fields) and per-environment presets."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl.algorithms.multiagent_ppo import MultiAgentPPOConfig


@dataclasses.dataclass(frozen=True)
class IPPOConfig(MultiAgentPPOConfig):
    """Independent PPO (de Witt et al. 2020, "Is Independent Learning All You Need in
    the StarCraft Multi-Agent Challenge?"): every agent learns PPO on its own
    observation with its own critic, the other agents part of its environment.

    Defaults are JaxMARL's `ippo_ff_mpe.yaml` (16 environments, 128 steps, 4 epochs of
    4 minibatches, lr 2.5e-4 annealed). One update collects `num_envs * num_steps`
    environment steps (each one action of every agent).
    """


# Per-environment overrides of the defaults (SimpleSpread-MPE's are the defaults).
PRESETS: dict[str, dict[str, Any]] = {"SimpleSpread-MPE": {}}
