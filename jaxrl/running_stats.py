"""Running mean and variance (parallel Welford update) for normalising inputs.

Used by algorithms for observation normalisation and return-based reward
scaling. Statistics are a pytree kept inside the training state, so they are
checkpointed, vmapped over seeds, and identical after a resume.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RunningStats:
    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, shape: tuple[int, ...] = ()) -> RunningStats:
        # count starts at a tiny epsilon (as gymnasium's RunningMeanStd) so the
        # first merge is well defined.
        return cls(
            mean=jnp.zeros(shape, jnp.float32),
            var=jnp.ones(shape, jnp.float32),
            count=jnp.asarray(1e-4, jnp.float32),
        )


def update_stats(stats: RunningStats, batch: jax.Array) -> RunningStats:
    """Merges a batch (leading axes are samples) into the statistics.

    Chan et al. (1979) parallel variance: combining (m_a, v_a, n_a) and
    (m_b, v_b, n_b) gives m = m_a + d n_b / n and
    v = (v_a n_a + v_b n_b + d^2 n_a n_b / n) / n with d = m_b - m_a.
    """
    batch = batch.reshape((-1,) + stats.mean.shape).astype(jnp.float32)
    batch_count = jnp.asarray(batch.shape[0], jnp.float32)
    batch_mean = jnp.mean(batch, axis=0)
    batch_var = jnp.var(batch, axis=0)
    total = stats.count + batch_count
    delta = batch_mean - stats.mean
    mean = stats.mean + delta * batch_count / total
    m2 = (
        stats.var * stats.count
        + batch_var * batch_count
        + delta**2 * stats.count * batch_count / total
    )
    return RunningStats(mean=mean, var=m2 / total, count=total)


def normalize(stats: RunningStats, x: jax.Array, clip: float, eps: float = 1e-8) -> jax.Array:
    """`clip((x - mean) / sqrt(var + eps), -clip, clip)`."""
    z = (x - stats.mean) / jnp.sqrt(stats.var + eps)
    return jnp.clip(z, -clip, clip)
