"""Running mean and variance of a stream (parallel Welford updates), for normalisation.

The one implementation of running statistics in jaxrl: algorithms use it for
observation normalisation and return-based reward scaling (`jaxrl/acting.py`), and
the environment wrappers `NormalizeObservation` / `ScaleReward` (`jaxrl.envs.wrappers`)
for the same jobs inside an environment stack. Statistics are a pytree kept in the
training or environment state, so they are checkpointed, `vmap`ped over seeds, and
identical after a resume.

This module depends on jax only, so every layer (`jaxrl.envs`, `jaxrl.nn`,
algorithms) can import it without an import cycle.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["RunningStats", "init_stats", "update_stats", "merge_stats", "normalize"]


@struct.dataclass
class RunningStats:
    """Running mean and (population) variance of a stream, with its sample count.

    Starts as gymnasium's `RunningMeanStd`: mean 0, var 1, count `1e-4` (a tiny
    prior that keeps the first normalisation finite). `count` is float32, so it
    stops growing past 2**24 samples; the statistics then behave as an
    exponential average with weight 2**-24, which is harmless.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_stats(shape: tuple[int, ...] = (), prior_count: float = 1e-4) -> RunningStats:
    """Fresh statistics for values of `shape` (mean 0, var 1, count `prior_count`)."""
    return RunningStats(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.asarray(prior_count, jnp.float32),
    )


def _merge_moments(
    stats: RunningStats, batch_mean: jax.Array, batch_var: jax.Array, batch_count: jax.Array
) -> RunningStats:
    """Chan et al. (1979) parallel variance: combining (m_a, v_a, n_a) and (m_b, v_b, n_b)
    gives m = m_a + d n_b / n and v = (v_a n_a + v_b n_b + d^2 n_a n_b / n) / n, with
    d = m_b - m_a and n = n_a + n_b."""
    total = stats.count + batch_count
    delta = batch_mean - stats.mean
    mean = stats.mean + delta * batch_count / total
    m2 = (
        stats.var * stats.count
        + batch_var * batch_count
        + delta**2 * stats.count * batch_count / total
    )
    return RunningStats(mean=mean, var=m2 / total, count=total)


def update_stats(stats: RunningStats, x: jax.Array, axis_name: str | None = None) -> RunningStats:
    """Merges the samples in `x` into the statistics.

    `x` is one sample (shape `stats.mean.shape`) or a batch of them (any number of
    extra leading axes, all samples). With `axis_name`, this must run under
    `jax.vmap` (or `shard_map`) with that axis name: the samples of every copy along
    the axis are merged too, so all copies hold the same, shared statistics (one
    parallel-variance update with the pooled moments, equal counts per copy).
    """
    batch = jnp.asarray(x, jnp.float32).reshape((-1,) + stats.mean.shape)
    batch_count = jnp.asarray(batch.shape[0], jnp.float32)
    batch_mean = jnp.mean(batch, axis=0)
    batch_var = jnp.var(batch, axis=0)
    if axis_name is not None:
        # Pooled moments of equal-sized groups: the mean of the means, and the mean
        # within-group variance plus the spread of the group means around the pool.
        pooled_mean = jax.lax.pmean(batch_mean, axis_name)
        batch_var = jax.lax.pmean(batch_var + jnp.square(batch_mean - pooled_mean), axis_name)
        batch_mean = pooled_mean
        batch_count = batch_count * jax.lax.psum(jnp.ones((), jnp.float32), axis_name)
    return _merge_moments(stats, batch_mean, batch_var, batch_count)


def merge_stats(stats: RunningStats) -> RunningStats:
    """Combines independent statistics stacked along the leading axis into one.

    For `jax.vmap`ped copies that each kept their own statistics, this gives the
    statistics of all their samples together (exact: the counts weight the means,
    and the spread of the means adds to the variance). Use it to report or freeze
    statistics, e.g. `merge_stats(find_state(s, NormalizeObservationState).stats)`.
    Merging copies that were already synchronised counts their shared history once
    per copy; to share statistics while collecting, use `axis_name` in `update_stats`.
    """
    total = jnp.sum(stats.count)
    weights = stats.count / total
    weights = weights.reshape(weights.shape + (1,) * (stats.mean.ndim - 1))
    mean = jnp.sum(weights * stats.mean, axis=0)
    var = jnp.sum(weights * (stats.var + jnp.square(stats.mean - mean)), axis=0)
    return RunningStats(mean=mean, var=var, count=total)


def normalize(
    stats: RunningStats, x: jax.Array, clip: float | None = None, epsilon: float = 1e-8
) -> jax.Array:
    """`(x - mean) / sqrt(var + epsilon)` in float32, clipped to `[-clip, clip]` if given."""
    z = (jnp.asarray(x, jnp.float32) - stats.mean) / jnp.sqrt(stats.var + epsilon)
    return z if clip is None else jnp.clip(z, -clip, clip)
