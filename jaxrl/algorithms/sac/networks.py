"""SAC's actor: `SquashedGaussianActor`, a `TanhGaussian` (`jaxrl/nn/distributions.py`)
with a state-dependent standard deviation, acting in the normalised action box
[-1, 1]^d (the agent maps it to the environment's bounds, `to_env_action`).

The actor and the twin critics (`TwinQ`) are defined in the shared
`jaxrl/algorithms/actor_critic.py` (TD3 and the offline learners use them too) and
named here so SAC's networks are found where every algorithm keeps them.
"""

from __future__ import annotations

from jaxrl.algorithms.actor_critic import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
    TwinQ,
    squash_log_std,
)

__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "SquashedGaussianActor", "TwinQ", "squash_log_std"]
