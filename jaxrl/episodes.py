"""Evaluation episodes of a policy in an environment: `run_episodes`.

What lives here: the loop that plays fresh episodes with a policy's `act` and sums
their rewards, for every agent of a stacked training state. It takes the environment
and the policy as arguments and knows no algorithm class, so the contract
(`jaxrl.training.contract.EnvironmentAlgorithm.evaluate`) and `jaxrl.evaluation` can
both use it without importing each other. Restoring runs from their directory lives
in `jaxrl.evaluation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.acting import team_reward

# `act(state, obs, carry, reset, key, deterministic) -> (env_action, carry)`.
ActFn = Callable[..., tuple[jax.Array, Any]]


def run_episodes(
    env: Any,
    env_params: Any,
    act: ActFn,
    initial_carry: Callable[[int], Any],
    state: Any,
    key: jax.Array,
    num_episodes: int = 10,
    deterministic: bool = True,
) -> np.ndarray:
    """Per agent, the returns of `num_episodes` fresh episodes: shape (agents, n).

    `state` is a stacked training state (leading agent axis, with `params`). Each
    episode runs in its own environment copy until its first end (termination or time
    limit; `env_params.max_steps_in_episode` steps at most), starting from
    `initial_carry(num_episodes)` (a recurrent policy's initial state, or None); the
    policy acts with its mode unless `deterministic=False`. Rewards after an episode's
    end are not counted; per-agent rewards (a multi-agent environment) count their mean
    over agents (`acting.team_reward`).
    """

    def one_agent(agent_state, key):
        return agent_episodes(
            env, env_params, act, initial_carry, agent_state, key, num_episodes, deterministic
        )

    num_agents = jax.tree.leaves(state.params)[0].shape[0]
    keys = jax.random.split(key, num_agents)
    return np.asarray(jax.jit(jax.vmap(one_agent))(state, keys))


def agent_episodes(
    env: Any,
    env_params: Any,
    act: ActFn,
    initial_carry: Callable[[int], Any],
    agent_state: Any,
    key: jax.Array,
    num_episodes: int,
    deterministic: bool = True,
) -> jax.Array:
    """One agent's returns of `num_episodes` fresh episodes, shape (n,): pure and
    traceable, so an algorithm can evaluate inside its compiled update (the offline
    learners do, `jaxrl/algorithms/offline.py`). `run_episodes` vmaps it over agents."""
    max_steps = int(env_params.max_steps_in_episode)
    k_reset, k_run = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(k_reset, num_episodes), env_params
    )
    zeros = jnp.zeros((num_episodes,), jnp.float32)
    finished = jnp.zeros((num_episodes,), bool)
    init = (obs, env_state, initial_carry(num_episodes), ~finished, zeros, finished)

    def step(c, key):
        obs, env_state, carry, reset, total, finished = c
        k_act, k_env = jax.random.split(key)
        action, carry = act(agent_state, obs, carry, reset, k_act, deterministic)
        obs, env_state, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, num_episodes), env_state, action, env_params
        )
        done = jnp.logical_or(term, trunc)
        total = total + jnp.where(finished, 0.0, team_reward(reward, done))
        return (obs, env_state, carry, done, total, finished | done), None

    final, _ = jax.lax.scan(step, init, jax.random.split(k_run, max_steps))
    return final[4]
