"""Rollout pieces: the per-step bookkeeping of an agent acting in a batch of environments.

Named after Brax's `brax/training/acting.py`, which holds the same job for Brax's
agents. Every agent that steps `num_envs` environments in a `lax.scan` needs the same
few things around its policy, and writes them here once:

* `reset_envs` / `step_envs`: one key split into one key per environment, and the
  environment's `reset` / `step` `vmap`ped over the batch;
* `EpisodeStats` / `track_episodes` / `episode_metrics`: the running return and
  length of every environment's episode, what finished on a step, and the
  per-update summary (`episodes`, `episode_return`, `episode_length`) that the
  driver logs;
* `normalize_obs`: observation normalisation by running statistics;
* `scale_reward`: return-based reward scaling (Engstrom et al. 2020).

Each piece is a pure function of small pytrees (safe under `jit`, `vmap` and
`lax.scan`) that an agent composes in its rollout step; the on-policy rollout
(`jaxrl/rollout.py`: PPO, A2C) is built on them, and off-policy agents (DQN, SAC)
and world-model agents reuse them. The
running statistics themselves live in `jaxrl/running_stats.py`. The environment
wrappers (`jaxrl.envs.wrappers`) use the same pieces for the same jobs inside an
environment stack. Policies, losses and buffers do not live here.

This module depends on jax, `jaxrl.prng` and `jaxrl.running_stats` only (an
environment is anything with `reset(key, params)` / `step(key, state, action,
params)`), so `jaxrl.envs` can import it without a cycle.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl import prng
from jaxrl.running_stats import RunningStats, normalize, update_stats

__all__ = [
    "reset_envs",
    "step_envs",
    "EpisodeStats",
    "FinishedEpisodes",
    "track_episodes",
    "team_reward",
    "episode_metrics",
    "normalize_obs",
    "scale_reward",
]


# --------------------------------------------------------------------------- environments


def reset_envs(env: Any, params: Any, key: jax.Array, num_envs: int) -> tuple[Any, Any]:
    """Resets `num_envs` copies of `env`: `(obs, state)`, each with a leading batch axis.

    `key` is split into one key per copy (`jaxrl.prng.split`, equal to
    `jax.random.split`); `params` are shared by all copies.
    """
    keys = prng.split(key, num_envs)
    return jax.vmap(env.reset, in_axes=(0, None))(keys, params)


def step_envs(env: Any, params: Any, key: jax.Array, state: Any, action: Any) -> tuple:
    """Steps a batch of environments once: `env.step` `vmap`ped over `state` and `action`.

    Returns `env.step`'s tuple `(obs, state, reward, terminated, truncated, info)`,
    each with the batch axis. `key` is split into one key per copy, so one key per
    rollout step is enough. A jaxrl `Environment` steps the batch with its
    `step_batch` (the same `vmap`, unless a batch-wide wrapper such as
    `envs.optimistic_resets.OptimisticResets` replaces it).
    """
    num_envs = jax.tree.leaves(state)[0].shape[0]
    keys = prng.split(key, num_envs)
    step_batch = getattr(env, "step_batch", None)  # a jaxrl `Environment`'s batched step
    if step_batch is not None:
        return step_batch(keys, state, action, params)
    return jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)


def to_box(action: jax.Array, space: Any) -> jax.Array:
    """`low + (action + 1) / 2 * (high - low)`: actions of [-1, 1]^d onto a Box space's
    bounds (the agents with bounded continuous policies act in the normalised box)."""
    low = jnp.asarray(np.asarray(space.low), jnp.float32)
    high = jnp.asarray(np.asarray(space.high), jnp.float32)
    return low + 0.5 * (action + 1.0) * (high - low)


def from_box(action: jax.Array, space: Any) -> jax.Array:
    """`2 (action - low) / (high - low) - 1`: a Box space's actions onto [-1, 1]^d, the
    inverse of `to_box` (offline datasets store the environment's actions; the
    continuous-control learners work in the normalised box)."""
    low = jnp.asarray(np.asarray(space.low), jnp.float32)
    high = jnp.asarray(np.asarray(space.high), jnp.float32)
    return 2.0 * (jnp.asarray(action, jnp.float32) - low) / (high - low) - 1.0


# --------------------------------------------------------------------------- episode statistics


@struct.dataclass
class EpisodeStats:
    """Undiscounted return and length of each environment's running episode."""

    episode_return: jax.Array  # float32, one per environment
    episode_length: jax.Array  # int32

    @classmethod
    def zeros(cls, num_envs: int | tuple[int, ...]) -> EpisodeStats:
        """No episode under way yet: zero return and length for every environment."""
        return cls(jnp.zeros(num_envs, jnp.float32), jnp.zeros(num_envs, jnp.int32))


@struct.dataclass
class FinishedEpisodes:
    """What one step did to the episodes: `done` marks the environments whose episode
    ended on it; there, `episode_return` / `episode_length` are the finished
    episode's totals (elsewhere, the running episode's so far)."""

    done: jax.Array  # bool
    episode_return: jax.Array
    episode_length: jax.Array


def track_episodes(
    stats: EpisodeStats, reward: jax.Array, done: jax.Array
) -> tuple[EpisodeStats, FinishedEpisodes]:
    """Adds one step's reward to each running episode and restarts the ones that ended.

    `done = terminated | truncated` (an auto-resetting environment's next observation
    already belongs to a new episode). Returns the statistics to carry to the next
    step (0 where `done`) and this step's `FinishedEpisodes`. Track the raw reward,
    before any scaling, so returns are the environment's.
    """
    episode_return = stats.episode_return + reward
    episode_length = stats.episode_length + 1
    running = EpisodeStats(
        episode_return=jnp.where(done, 0.0, episode_return),
        episode_length=jnp.where(done, 0, episode_length),
    )
    return running, FinishedEpisodes(done, episode_return, episode_length)


def team_reward(reward: jax.Array, done: jax.Array) -> jax.Array:
    """The reward that episode statistics add up: `reward` itself when it has one entry
    per environment (`reward.shape == done.shape`), else its mean over the trailing axes
    (the agents of a multi-agent environment, `(B, N)` against `done (B,)`), so an
    episode's return is the mean over agents of their returns, the number JaxMARL's
    baselines report."""
    extra = reward.ndim - jnp.ndim(done)
    if extra == 0:
        return reward
    return reward.mean(axis=tuple(range(-extra, 0)))


def episode_metrics(finished: FinishedEpisodes) -> dict[str, jax.Array]:
    """Summary of the episodes that ended over a rollout (`finished` stacked over steps
    and environments, any shape): their number `episodes` (int32) and the mean
    `episode_return` and `episode_length` over them (0 when none ended).

    The driver averages `episode_*` metrics over updates weighted by `episodes`.
    """
    n_done = finished.done.sum()
    denom = jnp.maximum(n_done, 1).astype(jnp.float32)
    return {
        "episode_return": jnp.where(finished.done, finished.episode_return, 0.0).sum() / denom,
        "episode_length": jnp.where(finished.done, finished.episode_length, 0).sum() / denom,
        "episodes": n_done.astype(jnp.int32),
    }


# --------------------------------------------------------------------------- normalisation


def normalize_obs(
    stats: RunningStats, obs: jax.Array, clip: float | None = None, update: bool = True
) -> tuple[RunningStats, jax.Array]:
    """Observation normalisation: `(stats, clip((obs - mean) / sqrt(var + 1e-8)))`.

    With `update`, the batch `obs` (leading axes are samples) is first merged into
    the running statistics, so the policy sees observations normalised with
    statistics that include them (as SB3's `VecNormalize`). Pass `update=False` to
    normalise with frozen statistics (evaluation, final observations of a step
    whose batch was already counted).
    """
    if update:
        stats = update_stats(stats, obs)
    return stats, normalize(stats, obs, clip)


def scale_reward(
    stats: RunningStats,
    discounted_return: jax.Array,
    reward: jax.Array,
    done: jax.Array,
    gamma: jax.Array | float,
    clip: float | None = None,
    *,
    epsilon: float = 1e-8,
    update: bool = True,
    axis_name: str | None = None,
) -> tuple[RunningStats, jax.Array, jax.Array]:
    """Reward scaling by the running std of the discounted return (Engstrom et al. 2020,
    "Implementation Matters in Deep Policy Gradients", sec. 3 and appendix A.2).

    Keeps each environment's discounted return `G <- gamma G + r` (restarted after
    every episode end), merges `G` into the running statistics (unless `update` is
    False; across a named `vmap` axis with `axis_name`, see `update_stats`), and
    scales the reward as `r / sqrt(var(G) + epsilon)`, without subtracting a mean (as
    gymnasium's `NormalizeReward`), clipped to `[-clip, clip]` if given.

    Returns `(stats, G to carry to the next step (0 where done), scaled reward)`.
    """
    ret = discounted_return * gamma + reward
    if update:
        stats = update_stats(stats, ret, axis_name)
    scaled = reward / jnp.sqrt(stats.var + epsilon)
    if clip is not None:
        scaled = jnp.clip(scaled, -clip, clip)
    return stats, jnp.where(done, 0.0, ret), scaled
