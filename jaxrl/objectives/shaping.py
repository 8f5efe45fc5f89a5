"""Reward shaping of token-level RL for language models: DAPO's overlong penalty."""

from __future__ import annotations

import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, is_number


def overlong_penalty(
    lengths: Array, max_len: int, cache_len: int, penalty_factor: float = 1.0
) -> Array:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), a reward added to the task's:

        R(y) = 0                                 |y| <= L_max - L_cache
             = ((L_max - L_cache) - |y|) / L_cache   L_max - L_cache < |y| <= L_max
             = -1                                L_max < |y|

    times `penalty_factor` (verl's `overlong_buffer.penalty_factor`, 1 in the paper), so
    a response is penalised linearly over the last `cache_len` tokens of the budget.

    Args:
      lengths: (batch,) response lengths in tokens.
      max_len: L_max (int > 0), usually the generation budget.
      cache_len: L_cache (int in (0, max_len]), the soft-punishment interval.
    Returns:
      (batch,) float32 rewards in [-penalty_factor, 0].
    """
    check(
        isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0,
        "max_len",
        max_len,
        "an int > 0",
    )
    check(
        isinstance(cache_len, int) and not isinstance(cache_len, bool) and 0 < cache_len <= max_len,
        "cache_len",
        cache_len,
        f"an int in (0, max_len={max_len}]",
    )
    if is_number(penalty_factor):
        check(penalty_factor >= 0, "penalty_factor", penalty_factor, ">= 0")
    lengths = jnp.asarray(lengths, jnp.float32)
    expected = max_len - cache_len
    soft = (expected - lengths) / cache_len
    reward = jnp.where(lengths <= expected, 0.0, jnp.where(lengths <= max_len, soft, -1.0))
    return penalty_factor * reward
