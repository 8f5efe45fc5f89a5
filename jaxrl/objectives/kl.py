"""KL estimators to a reference policy (config field `kl`), in the loss or the reward.

Each estimator is registered in `KL_ESTIMATORS` under the name users pass, as a function
of the per-token log-ratio log pi - log pi_ref (Schulman 2020, "Approximating KL
divergence"); `kl_estimate` applies one (with the off-policy correction), and
`kl_penalised_rewards` puts one in the token rewards.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._masks import Array, Scalar, float_mask
from .registry import Registry


def k1(log_ratio: Array) -> Array:
    """k1 = -log r = log pi - log pi_ref: unbiased value, high variance, can be < 0."""
    return log_ratio


def k2(log_ratio: Array) -> Array:
    """k2 = (log r)^2 / 2: biased value, low variance, >= 0; its gradient is the gradient
    of KL(pi || pi_ref) in expectation."""
    return 0.5 * log_ratio**2


def k3(log_ratio: Array) -> Array:
    """k3 = (r - 1) - log r: unbiased value, low variance, >= 0."""
    return jnp.expm1(-log_ratio) + log_ratio


def k3_plus(log_ratio: Array) -> Array:
    """k3+ (verl's name): the value of k3 with the gradient of k2 (straight-through)."""
    quadratic = 0.5 * log_ratio**2
    return quadratic - jax.lax.stop_gradient(quadratic) + jax.lax.stop_gradient(k3(log_ratio))


KL_ESTIMATORS: Registry[Callable[[Array], Array]] = Registry(
    "kl", {"k1": k1, "k2": k2, "k3": k3, "k3+": k3_plus}
)
"""Every KL estimator by the name of the `kl` config field, a function of log pi - log pi_ref."""


def kl_estimate(logp: Array, ref_logp: Array, kind: str, old_logp: Array | None = None) -> Array:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020,
    "Approximating KL divergence"), with log r = log pi_ref - log pi:

        k1 = -log r = log pi - log pi_ref      unbiased value, high variance, can be < 0
        k2 = (log r)^2 / 2                      biased value, low variance, >= 0
        k3 = (r - 1) - log r                    unbiased value, low variance, >= 0
        k3+ = value of k3, gradient of k2       (straight-through, verl's "k3+")

    As a *loss* what matters is the expected gradient, and of these only k2 gives the
    gradient of KL(pi || pi_ref) (Tang & Munos 2025, "On a few pitfalls in KL divergence
    gradient estimation for RL"; Zhang et al. 2025, "On the design of KL-regularized
    policy gradient algorithms for LLM reasoning"):

        E_pi[grad k1] = E_pi[grad log pi] = 0                  (no signal, only noise)
        E_pi[grad k2] = E_pi[(log pi - log pi_ref) grad log pi] = grad KL(pi || pi_ref)
        E_pi[grad k3] = E_pi[(1 - r) grad log pi] = grad KL(pi_ref || pi)   (the other KL)

    so GRPO's k3-in-the-loss (DeepSeekMath, sec. 4.1) descends the forward KL. `k3+` keeps
    k3's unbiased, non-negative value for logging and k2's unbiased gradient.

    When the tokens come from the sampler pi_old rather than pi (later epochs of the
    same batch), pass `old_logp`: every estimator is multiplied by sg[pi / pi_old], which
    keeps both the value and the `k2`/`k3+` gradient unbiased for KL(pi || pi_ref).

    In the *reward* (`kl_penalised_rewards`), no gradient flows through the estimate;
    REINFORCE then differentiates E[k], and `k1` (the usual choice) and `k3` both give
    the true KL gradient in expectation.

    No clamping: verl clamps k3 to [-10, 10], which hides a policy that has drifted far
    from the reference; we let the NaN/inf check of the driver see it.

    Returns:
      (batch, length) float32 per-token estimates (not masked: aggregate them with the
      policy loss, or mask them).
    """
    log_ratio = jnp.asarray(logp, jnp.float32) - ref_logp  # log pi - log pi_ref = -log r
    estimate = KL_ESTIMATORS[kind](log_ratio)
    if old_logp is not None:
        estimate = estimate * jax.lax.stop_gradient(jnp.exp(logp - old_logp))
    return estimate


def kl_penalised_rewards(
    token_rewards: Array,
    logp: Array,
    ref_logp: Array,
    mask: Array,
    kind: str,
    coef: Scalar,
) -> Array:
    """KL in the reward (Ouyang et al. 2022, eq. 2; `kl_in_reward`): r_t - beta k_t.

    The estimate is computed from the sampler's log-probs `logp` and carries no gradient.
    Returns (batch, length) float32 token rewards, penalised on mask tokens only.
    """
    penalty = jax.lax.stop_gradient(kl_estimate(logp, ref_logp, kind))
    return jnp.asarray(token_rewards, jnp.float32) - coef * penalty * float_mask(mask)
