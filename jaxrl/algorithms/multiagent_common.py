"""What the multi-agent algorithms (IPPO and MAPPO in `multiagent_ppo.py`, PQN-VDN in
`pqn_vdn/`) share when they set up on a multi-agent environment.

* `discrete_agents`: the check that the environment is a multi-agent one
  (`envs/multiagent/core.py`) whose agents take Discrete actions, before anything is
  built, and its agent and action counts;
* `action_mask`: the legal actions of an observation (`obs["action_mask"] (..., N, A)`,
  which environments such as SMAX add; None when the environment has none);
* `legal_q_values` and `legal_epsilon_greedy`: Q-learning within the legal actions
  (PQN-VDN): the greedy action and the bootstrap's max over legal actions only, and
  exploration uniform over them. (IPPO and MAPPO mask their policy's logits instead:
  `jaxrl.nn.Categorical.masked`.)

Their rollouts are `jaxrl.rollout.rollout` over `rollout.EnvLoop`s; the networks for N
agents are `jaxrl.nn.multiagent`'s.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl import config as cfg
from jaxrl import envs, prng
from jaxrl.algorithms.qlearning import epsilon_greedy

__all__ = ["action_mask", "discrete_agents", "legal_epsilon_greedy", "legal_q_values"]


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


def legal_q_values(q_values: jax.Array, mask: jax.Array | None) -> jax.Array:
    """`q_values (..., A)` with every illegal action's value the dtype's most negative
    finite number, so `max` and `argmax` are over the legal actions (purejaxql's PQN-VDN
    on SMAX); unchanged without a mask."""
    if mask is None:
        return q_values
    return jnp.where(mask, q_values, jnp.finfo(q_values.dtype).min)


def legal_epsilon_greedy(
    key: jax.Array, q_values: jax.Array, epsilon: jax.Array | float, mask: jax.Array | None
) -> jax.Array:
    """Epsilon-greedy within the legal actions: with probability `epsilon` an action drawn
    uniformly from the legal ones (the argmax of uniform noise over them), else the legal
    action of highest value. Without a mask it is `qlearning.epsilon_greedy` itself."""
    if mask is None:
        return epsilon_greedy(key, q_values, epsilon)
    k_explore, k_action = prng.split(key)
    greedy = jnp.argmax(legal_q_values(q_values, mask), axis=-1).astype(jnp.int32)
    noise = jnp.where(mask, prng.uniform(k_action, q_values.shape), -1.0)
    random = jnp.argmax(noise, axis=-1).astype(jnp.int32)
    return jnp.where(prng.uniform(k_explore, greedy.shape) < epsilon, random, greedy)
