"""Policy losses of token-level RL for language models (config field `policy_loss`).

Each loss is registered in `POLICY_LOSSES` under the name users pass, with one
signature: `(logp, old_logp, advantages, mask, *, eps_low, eps_high, dual_clip_c) ->
(per_token_loss, metrics)`. `logp` are the trainer's log-probs (differentiated),
`old_logp` the sampler's (no gradient flows into them), `advantages` (batch,) or
(batch, length); the per-token loss is 0 off-mask and is reduced by
`jaxrl.objectives.aggregation.aggregate_loss`.

- `clip` (`clipped_surrogate`): PPO's clipped surrogate as GRPO and DAPO use it, with
  decoupled `eps_low`/`eps_high` and an optional dual clip.
- `gspo` (`gspo`): the clipped surrogate on the sequence's geometric-mean ratio.
- `cispo` (`cispo`): REINFORCE with a clipped, stop-gradient importance weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, Scalar, float_mask, is_number
from .aggregation import masked_token_mean
from .registry import Registry


def validate_clip(
    policy_loss: str, eps_low: float, eps_high: float, dual_clip_c: float | None = None
) -> None:
    """Raises `ConfigError` for clip ranges the named policy loss cannot use.

    `clip` and `gspo` need 0 < eps_low < 1 (a positive lower ratio bound) and
    eps_high >= eps_low: DAPO's clip-higher (Yu et al. 2025, sec. 3.1) raises only the
    upper bound, and a trust region tighter above than below is a misconfiguration.
    `cispo` bounds an importance *weight*, not a trust region: MiniMax-M1 disables the
    lower bound (eps_low = 1 gives a bound of 0) and tunes only eps_high, so it takes
    0 < eps_low <= 1, eps_high > 0 in either order. `dual_clip_c` (clip and gspo only)
    must be > 1. Called by `policy_loss` when the values are Python numbers, and by
    the trainer's config `validate()`.
    """
    POLICY_LOSSES.check(policy_loss)
    if is_number(eps_low) and policy_loss == "cispo":
        check(0.0 < eps_low <= 1.0, "eps_low", eps_low, "in (0, 1] for policy_loss='cispo'")
    elif is_number(eps_low):
        check(0.0 < eps_low < 1.0, "eps_low", eps_low, f"in (0, 1) for policy_loss={policy_loss!r}")
    if is_number(eps_high):
        check(math.isfinite(eps_high) and eps_high > 0.0, "eps_high", eps_high, "> 0")
    if policy_loss != "cispo" and is_number(eps_low) and is_number(eps_high):
        check(eps_high >= eps_low, "eps_high", eps_high, f">= eps_low={eps_low}")
    if dual_clip_c is not None:
        check(
            policy_loss != "cispo",
            "dual_clip_c",
            dual_clip_c,
            "None with policy_loss='cispo' (it has no surrogate to bound)",
        )
        if is_number(dual_clip_c):
            check(dual_clip_c > 1.0, "dual_clip_c", dual_clip_c, "> 1 (or None to disable)")


def _token_advantages(advantages: Array) -> Array:
    """(batch,) sequence advantages broadcast over tokens; (batch, length) passed through."""
    advantages = jnp.asarray(advantages, jnp.float32)
    return advantages[:, None] if advantages.ndim == 1 else advantages


def _approx_kl(log_ratio: Array, mask: Array) -> Array:
    """KL(pi_old || pi) from the sampler's tokens by the k3 estimator (r - 1) - log r, as
    `jaxrl.algorithms.ppo.losses.ratio_diagnostics`: non-negative and unbiased."""
    return masked_token_mean(jnp.expm1(log_ratio) - log_ratio, mask)


def _clipped_objective(
    ratio: Array, advantages: Array, eps_low: Scalar, eps_high: Scalar, dual_clip_c: Scalar | None
) -> tuple[Array, Array, Array, Array | None]:
    """Per-token -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), optionally dual-clipped.

    Returns the loss and where clipping zeroed the gradient: below (r < 1 - eps_low with
    A < 0), above (r > 1 + eps_high with A > 0) and, with a dual clip, where the bound
    -c A replaced the loss (A < 0 and r > c).
    """
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -jnp.minimum(unclipped, clipped)
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    dual = None
    if dual_clip_c is not None:
        # Dual clip (Ye et al. 2020, "Mastering complex control in MOBA games with deep RL"):
        # for A < 0 the clipped loss -r A grows without bound in r; cap it at -c A.
        dual = (advantages < 0) & (ratio > dual_clip_c)
        loss = jnp.where(advantages < 0, jnp.minimum(loss, -dual_clip_c * advantages), loss)
    return loss, low, high, dual


def _diagnostics(
    mask: Array, log_ratio: Array, ratio: Array, low: Array, high: Array, dual: Array | None
) -> dict[str, Array]:
    out = {
        "clip_fraction_low": masked_token_mean(low.astype(jnp.float32), mask),
        "clip_fraction_high": masked_token_mean(high.astype(jnp.float32), mask),
        "ratio_mean": masked_token_mean(ratio, mask),
        "approx_kl": _approx_kl(log_ratio, mask),
    }
    if dual is not None:
        out["dual_clip_fraction"] = masked_token_mean(dual.astype(jnp.float32), mask)
    return out


def clipped_surrogate(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The token-level clipped surrogate of PPO (Schulman et al. 2017, eq. 7) as used by
    GRPO (Shao et al. 2024, sec. 4.1) with DAPO's decoupled clip range (Yu et al. 2025,
    sec. 3.1, clip-higher):

        r_t = pi(y_t | ...) / pi_old(y_t | ...)
        l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)

    and, with `dual_clip_c` = c > 1, l_t = min(l_t, -c A_t) where A_t < 0 (Ye et al. 2020).
    `old_logp` are the sampler's log-probs (no gradient flows into them).

    Returns:
      `(per_token_loss, metrics)`: the (batch, length) loss, 0 off-mask, to aggregate
      with `aggregate_loss`; metrics (token means over the mask) `clip_fraction_low`,
      `clip_fraction_high`, `ratio_mean`, `approx_kl` (KL(pi_old || pi), k3) and, with
      a dual clip, `dual_clip_fraction`.
    """
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    ratio = jnp.exp(log_ratio)
    adv = _token_advantages(advantages)
    loss, low, high, dual = _clipped_objective(ratio, adv, eps_low, eps_high, dual_clip_c)
    metrics = _diagnostics(mask, log_ratio, ratio, low, high, dual)
    return loss * float_mask(mask), metrics


def gspo(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Group Sequence Policy Optimization (Zheng et al. 2025), in its GSPO-token form.

    The importance ratio is the sequence's length-normalised (geometric-mean) ratio

        s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|) = exp(1/|y_i| sum_t (log pi - log pi_old))

    clipped as a whole, so one sequence is kept or dropped together. In the token form
    s_{i,t} = sg[s_i] pi(y_t) / sg[pi(y_t)] has the value s_i and the gradient of
    s_i grad log pi(y_t), which admits per-token advantages; with one advantage per
    sequence and `seq_mean_token_mean` aggregation it is exactly GSPO's objective.
    The paper's clip ranges are small (eps_low 3e-4, eps_high 4e-4) because s_i is an
    average. Returns and metrics as `clipped_surrogate`, with `ratio_mean` the mean of s_i
    over the mask tokens; `approx_kl` is the token-level KL(pi_old || pi).
    """
    m = float_mask(mask)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    seq_log_ratio = jnp.sum(log_ratio * m, axis=1, keepdims=True) / jnp.maximum(
        jnp.sum(m, axis=1, keepdims=True), 1.0
    )
    # Value s_i, gradient per token (verl PR #2775: add the detached term last).
    token_log_ratio = logp - jax.lax.stop_gradient(logp) + jax.lax.stop_gradient(seq_log_ratio)
    ratio = jnp.exp(token_log_ratio)
    adv = _token_advantages(advantages)
    loss, low, high, dual = _clipped_objective(ratio, adv, eps_low, eps_high, dual_clip_c)
    metrics = _diagnostics(m, log_ratio, ratio, low, high, dual)
    return loss * m, metrics


def cispo(
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """CISPO (MiniMax 2025, "MiniMax-M1", eqs. 4-5): REINFORCE with a clipped,
    stop-gradient importance weight.

        w_t = clip(r_t, 1 - eps_low, 1 + eps_high),  l_t = -sg[w_t] A_t log pi(y_t)

    Unlike the clipped surrogate, a token whose ratio left the range keeps its gradient
    (scaled by the bound) instead of losing it, which matters for rare tokens that
    open a reasoning step. `clip_fraction_low`/`_high` count the tokens whose weight
    was truncated below/above, whatever the advantage's sign. `dual_clip_c` must be None.
    """
    if dual_clip_c is not None:
        validate_clip("cispo", eps_low, eps_high, dual_clip_c)
    log_ratio = logp - jax.lax.stop_gradient(old_logp)
    ratio = jnp.exp(log_ratio)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high))
    adv = _token_advantages(advantages)
    loss = -weight * adv * logp
    low = ratio < 1.0 - eps_low
    high = ratio > 1.0 + eps_high
    metrics = _diagnostics(mask, log_ratio, ratio, low, high, None)
    return loss * float_mask(mask), metrics


PolicyLoss = Callable[..., tuple[Array, dict[str, Array]]]

POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "policy_loss", {"clip": clipped_surrogate, "gspo": gspo, "cispo": cispo}
)
"""Every policy loss by the name of the `policy_loss` config field."""


def policy_loss(
    name: str,
    logp: Array,
    old_logp: Array,
    advantages: Array,
    mask: Array,
    *,
    eps_low: Scalar,
    eps_high: Scalar,
    dual_clip_c: Scalar | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The per-token policy loss `name` (config field `policy_loss`) and its diagnostics.

    `logp` are the trainer's log-probs (differentiated), `old_logp` the sampler's,
    `advantages` (batch,) or (batch, length). See `clipped_surrogate`, `gspo`, `cispo`.
    """
    validate_clip(name, eps_low, eps_high, dual_clip_c)
    return POLICY_LOSSES[name](
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip_c=dual_clip_c,
    )
