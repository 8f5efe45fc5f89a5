"""Observation normalisation by a dataset's statistics (Fujimoto & Gu 2021).

TD3+BC (Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning",
sec. 5) normalises every state feature by the dataset's mean and standard deviation,

    s_i' = (s_i - mu_i) / (sigma_i + eps),    eps = 1e-3,

with `mu`, `sigma` computed once over the dataset's observations, and the policy sees
states normalised the same way when it is evaluated. CORL's IQL and ReBRAC normalise
the same way as an option. The offline learners share this module
(`jaxrl/algorithms/offline.py`, `OfflineConfig.normalize_obs`): the statistics are a
field of the training state, so a checkpoint carries them and evaluation, `jaxrl dataset
collect` and warm starts (`rlpd --init-from`) use the statistics training used.

What is not here: running statistics of a stream (`jaxrl/running_stats.py`, PPO's
`normalize_obs`), which change while training; these are fixed by the dataset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .dataset import Dataset

__all__ = ["OBS_STD_EPS", "ObsNorm", "identity", "observation_stats"]

OBS_STD_EPS = 1e-3
"""eps of `(s - mu) / (sigma + eps)` (Fujimoto & Gu 2021's code): keeps a feature that is
constant over the dataset finite."""


@struct.dataclass
class ObsNorm:
    """Per-feature `mean` and `scale` (the dataset's standard deviation plus eps), each of
    the observation's shape: `normalize(obs) = (obs - mean) / scale`."""

    mean: jax.Array
    scale: jax.Array

    def normalize(self, obs: jax.Array) -> jax.Array:
        """`(obs - mean) / scale` over the trailing observation axes (any leading ones)."""
        return (jnp.asarray(obs, jnp.float32) - self.mean) / self.scale


def observation_stats(data: Dataset, eps: float = OBS_STD_EPS) -> ObsNorm:
    """The dataset's per-feature mean and population standard deviation (ddof 0, as
    numpy's and their code's `std`) of `observations`, computed in float64 on the host
    and stored as float32; `scale = std + eps` (Fujimoto & Gu 2021, sec. 5)."""
    obs = np.asarray(data.observations, np.float64)
    mean, std = obs.mean(axis=0), obs.std(axis=0)
    return ObsNorm(mean=jnp.asarray(mean, jnp.float32), scale=jnp.asarray(std + eps, jnp.float32))


def identity(obs_shape: tuple[int, ...]) -> ObsNorm:
    """Mean 0 and scale 1: what a learner without normalisation keeps in its state (its
    checkpoints have the same fields either way)."""
    return ObsNorm(mean=jnp.zeros(obs_shape, jnp.float32), scale=jnp.ones(obs_shape, jnp.float32))
