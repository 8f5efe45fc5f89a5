"""Rollout correction: importance weights for the mismatch between the policy that sampled
a batch (the *behaviour* policy: the sampler, which may run in lower precision, or be some
policy versions behind) and the policy the loss treats as the data's (the *proximal*
policy: the learner's own re-scoring of the rows). Config field `rollout_correction`.

With rho_t = pi_prox(y_t | ...) / pi_behav(y_t | ...) per completion token (the exp of
`old_logp - sampler_logp`), each correction gives a stop-gradient weight that multiplies
the per-token policy loss:

    none        w_t = 1                                     (today's objective)
    token_tis   w_t = min(rho_t, C)                          truncated IS, per token
    seq_tis     w_t = min(prod_s rho_s, C)                   truncated IS, per sequence
    token_mis   w_t = rho_t * 1[lo <= rho_t <= hi]           masked IS, per token
    seq_mis     w_t = rho * 1[lo <= rho <= hi], rho = prod_s rho_s   masked IS, per sequence
    geo_mis     w_t = 1[lo <= exp(mean_s log rho_s) <= hi]   rejection by the sequence's
                                                            geometric-mean ratio

(C: `rollout_is_cap`, [lo, hi]: `rollout_mask_band`.) Truncated IS is Yao et al. 2025
("Your efficient RL framework secretly brings you off-policy RL training"; verl's
`rollout_is`, TRL's `vllm_importance_sampling_correction`); masked IS is Liu et al. 2025
("When speed kills stability: demystifying RL collapse from the training-inference
mismatch"); the geometric-mean rejection is verl's `rollout_rs="geometric"`, which keeps
long sequences from being rejected for the product of many small per-token mismatches.
A masked token or row contributes 0 to the loss and still counts in the aggregation's
denominator (its weight is 0, the `loss_mask` unchanged), so masking never rescales the
tokens that remain.

Together with the policy loss's ratio pi_theta / pi_prox, the weighted loss is the
decoupled PPO objective of Fu et al. 2025 (AReaL, eq. 5): the trust region is around the
proximal policy, and the weight corrects from the behaviour policy to it.

`rollout_metrics` measures the mismatch whatever the correction: the mean ratio, the
fraction of tokens the correction changed (truncated or masked), and the sampler-learner
KL(pi_behav || pi_prox) per token, estimated by k3 = rho - 1 - log rho on the sampled
tokens (Schulman 2020).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, float_mask
from .registry import Registry

Weights = Callable[[Array, Array, float, tuple[float, float]], tuple[Array, Array]]
"""`(log_rho, mask, cap, band) -> (weights, changed)`, each (batch, length)."""


def _sequence_log_ratio(log_rho: Array, mask: Array) -> Array:
    """sum_t log rho_t over each row's masked tokens, as (batch, 1)."""
    return jnp.sum(log_rho * mask, axis=-1, keepdims=True)


def _in_band(ratio: Array, band: tuple[float, float]) -> Array:
    low, high = band
    return (ratio >= low) & (ratio <= high)


def no_correction(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """w = 1: the sampled rows are taken as the proximal policy's (today's objective)."""
    del cap, band
    return jnp.ones_like(log_rho), jnp.zeros_like(log_rho)


def token_tis(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """Truncated importance sampling per token: w_t = min(rho_t, cap)."""
    del band
    rho = jnp.exp(log_rho)
    return jnp.minimum(rho, cap), (rho > cap).astype(jnp.float32)


def seq_tis(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """Truncated importance sampling per sequence: every token of a row gets
    min(prod_t rho_t, cap) (the product in log space, so no intermediate overflows)."""
    del band
    log_seq = _sequence_log_ratio(log_rho, mask)
    weight = jnp.exp(jnp.minimum(log_seq, math.log(cap)))
    changed = log_seq > math.log(cap)
    return jnp.broadcast_to(weight, log_rho.shape), jnp.broadcast_to(changed, log_rho.shape)


def token_mis(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """Masked importance sampling per token: w_t = rho_t inside the band, 0 outside."""
    del cap
    rho = jnp.exp(log_rho)
    keep = _in_band(rho, band)
    return jnp.where(keep, rho, 0.0), (~keep).astype(jnp.float32)


def seq_mis(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """Masked importance sampling per sequence: a row's tokens get its ratio prod_t rho_t
    when it lies inside the band, 0 otherwise."""
    del cap
    rho = jnp.exp(_sequence_log_ratio(log_rho, mask))
    keep = _in_band(rho, band)
    weight = jnp.where(keep, rho, 0.0)
    return jnp.broadcast_to(weight, log_rho.shape), jnp.broadcast_to(~keep, log_rho.shape)


def geo_mis(log_rho: Array, mask: Array, cap: float, band: tuple[float, float]):
    """Rejection by the geometric-mean ratio exp(mean_t log rho_t) of each row: weight 1
    inside the band, 0 outside (no importance weight: the mean ratio is a test, not a
    correction)."""
    del cap
    tokens = jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)
    geometric = jnp.exp(_sequence_log_ratio(log_rho, mask) / tokens)
    keep = _in_band(geometric, band)
    weight = keep.astype(jnp.float32)
    return jnp.broadcast_to(weight, log_rho.shape), jnp.broadcast_to(~keep, log_rho.shape)


ROLLOUT_CORRECTIONS: Registry[Weights] = Registry(
    "rollout_correction",
    {
        "none": no_correction,
        "token_tis": token_tis,
        "seq_tis": seq_tis,
        "token_mis": token_mis,
        "seq_mis": seq_mis,
        "geo_mis": geo_mis,
    },
)
"""Every rollout correction by the name of the `rollout_correction` config field."""


def validate_rollout_correction(name: str, cap: float, band: Sequence[float]) -> None:
    """Raises `ConfigError` for a correction the config cannot use: an unknown name, a
    truncation cap below 1 (it would shrink every on-policy token's weight), or a masking
    band that is not `low, high` with 0 <= low <= 1 <= high (a band without 1 would drop
    the tokens where sampler and learner agree)."""
    ROLLOUT_CORRECTIONS.check(name)
    check(
        isinstance(cap, (int, float)) and math.isfinite(cap) and cap >= 1,
        "rollout_is_cap",
        cap,
        ">= 1 (a cap below 1 down-weights tokens the sampler and learner agree on)",
    )
    band = tuple(band)
    check(
        len(band) == 2 and 0 <= band[0] <= 1 <= band[1],
        "rollout_mask_band",
        band,
        "two ratios low,high with 0 <= low <= 1 <= high (the band must contain 1)",
    )


def rollout_weights(
    kind: str,
    proximal_logp: Array,
    behaviour_logp: Array,
    mask: Array,
    cap: float,
    band: tuple[float, float],
) -> tuple[Array, Array]:
    """`(weights, changed)` of correction `kind`, each (batch, length), 0 off `mask`:
    the stop-gradient weights of the per-token policy loss, and 1 where the correction
    truncated or masked a token. `proximal_logp` and `behaviour_logp` are the learner's
    and the sampler's log-probs of the sampled tokens."""
    mask = float_mask(mask)
    log_rho = jax.lax.stop_gradient((proximal_logp - behaviour_logp) * mask)
    weights, changed = ROLLOUT_CORRECTIONS[kind](log_rho, mask, cap, band)
    return weights * mask, changed.astype(jnp.float32) * mask


def rollout_metrics(proximal_logp: Array, behaviour_logp: Array, mask: Array) -> dict[str, Array]:
    """Per token (sums over `mask`, for the caller's means): `ratio` rho, and `kl` the
    k3 estimate of KL(pi_behav || pi_prox) from tokens sampled from pi_behav."""
    mask = float_mask(mask)
    log_rho = jax.lax.stop_gradient((proximal_logp - behaviour_logp) * mask)
    return {
        "ratio": jnp.exp(log_rho) * mask,
        "kl": (jnp.expm1(log_rho) - log_rho) * mask,
    }
