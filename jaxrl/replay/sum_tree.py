"""A sum tree over a fixed number of non-negative leaves, as a pure-functional pytree.

The data structure behind proportional prioritised replay (Schaul et al. 2016,
"Prioritized Experience Replay", Appendix B.2.1): every internal node holds the
sum of its two children, so drawing leaf `i` with probability `v_i / sum_j v_j`
is one walk from the root (O(log n)), and changing a leaf updates only its
ancestors.

The tree is one float32 array per level, from the root to the leaves; there are
`capacity` rounded up to a power of two leaves (the padding leaves stay 0 and are
never drawn). Shapes are fixed, so the state can live in a jitted training
state, be `vmap`ped (one tree per agent) and be saved by orbax.

Two choices differ from the usual delta-propagating implementation (dopamine,
flashbax) and are deliberate:

* Ancestors are **recomputed from their children** (`parent = left + right`) rather
  than incremented by the leaf's change. In float32, increments accumulate rounding
  error and cancel catastrophically: after a leaf of 1e6 is set back to 0, a root
  that also covered leaves of 1e-3 becomes exactly 0. Recomputed, every internal
  node is exactly the float32 sum of its children after every update.
* The walk never enters a subtree whose sum is 0, so a draw can never land on an
  empty (unwritten or zero-priority) leaf, even when rounding puts the query value
  at or past the total.

Leaf indices and priorities are the caller's business (`jaxrl.replay.prioritised`
maps buffer slots to leaves and applies the priority exponent).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng
from jaxrl.config import check


@struct.dataclass
class SumTree:
    """Node sums level by level: `levels[0]` is the root (the total), `levels[-1]` the leaves.

    Level `d` holds `2**d` nodes; the children of node `k` are nodes `2k` and `2k + 1`
    of level `d + 1`. One array per level (rather than one heap array) lets XLA update
    a level in place while reading the level below.
    """

    levels: tuple[jax.Array, ...]  # float32 [1], [2], [4], ..., [num_leaves]


def init(capacity: int) -> SumTree:
    """An all-zero tree with room for `capacity` leaves."""
    check(isinstance(capacity, int) and capacity >= 1, "capacity", capacity, "an integer >= 1")
    depth = math.ceil(math.log2(capacity))
    return SumTree(levels=tuple(jnp.zeros(2**d, jnp.float32) for d in range(depth + 1)))


def num_leaves(tree: SumTree) -> int:
    """Number of leaves (a power of two, static)."""
    return tree.levels[-1].shape[-1]


def depth(tree: SumTree) -> int:
    """Edges from the root to a leaf (static)."""
    return len(tree.levels) - 1


def total(tree: SumTree) -> jax.Array:
    """Sum of all leaves."""
    return tree.levels[0][0]


def leaves(tree: SumTree) -> jax.Array:
    """All leaf values, `[num_leaves]`."""
    return tree.levels[-1]


def get(tree: SumTree, indices: jax.Array) -> jax.Array:
    """Leaf values at `indices`."""
    return tree.levels[-1][indices]


def update(tree: SumTree, indices: jax.Array, values: jax.Array) -> SumTree:
    """Sets leaves `indices` (1-D) to `values` and recomputes their ancestors.

    When an index appears more than once, its last value in `values` wins (as for
    sequential assignment), so updating the priorities of a batch sampled with
    replacement is well defined. Values must be finite and >= 0.
    """
    indices, values, is_last = _last_occurrence(indices, jnp.asarray(values, jnp.float32))
    # Duplicates other than the last write go out of bounds and are dropped.
    targets = jnp.where(is_last, indices, num_leaves(tree))
    levels = [tree.levels[-1].at[targets].set(values, mode="drop")]
    node = indices
    for level in reversed(tree.levels[:-1]):
        # Bottom-up, so every parent is computed from fully updated children;
        # a parent shared by several leaves is written the same value each time.
        node = node // 2
        below = levels[0]
        levels.insert(0, level.at[node].set(below[2 * node] + below[2 * node + 1]))
    return SumTree(levels=tuple(levels))


def find(tree: SumTree, targets: jax.Array) -> jax.Array:
    """Leaf index whose cumulative-sum interval contains each target in `[0, total)`.

    The prefix-sum search of Schaul et al. 2016 (App. B.2.1): at each node go left
    if the target is below the left child's sum, else subtract that sum and go
    right. A subtree with sum 0 is never entered, so the result is always a leaf
    with a positive value as long as the total is positive.
    """
    node = jnp.zeros(targets.shape, jnp.int32)
    query = targets.astype(jnp.float32)
    for level in tree.levels[1:]:
        left, right = level[2 * node], level[2 * node + 1]
        go_right = ((query >= left) & (right > 0)) | (left <= 0)
        query = jnp.where(go_right, query - left, query)
        node = 2 * node + go_right.astype(jnp.int32)
    return node


def sample(
    tree: SumTree, key: jax.Array, batch_size: int, *, stratified: bool = False
) -> jax.Array:
    """`batch_size` leaf indices, each drawn with probability `leaf / total`.

    `stratified=True` splits `[0, total)` into `batch_size` equal segments and draws
    one target in each (Schaul et al. 2016, App. B.2.1): every index keeps the same
    marginal probability per draw, but the batch covers the distribution more
    evenly (lower variance than independent draws). The default draws independently.
    """
    u = prng.uniform(key, (batch_size,), jnp.float32, layout="jax")
    if stratified:
        u = (jnp.arange(batch_size, dtype=jnp.float32) + u) / batch_size
    return find(tree, u * total(tree))


def _last_occurrence(
    indices: jax.Array, values: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Sorts `(indices, values)` by index (stably) and marks the last of each run of equal
    indices, i.e. the value a sequential loop of assignments would leave behind."""
    order = jnp.argsort(indices, stable=True)
    indices, values = indices[order], jnp.broadcast_to(values, indices.shape)[order]
    is_last = jnp.append(indices[1:] != indices[:-1], True)
    return indices, values, is_last
