"""TD3's actor: `DeterministicActor`, `tanh(MLP(obs))` in the normalised action box
[-1, 1]^d. It and the twin critics (`TwinQ`) are defined in the shared
`jaxrl/algorithms/actor_critic.py` (SAC, TD3+BC and ReBRAC use them too) and named
here so TD3's networks are found where every algorithm keeps them."""

from __future__ import annotations

from jaxrl.algorithms.actor_critic import DeterministicActor, TwinQ

__all__ = ["DeterministicActor", "TwinQ"]
