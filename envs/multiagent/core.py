"""The multi-agent environment contract: stacked per-agent arrays on the single-agent API.

A `MultiAgentEnvironment` is an `Environment` (`envs/core.py`), so it keeps everything
the single-agent contract gives: pure `reset`/`step`, time-limit truncation separate
from termination, auto-reset and `info["final_observation"]`. What changes is the
shape of what flows through it, for `N = num_agents` agents:

    obs = {"agents": (N, *obs_shape), "state": (*state_shape,), "alive": (N,) bool,
           "action_mask": (N, A) bool}         (the mask only where the environment has one)
    action: (N, *action_shape)                 one action per agent, stacked
    reward: (N,) float32                       one reward per agent
    terminated, truncated: () bool             the episode ended (auto-reset follows)

* `obs["agents"][i]` is agent i's own observation; `obs["state"]` is the global state
  a centralised critic reads (MAPPO; Yu et al. 2022); `obs["alive"][i]` says whether
  agent i acts on this observation. An agent that leaves the episode early (a unit
  killed in SMAX) has `alive` False from then to the episode's end: its actions are
  ignored, its rewards are 0, and learners mask it out. Agent i's own trajectory
  ended in a terminal state on step t when it was alive in `obs_t` and is not in
  `info["final_observation"]` (see `agent_left`).
* `obs["action_mask"][i, a]` (optional: environments with `has_action_mask`, Discrete
  agents only) says whether action a is legal for agent i on this observation (SMAX's
  `get_avail_actions`: a unit cannot shoot an enemy out of range). Every agent has at
  least one legal action (one that left the episode keeps a no-op). Learners that read
  it choose among the legal actions only (IPPO and MAPPO: `jaxrl.nn.Categorical.masked`);
  an action outside the mask is the environment's to handle (SMAX ignores it).
* `terminated` / `truncated` are about the episode, as in the single-agent contract:
  `step` auto-resets when either is true. A per-agent done would make the episode's
  end ambiguous (JaxMARL marks it with an extra `"__all__"` key); with one episode
  flag and the `alive` mask every case is explicit.

Why stacked arrays and not dicts keyed by agent (JaxMARL's layout): agents with the
same spaces then share one leading axis, so a policy runs on all of them in one
batched call (shared parameters) or one `vmap` (separate parameters), and every
environment batches with `vmap` like a single-agent one. `to_dict`/`from_dict` give
JaxMARL's dict view for code that wants it (the JaxMARL adapter uses them).

Spaces: `agent_observation_space` and `agent_action_space` describe one agent,
`state_space` the global state. `observation_space` and `action_space` (what the
single-agent tools read) are the stacked spaces derived from them: a `spaces.Dict`
of the observation above and a `Box` of N actions (integer for discrete agents).

Subclasses write `reset_env`, `step_env` (returning the stacked observation, a
per-agent reward and the episode's termination flag) and the three per-agent spaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import spaces
from ..core import Environment

__all__ = ["MultiAgentEnvironment", "agent_left", "from_dict", "to_dict"]


class MultiAgentEnvironment(Environment):
    """Base class of multi-agent environments (see the module docstring)."""

    multi_agent = True
    num_agents: int = 1
    # Whether observations carry `"action_mask"` (N, num_actions): the legal actions.
    has_action_mask: bool = False

    @property
    def agent_names(self) -> tuple[str, ...]:
        """Names of the agents, in the order of the agent axis (JaxMARL's `agents`)."""
        return tuple(f"agent_{i}" for i in range(self.num_agents))

    # ------------------------------------------------------ per-agent spaces (subclasses)
    def agent_observation_space(self, params: Any) -> spaces.Space:
        """The space of one agent's observation `obs["agents"][i]`."""
        raise NotImplementedError(f"{type(self).__name__} must implement agent_observation_space")

    def agent_action_space(self, params: Any) -> spaces.Space:
        """The space of one agent's action `action[i]` (Discrete or a 1-D Box)."""
        raise NotImplementedError(f"{type(self).__name__} must implement agent_action_space")

    def state_space(self, params: Any) -> spaces.Space:
        """The space of the global state `obs["state"]` (for centralised critics)."""
        raise NotImplementedError(f"{type(self).__name__} must implement state_space")

    # ------------------------------------------------------ stacked spaces (derived)
    def observation_space(self, params: Any) -> spaces.Dict:
        agent = self.agent_observation_space(params)
        entries = {
            "agents": _stack_box(agent, self.num_agents),
            "state": self.state_space(params),
            "alive": spaces.Box(False, True, (self.num_agents,), jnp.bool_),
        }
        if self.has_action_mask:
            shape = (self.num_agents, self.agent_action_space(params).n)
            entries["action_mask"] = spaces.Box(False, True, shape, jnp.bool_)
        return spaces.Dict(entries)

    def action_space(self, params: Any) -> spaces.Box:
        """`num_agents` stacked actions: a Box of integers for Discrete agents."""
        agent = self.agent_action_space(params)
        if isinstance(agent, spaces.Discrete):
            return spaces.Box(0, agent.n - 1, (self.num_agents,), agent.dtype)
        return _stack_box(agent, self.num_agents)

    @property
    def num_actions(self) -> int:
        """Actions of one agent (Discrete agents only)."""
        space = self.agent_action_space(self.default_params)
        if not isinstance(space, spaces.Discrete):
            raise AttributeError(f"{self.name} has continuous agent actions")
        return space.n


def _stack_box(space: spaces.Space, n: int) -> spaces.Box:
    if not isinstance(space, spaces.Box):
        raise TypeError(f"stacked agents need Box or Discrete spaces, got {space!r}")
    low = np.broadcast_to(np.asarray(space.low), (n, *space.shape))
    high = np.broadcast_to(np.asarray(space.high), (n, *space.shape))
    return spaces.Box(low, high, (n, *space.shape), space.dtype)


def agent_left(alive: jax.Array, final_alive: jax.Array) -> jax.Array:
    """Agents whose own trajectory ended in a terminal state on a step: alive in the
    observation they acted on, gone in the step's `info["final_observation"]`."""
    return jnp.logical_and(alive, jnp.logical_not(final_alive))


def to_dict(stacked: Any, names: Sequence[str]) -> dict[str, Any]:
    """JaxMARL's view of per-agent arrays: `{name: leaf[i]}` for the leading agent axis."""
    return {name: jax.tree.map(lambda x, i=i: x[i], stacked) for i, name in enumerate(names)}


def from_dict(per_agent: Mapping[str, Any], names: Sequence[str]) -> Any:
    """Stacks `{name: value}` along a new leading agent axis in the order of `names`;
    raises `ValueError` naming missing or unexpected agents."""
    missing = [n for n in names if n not in per_agent]
    extra = [k for k in per_agent if k not in names and k != "__all__"]
    if missing or extra:
        raise ValueError(f"per-agent dict: missing agents {missing}, unexpected keys {extra}")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[per_agent[n] for n in names])
