"""The PPO loss, as small pure functions (Schulman et al. 2017).

Every term is written out with its equation so it can be checked against the
paper and against hand-computed values (tests/algorithms/test_ppo_losses.py). The
per-element value error is `jaxrl.losses.value_error`, shared with PPO-LM's critic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.losses import clipped_surrogate, value_error


def normalize_advantages(advantages: jax.Array, eps: float = 1e-8) -> jax.Array:
    """(A - mean(A)) / (std(A) + eps), over the minibatch (population std, ddof=0)."""
    return (advantages - advantages.mean()) / (advantages.std() + eps)


def clipped_surrogate_loss(
    log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_eps: jax.Array | float
) -> jax.Array:
    """L^CLIP = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)], r = pi(a|s) / pi_old(a|s)
    (the per-element objective is `jaxrl.losses.clipped_surrogate`, shared with IPPO
    and MAPPO)."""
    return -clipped_surrogate(log_prob, old_log_prob, advantages, clip_eps).mean()


def ratio_diagnostics(
    log_prob: jax.Array, old_log_prob: jax.Array, clip_eps: jax.Array | float
) -> dict[str, jax.Array]:
    """How far the policy moved: the fraction of clipped ratios |r - 1| > eps, and the
    approximate KL(pi_old || pi) with the low-variance, unbiased k3 estimator
    E[(r - 1) - log r] (Schulman 2020, "Approximating KL divergence")."""
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    return {
        "clip_fraction": (jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32).mean(),
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
    }


def value_loss(
    value: jax.Array,
    old_value: jax.Array,
    returns: jax.Array,
    clip_eps: jax.Array | float,
    clip: bool,
) -> jax.Array:
    """0.5 E[(V - R)^2], or with clipping 0.5 E[max((V - R)^2, (V_clip - R)^2)]: the
    mean of `value_error`."""
    return value_error(value, old_value, returns, clip_eps, clip)[0].mean()


def ppo_loss(
    log_prob: jax.Array,
    entropy: jax.Array,
    value: jax.Array,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    *,
    clip_eps: jax.Array | float,
    vf_clip_eps: jax.Array | float,
    vf_coef: jax.Array | float,
    ent_coef: jax.Array | float,
    clip_value: bool,
    normalize_advantages_: bool,
    diagnostics: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Total loss L = L^CLIP + c_v L^V - c_e H[pi] (Schulman et al. 2017, eq. 9).

    Returns `(L, metrics)`: `metrics` holds `loss`, and with `diagnostics` also the
    terms (`policy_loss`, `value_loss`, `entropy`) and `ratio_diagnostics`.
    """
    if normalize_advantages_:
        advantages = normalize_advantages(advantages)
    policy_loss = clipped_surrogate_loss(log_prob, old_log_prob, advantages, clip_eps)
    v_loss = value_loss(value, old_value, returns, vf_clip_eps, clip_value)
    entropy_mean = entropy.mean()
    total = policy_loss + vf_coef * v_loss - ent_coef * entropy_mean
    if not diagnostics:
        return total, {"loss": total}
    return total, {
        "loss": total,
        "policy_loss": policy_loss,
        "value_loss": v_loss,
        "entropy": entropy_mean,
        **ratio_diagnostics(log_prob, old_log_prob, clip_eps),
    }
