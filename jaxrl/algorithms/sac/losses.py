"""SAC's losses (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
sec. 4-5), named here where every algorithm keeps its losses.

They are defined in the shared `jaxrl/algorithms/actor_critic.py`, because the offline
learners on the SAC backbone (SAC-N/EDAC, CQL) use them too: `soft_td_target` (the soft
Bellman backup with the clipped double-Q), `actor_loss` (`soft_actor_loss`: maximise the
soft value), `temperature_loss` (alpha's), and the twin critics' `twin_critic_loss` and
`clipped_double_q` shared with TD3.

Shapes: `q` holds the critics' values, `(2, B)`; log-probabilities and targets are
`(B,)`. Targets come from the n-step batch of `jaxrl/replay/nstep.py` through
`offpolicy.td_target` (reward + discount * value, no gradient), so a termination
stops the bootstrap and a time limit does not.
"""

from __future__ import annotations

from jaxrl.algorithms.actor_critic import (
    clipped_double_q,
    soft_td_target,
    temperature_loss,
    twin_critic_loss,
)
from jaxrl.algorithms.actor_critic import soft_actor_loss as actor_loss

__all__ = [
    "actor_loss",
    "clipped_double_q",
    "soft_td_target",
    "temperature_loss",
    "twin_critic_loss",
]
