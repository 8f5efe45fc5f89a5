"""IPPO: `jaxrl.algorithms.multiagent_ppo.MultiAgentPPO` with each agent's critic on its
own observation (de Witt et al. 2020). `jaxrl train ippo --env SimpleSpread-MPE`."""

from __future__ import annotations

from jaxrl.algorithms.multiagent_ppo import MultiAgentPPO

from .config import PRESETS, IPPOConfig


class IPPO(MultiAgentPPO):
    """Independent PPO: decentralised actors and critics (shared or separate parameters,
    feed-forward or recurrent actors)."""

    name = "ippo"
    Config = IPPOConfig
    presets = PRESETS
    centralised_critic = False
