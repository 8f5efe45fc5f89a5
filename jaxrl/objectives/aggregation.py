"""Loss aggregation: how per-token losses become one number (config field `loss_agg`).

A mode is a pair of functions: the whole batch's normaliser N (`loss_normaliser`) and
the sum over a batch's rows that is divided by it (`aggregate_loss`). Keeping them apart
is what makes gradient accumulation exact: every slice of a batch divides by the whole
batch's N, so the slices' losses (and gradients) add up to the full batch's.

Also here: `masked_token_mean`, the plain mean over a mask's tokens, for metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from jaxrl.config import check

from ._masks import Array, float_mask, is_positive_int
from .registry import Registry


def masked_token_mean(values: Array, mask: Array) -> Array:
    """Mean of `values` over the tokens where `mask` is set (0 when there are none)."""
    m = jnp.asarray(mask).astype(jnp.float32)
    return jnp.sum(jnp.where(mask, values, 0.0)) / jnp.maximum(jnp.sum(m), 1.0)


def _token_count(m: Array) -> Array:
    return jnp.sum(m)


def _sequence_count(m: Array) -> Array:
    """Rows with at least one mask token (a fully masked padding row is not counted)."""
    return jnp.sum((jnp.sum(m, axis=1) > 0).astype(jnp.float32))


def _token_sum(token_sums: Array, m: Array, max_len: int | None) -> Array:
    """`token_mean` (DAPO, Yu et al. 2025, sec. 3.3): sum_i sum_t l_it."""
    del m, max_len
    return jnp.sum(token_sums)


def _sequence_mean_sum(token_sums: Array, m: Array, max_len: int | None) -> Array:
    """`seq_mean_token_mean` (GRPO, Shao et al. 2024, sec. 4.1): sum_i 1/|y_i| sum_t l_it."""
    del max_len
    return jnp.sum(token_sums / jnp.maximum(jnp.sum(m, axis=1), 1.0))


def _fixed_length_sum(token_sums: Array, m: Array, max_len: int | None) -> Array:
    """`seq_mean_token_sum_norm` (Dr. GRPO, Liu et al. 2025): sum_i sum_t l_it / L."""
    del m
    check(
        is_positive_int(max_len),
        "max_len",
        max_len,
        "an int > 0 (the fixed length of loss_agg='seq_mean_token_sum_norm')",
    )
    return jnp.sum(token_sums) / max_len


class LossAggregation(NamedTuple):
    """One aggregation mode: `normaliser(mask) -> N` over a whole batch, and
    `total(token_sums, mask, max_len)`, the sum over rows that `aggregate_loss` divides by N
    (`token_sums` are the per-row sums of the masked per-token loss)."""

    normaliser: Callable[[Array], Array]
    total: Callable[[Array, Array, int | None], Array]


LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry(
    "loss_agg",
    {
        "seq_mean_token_mean": LossAggregation(_sequence_count, _sequence_mean_sum),
        "token_mean": LossAggregation(_token_count, _token_sum),
        "seq_mean_token_sum_norm": LossAggregation(_sequence_count, _fixed_length_sum),
    },
)
"""The `loss_agg` modes: `seq_mean_token_mean`, `token_mean`, `seq_mean_token_sum_norm`."""


def loss_normaliser(mask: Array, loss_agg: str) -> Array:
    """The denominator of `aggregate_loss` for a batch: compute it on the *whole* batch.

    `token_mean`: the number of mask tokens. The sequence means: the number of
    sequences with at least one mask token (a fully masked row, e.g. padding added to
    fill a batch, contributes nothing and is not counted).

    Gradient accumulation splits a batch into minibatches and sums their gradients; if
    each minibatch divided by its own count, short and long minibatches would be
    weighted wrongly (verl #5625 for token_mean). Passing the whole batch's normaliser
    to every minibatch makes the sum of the minibatch losses equal the full-batch loss.
    """
    return LOSS_AGGREGATIONS[loss_agg].normaliser(float_mask(mask))


def aggregate_loss(
    per_token: Array,
    mask: Array,
    loss_agg: str,
    normaliser: Array | float,
    max_len: int | None = None,
) -> Array:
    """Reduces a per-token loss to this minibatch's share of the batch loss.

    With N = `normaliser` (from `loss_normaliser` on the whole batch), m the mask:

    - `seq_mean_token_mean` (GRPO, Shao et al. 2024, sec. 4.1): 1/N sum_i 1/|y_i| sum_t l_it.
      Every sequence weighs the same, so a token of a long answer weighs less.
    - `token_mean` (DAPO, Yu et al. 2025, sec. 3.3): 1/N sum_i sum_t l_it with N the token
      count. Every token weighs the same.
    - `seq_mean_token_sum_norm` (Dr. GRPO, Liu et al. 2025): 1/N sum_i sum_t
      l_it / L with L = `max_len` a constant (the generation budget), so no length
      enters the weights. verl divided by L only, not by N (verl #3741), which scales the
      loss with the batch size; we divide by both, as Dr. GRPO's `mean` over the group.

    The minibatch losses of a batch split by rows, each given the whole batch's N, sum
    to the full-batch loss (and so do their gradients).

    Args:
      per_token: (batch, length) loss per token.
      mask: (batch, length) completion-token mask.
      loss_agg: the mode name (static).
      normaliser: the whole batch's `loss_normaliser(mask, loss_agg)`; clamped below at 1,
        so an all-masked batch has loss 0.
      max_len: the fixed length L of `seq_mean_token_sum_norm` (static int > 0).
    Returns:
      a float32 scalar.
    """
    mode = LOSS_AGGREGATIONS[loss_agg]
    m = float_mask(mask)
    token_sums = jnp.sum(per_token * m, axis=1)
    total = mode.total(token_sums, m, max_len)
    return total / jnp.maximum(jnp.asarray(normaliser, jnp.float32), 1.0)


__all__ = [
    "LOSS_AGGREGATIONS",
    "LossAggregation",
    "aggregate_loss",
    "loss_normaliser",
    "masked_token_mean",
]
