"""Action distributions as small pytrees: `sample`, `log_prob`, `entropy`, `mode`.

Written here rather than taken from distrax/tfp to keep the dependency set to
jax/flax/optax and because PPO needs only these three, each a few lines.
Log-probabilities of multi-dimensional actions are summed over the last axis.

Sampling draws its noise with `jaxrl.prng` (Threefry as straight-line code, the
same hash as `jax.random`): on CPU, `jax.random`'s rolled hash loop made the three
random draws of a PPO rollout step cost more than the policy network.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng

_LOG_2PI = math.log(2.0 * math.pi)


@struct.dataclass
class Categorical:
    """Categorical over the last axis of `logits`."""

    logits: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits).
        noise = prng.gumbel(key, self.logits.shape)
        return jnp.argmax(self.logits + noise, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def masked(self, mask: jax.Array | None) -> Categorical:
        """The distribution over the legal actions only: `mask` (shaped like `logits`,
        true where an action is legal) sets every illegal logit to minus infinity before
        the softmax, so illegal actions are never sampled or chosen, and log-probabilities
        and the entropy are those of the softmax over the legal actions. None: unchanged.

        This is MAPPO's action masking (Yu et al. 2022, "The Surprising Effectiveness of
        PPO in Cooperative Multi-Agent Games", appendix, "Action Masking": unavailable
        actions are masked out of the softmax when acting and when computing the
        probabilities of the loss, so the PPO ratio is over legal actions; Huang &
        Ontanon 2022, "A Closer Look at Invalid Action Masking in Policy Gradient
        Algorithms", show the masked softmax still gives a valid policy gradient).

        Minus infinity is written as the dtype's most negative finite value: `exp` of it
        is exactly 0 after the softmax's shift, as it would be for -inf, but an illegal
        action's `p log p` stays `0 * finite = 0` instead of `0 * -inf = NaN` (in the
        entropy and its gradient), and a row with no legal action at all stays finite
        (uniform) instead of NaN.
        """
        if mask is None:
            return self
        lowest = jnp.finfo(self.logits.dtype).min
        return Categorical(jnp.where(mask, self.logits, lowest))


@struct.dataclass
class DiagGaussian:
    """Diagonal Gaussian; actions are the raw (unbounded) samples."""

    mean: jax.Array
    log_std: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        noise = prng.normal(key, self.mean.shape).astype(self.mean.dtype)
        return self.mean + jnp.exp(self.log_std) * noise

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        log_std = jnp.broadcast_to(self.log_std, self.mean.shape)
        return jnp.sum(log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        return self.mean


@struct.dataclass
class TanhGaussian:
    """Gaussian squashed by tanh (Haarnoja et al. 2018, appendix C).

    Samples and log-probabilities are expressed in the *pre-squash* variable
    `u` so that PPO's stored actions give exact likelihood ratios: the
    environment receives `tanh(u)` (see `squash`). `log_prob(u)` includes the
    change-of-variables term `-sum log(1 - tanh(u)^2)`, computed stably as
    `2 (log 2 - u - softplus(-2u))`. The entropy has no closed form; `entropy`
    returns the Gaussian's, a standard surrogate for the entropy bonus.
    """

    mean: jax.Array
    log_std: jax.Array

    def sample(self, key: jax.Array) -> jax.Array:
        return DiagGaussian(self.mean, self.log_std).sample(key)

    def log_prob(self, u: jax.Array) -> jax.Array:
        base = DiagGaussian(self.mean, self.log_std).log_prob(u)
        log_det = jnp.sum(2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)
        return base - log_det

    def entropy(self) -> jax.Array:
        return DiagGaussian(self.mean, self.log_std).entropy()

    def mode(self) -> jax.Array:
        return self.mean

    @staticmethod
    def squash(u: jax.Array) -> jax.Array:
        return jnp.tanh(u)
