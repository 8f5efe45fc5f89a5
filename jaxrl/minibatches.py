"""Epochs of shuffled minibatches: the optimisation loop of PPO and PQN (and GRPO's).

    keys = split(key, num_epochs)
    for each epoch e:
        rows = a random permutation of the batch's rows, drawn from keys[e]
        split the shuffled batch into num_minibatches equal minibatches
        for each minibatch in order: carry, metrics = step(carry, minibatch)

`run_epochs` writes this as a `lax.scan` over epochs of a `lax.scan` over
minibatches, so the whole loop is one traced function that the driver can jit, vmap
over seeds and scan over updates. Every epoch's permutation is drawn up front, one
batched sort instead of one per epoch; each is exactly `jax.random.permutation` of
that epoch's key. The pieces (`epoch_permutations`, `shuffled_minibatches`,
`contiguous_split`) are exported for algorithms that build their own loop.

What lives elsewhere: the step itself (a loss, its gradient and an optimiser update)
belongs to the algorithm; this module only orders the data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from jaxrl import prng

Carry = TypeVar("Carry")
Batch = TypeVar("Batch")
# split(rows (n, ...), num_minibatches) -> (num_minibatches, n // num_minibatches, ...)
Split = Callable[[jax.Array, int], jax.Array]


def contiguous_split(x: jax.Array, num_minibatches: int) -> jax.Array:
    """`(n, ...) -> (num_minibatches, n // num_minibatches, ...)`: minibatch i holds
    rows `i * k ... (i + 1) * k - 1` with `k = n // num_minibatches`."""
    return x.reshape((num_minibatches, -1) + x.shape[1:])


def batch_rows(batch: Any, num_minibatches: int) -> int:
    """The batch's number of rows (the leading axis every leaf shares); raises
    `ValueError` if the leaves disagree or `num_minibatches` does not divide it."""
    sizes = {x.shape[0] for x in jax.tree.leaves(batch)}
    if len(sizes) != 1:
        raise ValueError(
            "every leaf of the batch must have the same leading (row) axis, got sizes "
            f"{sorted(sizes)}"
        )
    (rows,) = sizes
    if num_minibatches < 1 or rows % num_minibatches:
        raise ValueError(
            f"num_minibatches={num_minibatches} must be a positive divisor of the batch's "
            f"{rows} rows"
        )
    return rows


def epoch_permutations(key: jax.Array, num_epochs: int, rows: int) -> jax.Array:
    """`(num_epochs, rows)` int32: epoch e's shuffle, `jax.random.permutation(keys[e],
    rows)` with `keys = prng.split(key, num_epochs)`, all drawn in one batched sort."""
    return jax.vmap(jax.random.permutation, in_axes=(0, None))(prng.split(key, num_epochs), rows)


def shuffled_minibatches(
    batch: Batch, permutation: jax.Array, num_minibatches: int, split: Split = contiguous_split
) -> Batch:
    """Every leaf's rows reordered by `permutation`, then `split` into a leading axis
    of `num_minibatches` minibatches (the `xs` of a scan over minibatches)."""
    return jax.tree.map(lambda x: split(jnp.take(x, permutation, axis=0), num_minibatches), batch)


def run_epochs(
    step: Callable[[Carry, Batch], tuple[Carry, Any]],
    carry: Carry,
    batch: Batch,
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
    split: Split = contiguous_split,
) -> tuple[Carry, Any]:
    """`num_epochs` passes over `batch`, each in `num_minibatches` shuffled minibatches.

    Args:
      step: `(carry, minibatch) -> (carry, metrics)`, one optimiser step (`minibatch`
        has the structure of `batch`, with `rows // num_minibatches` rows per leaf).
      carry: what the steps update (parameters and optimiser state, usually).
      batch: a pytree whose leaves share a leading axis of rows.
      key: the randomness of the shuffles (split into one key per epoch).
      num_epochs, num_minibatches: passes over the batch, and steps per pass.
      split: how shuffled rows become minibatches (`contiguous_split`; GRPO splits
        strided rows, which keeps every device's share of a sharded batch).

    Returns:
      `(carry, metrics)`, every leaf of `metrics` stacked `(num_epochs,
      num_minibatches, ...)`.
    """
    rows = batch_rows(batch, num_minibatches)
    permutations = epoch_permutations(key, num_epochs, rows)

    def epoch(carry: Carry, permutation: jax.Array) -> tuple[Carry, Any]:
        minibatches = shuffled_minibatches(batch, permutation, num_minibatches, split)
        return jax.lax.scan(step, carry, minibatches)

    return jax.lax.scan(epoch, carry, permutations)
