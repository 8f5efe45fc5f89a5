"""MemoryChain-v0: recall a binary cue after `memory_length` uninformative steps.

Design (one episode, `L = memory_length` >= 1, episode length `L + 1` steps):

* `reset` draws a cue `c ~ Bernoulli(0.5)` and shows it in the first
  observation `o_0` only; the next `L` observations `o_1 .. o_L` hide it.
* The actions `a_0 .. a_{L-1}` are ignored (reward 0).
* The action `a_L`, taken on seeing `o_L`, is the answer: reward +1 if it
  equals `c`, -1 otherwise, and the episode terminates.

Observation (float32, shape `(3,)`): `[c == 0, c == 1, progress]` where the
one-hot cue is zero except in the first observation, and
`progress = min(t, L) / L` is a time feature: it reaches 1 exactly when the
answer is due, so a memory-based policy knows when to answer.

Returns: the optimal return is +1 (an agent that stores the cue answers it).
An agent with no memory sees the same observation at the answer step whichever
cue was drawn, so any memoryless policy answers correctly with probability
1/2 and has expected return 0 (1/2 * (+1) + 1/2 * (-1)).

Actions are {0, 1}; an out-of-range answer counts as wrong. The default time
limit is one step past the answer, so it never binds; an override of
`max_steps_in_episode <= L` cuts episodes before the answer (return 0).
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

from .. import spaces
from ..core import Environment, EnvParams, EnvState


@struct.dataclass
class MemoryChainState(EnvState):
    cue: jax.Array  # int32 in {0, 1}
    time: jax.Array


@struct.dataclass
class MemoryChainParams(EnvParams):
    """MemoryChain has no physics; only the (non-binding by default) time limit."""

    max_steps_in_episode: int = 7


class MemoryChain(Environment[MemoryChainState, MemoryChainParams]):
    """Answer at the last step with the cue shown at the first. See the module docstring."""

    stochastic_step = False  # only the reset draws (the cue)
    obs_from_state = True

    def __init__(self, memory_length: int = 5) -> None:
        if not isinstance(memory_length, numbers.Integral) or isinstance(memory_length, bool):
            raise TypeError(f"MemoryChain: memory_length must be an int, got {memory_length!r}")
        memory_length = int(memory_length)
        if memory_length < 1:
            raise ValueError(
                f"MemoryChain: memory_length = {memory_length} is invalid: must be at least 1"
            )
        self.memory_length = memory_length

    @property
    def name(self) -> str:
        return "MemoryChain-v0"

    @property
    def default_params(self) -> MemoryChainParams:
        return MemoryChainParams(max_steps_in_episode=self.memory_length + 2)

    def reset_env(
        self, key: jax.Array, params: MemoryChainParams
    ) -> tuple[jax.Array, MemoryChainState]:
        cue = prng.bernoulli(key).astype(jnp.int32)
        state = MemoryChainState(cue=cue, time=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: MemoryChainState, action: jax.Array, params: MemoryChainParams
    ) -> tuple[jax.Array, MemoryChainState, jax.Array, jax.Array, dict[str, Any]]:
        del key
        answering = state.time == self.memory_length
        correct = action == state.cue
        reward = jnp.where(answering, jnp.where(correct, 1.0, -1.0), 0.0).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, answering, {}

    def get_obs(
        self, state: MemoryChainState, params: MemoryChainParams | None = None
    ) -> jax.Array:
        show = state.time == 0
        cue_one_hot = jax.nn.one_hot(state.cue, 2) * show
        progress = jnp.minimum(state.time, self.memory_length) / self.memory_length
        return jnp.concatenate([cue_one_hot, progress[None]]).astype(jnp.float32)

    def observation_space(self, params: MemoryChainParams) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (3,), jnp.float32)

    def action_space(self, params: MemoryChainParams) -> spaces.Discrete:
        return spaces.Discrete(2)

    def __repr__(self) -> str:
        return f"MemoryChain(memory_length={self.memory_length})"
