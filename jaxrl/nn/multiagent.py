"""Networks for N agents on a stacked agent axis: shared parameters with one-hot agent
ids, or separate parameters per agent; the actors and critics of IPPO and MAPPO.

Two ways to give N agents a network (a config switch of every multi-agent algorithm):

* **shared** parameters: one network for all agents, each agent's input extended by its
  one-hot id (`with_agent_ids`), so the agents can still act differently (parameter
  sharing with agent indication: Gupta et al. 2017; Terry et al. 2020, "Revisiting
  Parameter Sharing in Multi-Agent Deep Reinforcement Learning");
* **separate** parameters: one network per agent, its parameters stacked on a leading
  agent axis, the agents run under one `vmap`.

`AgentNetwork` wraps a flax module with that choice: `init` and `apply` take inputs with
the agent axis where `in_axes` says, and both kinds run the module under `jax.vmap` over
the agents (the shared parameters broadcast), so the rest of an algorithm never asks
which kind it has. `Actor` (feed-forward or a GRU) and `Critic` are the two networks
IPPO and MAPPO combine; the Q-network of PQN and PQN-VDN is `jaxrl.nn.qnetwork.QNetwork`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import prng

from .actor_critic import Distribution, PolicyHead, ValueHead
from .layers import MLP, ScannedGRU, flatten_obs

__all__ = ["PARAMETER_SHARING", "Actor", "AgentNetwork", "Critic", "with_agent_ids"]

# How N agents get their parameters (see the module docstring).
PARAMETER_SHARING = ("shared", "separate")


def with_agent_ids(x: jax.Array, agent_axis: int) -> jax.Array:
    """`x (..., N, ..., F)` with each agent's one-hot id appended to its features:
    `(..., N, ..., F + N)`; `agent_axis` is where N is (negative counts from the end)."""
    n = x.shape[agent_axis]
    axis = agent_axis % x.ndim
    shape = [1] * (x.ndim - 1) + [n]
    shape[axis] = n
    ids = jnp.eye(n, dtype=x.dtype).reshape(shape)
    ids = jnp.broadcast_to(ids, x.shape[:-1] + (n,))
    return jnp.concatenate([x, ids], axis=-1)


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """A flax module run for `num_agents` agents with shared or separate parameters.

    `in_axes` gives, per positional input, the axis of the agents (None: the same input
    for every agent, e.g. an episode's reset flags); `out_axes` where outputs put it.
    With `sharing="shared"` the inputs at `id_input` (index into the inputs, None for
    none) get the one-hot agent ids appended before the module sees them.
    """

    module: nn.Module
    num_agents: int
    sharing: str
    in_axes: tuple[int | None, ...]
    out_axes: Any = 0
    id_input: int | None = 0

    def __post_init__(self) -> None:
        if self.sharing not in PARAMETER_SHARING:
            raise ValueError(
                f"parameter sharing must be one of {list(PARAMETER_SHARING)}, got {self.sharing!r}"
            )

    @property
    def separate(self) -> bool:
        return self.sharing == "separate"

    def _inputs(self, inputs: tuple) -> tuple:
        if self.separate or self.id_input is None:
            return inputs
        i = self.id_input
        x = with_agent_ids(inputs[i], self.in_axes[i])
        return (*inputs[:i], x, *inputs[i + 1 :])

    def init(self, key: jax.Array, *inputs: Any, method: str | None = None) -> Any:
        """Parameters: one set (shared) or `num_agents` sets stacked on axis 0."""
        inputs = self._inputs(inputs)
        kwargs = {} if method is None else {"method": method}
        if self.separate:
            keys = prng.split(key, self.num_agents)
            return jax.vmap(
                lambda k, *xs: self.module.init(k, *xs, **kwargs), in_axes=(0, *self.in_axes)
            )(keys, *inputs)
        first = tuple(
            x if axis is None else jax.tree.map(lambda leaf, a=axis: jnp.take(leaf, 0, axis=a), x)
            for x, axis in zip(inputs, self.in_axes, strict=True)
        )
        return self.module.init(key, *first, **kwargs)

    def apply(self, params: Any, *inputs: Any, method: str | None = None) -> Any:
        """The module for every agent; outputs with the agent axis at `out_axes`."""
        inputs = self._inputs(inputs)
        kwargs = {} if method is None else {"method": method}
        fn = lambda p, *xs: self.module.apply(p, *xs, **kwargs)  # noqa: E731
        param_axis = 0 if self.separate else None
        return jax.vmap(fn, in_axes=(param_axis, *self.in_axes), out_axes=self.out_axes)(
            params, *inputs
        )


class Actor(nn.Module):
    """A policy over time-major inputs: `(carry, obs (T, B, F), resets (T, B)) ->
    (carry, distribution over (T, B))`.

    Feed-forward (`rnn_hidden_size = 0`): an MLP torso and a policy head, the carry
    passes through untouched. Recurrent: an MLP embedding, a GRU whose carry `(B, H)`
    restarts where `resets` marks an episode's first step (`ScannedGRU`), then the
    torso and head, as `jaxrl.nn.RecurrentActorCritic`'s actor half.
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    rnn_hidden_size: int = 0

    @nn.compact
    def __call__(
        self, carry: jax.Array | None, obs: jax.Array, resets: jax.Array
    ) -> tuple[jax.Array | None, Distribution]:
        x = flatten_obs(obs, 2)
        if self.rnn_hidden_size:
            x = MLP(self.hidden_sizes, self.activation, name="embed")(x)
            carry, x = ScannedGRU(self.rnn_hidden_size, name="gru")(carry, x, resets)
        x = MLP(self.hidden_sizes, self.activation, name="actor_torso")(x)
        return carry, PolicyHead(self.action_dim, discrete=True, name="actor_head")(x)


class Critic(nn.Module):
    """A state value `x (B, F) -> V (B,)`: an MLP torso and a value head (the critic of
    `jaxrl.nn.ActorCritic`, on whatever input the algorithm gives it)."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation, name="critic_torso")(flatten_obs(x, 1))
        return ValueHead(name="critic_head")(x)
