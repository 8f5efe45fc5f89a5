"""On-policy rollouts: a policy acting in `num_envs` environments for `num_steps` steps.

`rollout` is the `lax.scan` an on-policy algorithm (PPO, A2C; IPPO and MAPPO next)
runs before it learns. At each step the policy acts on the batch of observations, the
environments step (`jaxrl.acting.step_envs`) and the episodes are tracked
(`jaxrl.acting.track_episodes`). It returns the time-major `Trajectory` and what the
next rollout continues from: the `EnvLoop`, the policy's state and the key.

The policy is a function argument, `policy(policy_state, obs, reset, key) ->
(policy_state, PolicyStep)`, so each algorithm decides what it carries from step to
step (a recurrent state, observation statistics, or nothing) and what it keeps per step
for learning (`PolicyStep.extras`: a log-probability, a value, the normalised
observation). Observations, actions and extras may be any pytree with the
environment axis first (e.g. the stacked per-agent dict of a multi-agent
environment, `envs/multiagent/core.py`); episode ends are one per environment,
`(num_envs,)`, rewards one per environment or one per agent `(num_envs, num_agents)`
(episode statistics then track the mean over agents, `acting.team_reward`). Like Brax's
`acting.generate_unroll`, this module knows no network, loss or optimiser.

What lives here: `rollout`, `EnvLoop` (the environments' half of the carry),
`PolicyStep`, `Trajectory`, and `scale_rewards` (return-based reward scaling of a
rollout's rewards). The per-step pieces it composes are in `jaxrl/acting.py`;
advantages and returns in `jaxrl/returns.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import acting, prng
from jaxrl.running_stats import RunningStats

__all__ = [
    "EnvLoop",
    "Policy",
    "PolicyStep",
    "Trajectory",
    "rollout",
    "scale_rewards",
]


class PolicyStep(NamedTuple):
    """What a policy returns for one step of every environment."""

    action: Any
    """The action to store and learn from (e.g. a Gaussian sample before clipping)."""
    extras: Any = None
    """Anything else to keep per step for learning (any pytree, batch axis first)."""
    env_action: Any = None
    """The action the environments receive; None: `action` itself."""


# `policy(policy_state, obs (B, ...), reset (B,), key) -> (policy_state, PolicyStep)`;
# `reset` marks the environments whose `obs` starts a new episode.
Policy = Callable[[Any, Any, jax.Array, jax.Array], tuple[Any, PolicyStep]]


@struct.dataclass
class EnvLoop:
    """The environments' half of a rollout's carry, one entry per environment (every
    leaf has the environment axis first): what the next step, and the next update's
    rollout, continue from."""

    env_state: Any
    obs: Any  # the raw observation to act on next, (num_envs, ...)
    done: jax.Array  # the last step ended an episode, so `obs` starts a new one (num_envs,)
    episodes: acting.EpisodeStats  # return and length of the running episodes

    @classmethod
    def reset(cls, env: Any, env_params: Any, key: jax.Array, num_envs: int) -> EnvLoop:
        """`num_envs` freshly reset environments (`acting.reset_envs` with `key`), every
        one at the start of an episode."""
        obs, env_state = acting.reset_envs(env, env_params, key, num_envs)
        done = jnp.ones((num_envs,), jnp.bool_)
        return cls(env_state, obs, done, acting.EpisodeStats.zeros(num_envs))


@struct.dataclass
class Trajectory:
    """A rollout, time-major: every leaf is `(num_steps, num_envs, ...)`."""

    obs: Any  # the raw observation acted on
    action: Any  # `PolicyStep.action`
    extras: Any  # `PolicyStep.extras`
    reward: jax.Array  # the environment's reward, unscaled
    terminated: jax.Array  # the step reached a terminal state
    truncated: jax.Array  # the step hit a time limit
    done: jax.Array  # terminated | truncated: the next observation starts a new episode
    reset: jax.Array  # `obs` starts a new episode (the previous step's `done`)
    final: Any  # `record_final(policy_state, final_observation)`; None without it
    finished: acting.FinishedEpisodes  # the episodes each step ended, for `episode_metrics`


def rollout(
    env: Any,
    env_params: Any,
    policy: Policy,
    loop: EnvLoop,
    policy_state: Any,
    key: jax.Array,
    num_steps: int,
    *,
    record_final: Callable[[Any, Any], Any] | None = None,
) -> tuple[EnvLoop, Any, jax.Array, Trajectory]:
    """Steps every environment of `loop` `num_steps` times with `policy` in one `lax.scan`.

    Each step splits the key into `(key, k_act, k_env)` (`jaxrl.prng.split`), calls
    `policy(policy_state, loop.obs, loop.done, k_act)`, steps the environments with
    `k_env` (`acting.step_envs`; environments reset themselves at an episode's end),
    and tracks the episodes on the raw reward.

    With `record_final`, each step also keeps `record_final(policy_state,
    info["final_observation"])`, with the policy state after the step: what
    bootstrapping truncated episodes needs (Pardo et al. 2018; e.g. the normalised
    final observation, and a recurrent policy's state there), in `Trajectory.final`.

    Returns `(loop, policy_state, key, trajectory)`: the environments, policy state and
    key after the last step, and the time-major `Trajectory`. `acting.episode_metrics(
    trajectory.finished)` summarises the episodes it ended.
    """

    def step(carry: tuple[EnvLoop, Any, jax.Array], _) -> tuple[tuple, Trajectory]:
        loop, policy_state, key = carry
        key, k_act, k_env = prng.split(key, 3)
        policy_state, out = policy(policy_state, loop.obs, loop.done, k_act)
        env_action = out.action if out.env_action is None else out.env_action
        obs, env_state, reward, terminated, truncated, info = acting.step_envs(
            env, env_params, k_env, loop.env_state, env_action
        )
        done = jnp.logical_or(terminated, truncated)
        episodes, finished = acting.track_episodes(
            loop.episodes, acting.team_reward(reward, done), done
        )
        final = None
        if record_final is not None:
            final = record_final(policy_state, info["final_observation"])
        transition = Trajectory(
            obs=loop.obs,
            action=out.action,
            extras=out.extras,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            done=done,
            reset=loop.done,
            final=final,
            finished=finished,
        )
        return (EnvLoop(env_state, obs, done, episodes), policy_state, key), transition

    carry = (loop, policy_state, key)
    (loop, policy_state, key), trajectory = jax.lax.scan(step, carry, None, length=num_steps)
    return loop, policy_state, key, trajectory


def scale_rewards(
    stats: RunningStats,
    discounted_return: jax.Array,
    reward: jax.Array,
    done: jax.Array,
    gamma: jax.Array | float,
    clip: float | None = None,
) -> tuple[RunningStats, jax.Array, jax.Array]:
    """Return-based reward scaling (Engstrom et al. 2020) of a rollout's rewards.

    `acting.scale_reward` applied step by step over time-major `reward` and `done`
    `(T, B)`: each step updates the running statistics of the discounted return before
    its reward is scaled, exactly as if it ran inside the rollout. Returns
    `(stats, discounted_return, scaled rewards (T, B))` with the statistics and the
    discounted return to carry to the next rollout.
    """

    def step(carry: tuple[RunningStats, jax.Array], inputs: tuple[jax.Array, jax.Array]):
        stats, discounted_return = carry
        stats, discounted_return, scaled = acting.scale_reward(
            stats, discounted_return, *inputs, gamma, clip
        )
        return (stats, discounted_return), scaled

    carry = (stats, discounted_return)
    (stats, discounted_return), scaled = jax.lax.scan(step, carry, (reward, done))
    return stats, discounted_return, scaled
