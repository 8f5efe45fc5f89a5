"""MAPPO: `jaxrl.algorithms.multiagent_ppo.MultiAgentPPO` with a centralised critic on the
global state (Yu et al. 2022). `jaxrl train mappo --env SimpleSpread-MPE`."""

from __future__ import annotations

from jaxrl.algorithms.multiagent_ppo import MultiAgentPPO

from .config import PRESETS, MAPPOConfig


class MAPPO(MultiAgentPPO):
    """Decentralised actors, a centralised critic `V(s, i)` on the environment's global
    state `obs["state"]` (shared or separate parameters, feed-forward or recurrent
    actors)."""

    name = "mappo"
    Config = MAPPOConfig
    presets = PRESETS
    centralised_critic = True
