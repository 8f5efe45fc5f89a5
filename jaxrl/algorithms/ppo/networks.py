"""PPO's networks are the shared on-policy actor-critics of `jaxrl.nn.actor_critic`;
this module keeps the old import path `jaxrl.algorithms.ppo.networks` working."""

from jaxrl.nn.actor_critic import (
    ActorCritic,
    Distribution,
    PolicyHead,
    RecurrentActorCritic,
    ValueHead,
)

__all__ = ["ActorCritic", "Distribution", "PolicyHead", "RecurrentActorCritic", "ValueHead"]
