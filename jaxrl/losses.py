"""Losses shared across algorithm families (pure functions).

A loss lives here when algorithms of different families use it, so that neither
imports the other's package: `value_error`, the (optionally clipped) critic
regression of PPO (`jaxrl/algorithms/ppo/`), of PPO-LM's critic
(`jaxrl/algorithms/ppo_lm/`) and of IPPO/MAPPO; `clipped_surrogate`, PPO's clipped
objective per element (PPO, IPPO, MAPPO); `agent_ppo_loss`, the PPO loss of the
multi-agent PPOs over the agents alive (IPPO, MAPPO), with `masked_mean`. Losses of
one algorithm stay in its `losses.py`; returns and advantages are in `jaxrl/returns.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["agent_ppo_loss", "clipped_surrogate", "masked_mean", "value_error"]


def value_error(
    value: jax.Array,
    old_value: jax.Array,
    returns: jax.Array,
    clip_eps: jax.Array | float,
    clip: bool,
) -> tuple[jax.Array, jax.Array]:
    """Per-element 0.5 (V - R)^2, or with clipping 0.5 max((V - R)^2, (V_clip - R)^2).

    V_clip = V_old + clip(V - V_old, -eps, eps): the value-clipping variant of
    OpenAI baselines' PPO2, as in PureJaxRL and CleanRL (and verl's and OpenRLHF's
    critics for language models). Returns `(loss, clipped)`, both shaped like `value`;
    `clipped` (bool) marks where the clipped term is the larger one, so the gradient
    there is 0 (all False without clipping). Reduce it with the caller's mean: PPO's
    `value_loss` (`jaxrl/algorithms/ppo/losses.py`), a masked token aggregation in
    PPO-LM (`jaxrl/algorithms/ppo_lm`).
    """
    unclipped = (value - returns) ** 2
    if not clip:
        return 0.5 * unclipped, jnp.zeros(value.shape, bool)
    value_clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    clipped_error = (value_clipped - returns) ** 2
    return 0.5 * jnp.maximum(unclipped, clipped_error), clipped_error > unclipped


def masked_mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """`sum(x * mask) / max(sum(mask), 1)`, or `mean(x)` without a mask: a mean over the
    entries that count (the agents alive at a step, in the multi-agent losses)."""
    if mask is None:
        return x.mean()
    mask = mask.astype(x.dtype)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def clipped_surrogate(
    log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_eps: jax.Array | float
) -> jax.Array:
    """Per element `min(r A, clip(r, 1 - eps, 1 + eps) A)`, `r = pi(a|s) / pi_old(a|s)`:
    PPO's clipped surrogate objective (Schulman et al. 2017, eq. 7) before its mean.
    PPO's `clipped_surrogate_loss` is minus its mean; the multi-agent PPOs (IPPO, MAPPO)
    take its mean over the agents alive."""
    ratio = jnp.exp(log_prob - old_log_prob)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return jnp.minimum(unclipped, clipped)


def agent_ppo_loss(
    log_prob: jax.Array,
    entropy: jax.Array,
    value: jax.Array,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    alive: jax.Array,
    *,
    clip_eps: jax.Array | float,
    vf_clip_eps: jax.Array | float,
    vf_coef: jax.Array | float,
    ent_coef: jax.Array | float,
    clip_value: bool,
    normalize_advantages: bool,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's loss over per-agent samples, averaged over the agents alive:

        L = -E_m[min(r A, clip(r, 1 - eps, 1 + eps) A)] + c_v E_m[value_error]
            - c_e E_m[H[pi]]

    where `E_m` is the mean over the entries with `alive` true (an agent that left the
    episode has no decision to learn from), `value_error` is `value_error` above (0.5
    squared error, clipped with `clip_value`) and the advantages are normalised over the
    same entries (mean 0, population std 1) with `normalize_advantages`. Every argument is
    shaped like `alive` (any shape, e.g. `(T, B, N)`). This is the objective of IPPO (de
    Witt et al. 2020, each agent's own PPO loss, with its own critic) and MAPPO (Yu et al.
    2022, the same loss with a centralised critic's values): only where `value` comes
    from differs, so both call this one function. Returns `(L, metrics)`.
    """
    if normalize_advantages:
        mean = masked_mean(advantages, alive)
        std = jnp.sqrt(masked_mean((advantages - mean) ** 2, alive))
        advantages = (advantages - mean) / (std + 1e-8)
    policy_loss = -masked_mean(
        clipped_surrogate(log_prob, old_log_prob, advantages, clip_eps), alive
    )
    value_loss = masked_mean(
        value_error(value, old_value, returns, vf_clip_eps, clip_value)[0], alive
    )
    entropy_mean = masked_mean(entropy, alive)
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    log_ratio = log_prob - old_log_prob
    return total, {
        "loss": total,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy_mean,
        "approx_kl": masked_mean(jnp.exp(log_ratio) - 1.0 - log_ratio, alive),
    }
