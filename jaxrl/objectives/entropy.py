"""Entropy terms of token-level RL for language models: the entropy bonus and the
high-entropy token selection (Wang et al. 2025)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, Scalar, float_mask, is_number


def entropy_bonus(entropy: Array, coef: Scalar) -> Array:
    """Per-token loss term -c H_t (Williams & Peng 1991; the PPO entropy bonus), to add to
    the policy loss before `aggregate_loss`. Differentiable through `entropy` (from
    `token_logprobs(..., return_entropy=True)`)."""
    return -coef * entropy


def high_entropy_mask(entropy: Array, mask: Array, rho: float) -> Array:
    """Keeps the top `rho` fraction of the batch's mask tokens by entropy (bool (batch, length)).

    Wang et al. 2025, "Beyond the 80/20 rule: high-entropy minority tokens drive effective
    RL for LLM reasoning": training on the 20% highest-entropy "forking" tokens (rho = 0.2)
    matches or beats training on all tokens. Multiply it into the loss mask.

    Exactly k = clip(round(rho n), 1, n) of the n mask tokens are kept (none if n = 0),
    so ties at the threshold are broken deterministically, by position in the flattened
    batch (earlier first); the paper's quantile threshold keeps all tied tokens. The
    ranking is over the arrays given: compute it on the whole batch before splitting it
    into minibatches. No gradient flows through the selection.

    Args:
      entropy: (batch, length) token entropies.
      mask: (batch, length) completion-token mask.
      rho: the kept fraction, in (0, 1] (static or a Python float).
    """
    if is_number(rho):
        check(0.0 < rho <= 1.0, "rho", rho, "in (0, 1] (the kept fraction of tokens)")
    valid = float_mask(mask) > 0
    flat_valid = valid.reshape(-1)
    key = jnp.where(flat_valid, jax.lax.stop_gradient(entropy).reshape(-1), -jnp.inf)
    order = jnp.argsort(-key, stable=True)  # descending entropy, earlier position on ties
    rank = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0]))
    count = jnp.sum(flat_valid.astype(jnp.float32))
    keep = jnp.clip(jnp.floor(rho * count + 0.5), 1.0, count)
    return ((rank < keep) & flat_valid).reshape(valid.shape)
