"""What the multi-agent algorithms (IPPO and MAPPO in `multiagent_ppo.py`, PQN-VDN in
`pqn_vdn/`) share when they set up on a multi-agent environment.

* `discrete_agents`: the check that the environment is a multi-agent one
  (`envs/multiagent/core.py`) whose agents take Discrete actions, before anything is
  built, and its agent and action counts;
* `action_mask`: the legal actions of an observation (`obs["action_mask"] (..., N, A)`,
  which environments such as SMAX add; None when the environment has none).

Their rollouts are `jaxrl.rollout.rollout` over `rollout.EnvLoop`s; the networks for N
agents are `jaxrl.nn.multiagent`'s.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxrl import config as cfg
from jaxrl import envs

__all__ = ["action_mask", "discrete_agents"]


def discrete_agents(algorithm: str, config: Any, env: Any, env_params: Any) -> tuple[int, int]:
    """`(num_agents, num_actions)` of `env`; a `ConfigError` naming `env` (`config.env`)
    unless it is a multi-agent environment with Discrete agent actions."""
    cfg.check(
        getattr(env, "multi_agent", False),
        "env",
        config.env,
        f"a multi-agent environment ({envs.registered(multi_agent=True)} or jaxmarl:<id>)",
    )
    space = env.agent_action_space(env_params)
    cfg.check(
        isinstance(space, envs.spaces.Discrete),
        "env",
        config.env,
        f"an environment with Discrete agent actions ({algorithm}), got {space!r}",
    )
    return int(env.num_agents), int(space.n)


def action_mask(obs: dict[str, Any]) -> jax.Array | None:
    """The observation's legal actions `(..., N, A)` bool, or None without a mask."""
    return obs.get("action_mask")
