"""Proportional prioritised replay (Schaul et al. 2016) over `jaxrl.replay.buffer`'s ring.

The same `init / add / sample` as the uniform buffer plus `set_priorities`. Each slot
of the ring has a leaf in a sum tree (`jaxrl.replay.sum_tree`) holding `p^alpha`, so
slot `i` is drawn with probability

    P(i) = p_i^alpha / sum_k p_k^alpha                       (Schaul et al. 2016, eq. 1)

and the loss of a sampled item is weighted by the importance-sampling weight

    w_i = (N * P(i))^-beta / max_j w_j                       (Schaul et al. 2016, sec. 3.4)

with the maximum over the sampled batch (as in dopamine), so that weights only scale
updates down. `N` cancels in that ratio: `w_i = (min_j P(j) / P(i))^beta`.

New items get the largest priority stored so far, so every transition is replayed
at least about once (Algorithm 1, line 6). Unwritten slots have priority 0 and are
never drawn; an overwritten slot takes the new item's (maximal) priority.

`alpha` and `beta` are arguments, not state, so they can follow a schedule (beta is
usually annealed to 1). Python numbers are range-checked; traced values are not.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.config import check
from jaxrl.replay import buffer, sum_tree


@struct.dataclass
class PrioritisedState:
    """A uniform ring buffer plus one sum-tree leaf (`p^alpha`) per slot."""

    buffer: buffer.ReplayState
    tree: sum_tree.SumTree
    max_priority: jax.Array  # float32: largest p^alpha set so far (1 before any), for new items


@struct.dataclass
class PrioritisedSample:
    """Sampled items, their slots, sampling probabilities and importance weights."""

    items: Any  # leaves [batch_size, ...]
    indices: jax.Array  # int32 [batch_size]: slots, to pass back to `set_priorities`
    probabilities: jax.Array  # float32 [batch_size]: P(i)
    weights: jax.Array  # float32 [batch_size]: w_i in (0, 1], the largest in the batch is 1


def init(example_item: Any, capacity: int, add_batch_size: int = 1) -> PrioritisedState:
    """An empty prioritised buffer; see `buffer.init` for the arguments."""
    state = buffer.init(example_item, capacity, add_batch_size)
    return PrioritisedState(
        buffer=state,
        tree=sum_tree.init(buffer.capacity(state)),
        max_priority=jnp.float32(1.0),
    )


def add(state: PrioritisedState, items: Any) -> PrioritisedState:
    """Writes one row (see `buffer.add`) and gives its slots the maximal priority."""
    width = buffer.add_batch_size(state.buffer)
    slots = state.buffer.head * width + jnp.arange(width, dtype=jnp.int32)
    tree = sum_tree.update(state.tree, slots, jnp.full((width,), state.max_priority))
    return state.replace(buffer=buffer.add(state.buffer, items), tree=tree)


def sample(
    state: PrioritisedState,
    key: jax.Array,
    batch_size: int,
    beta: float | jax.Array,
    *,
    stratified: bool = True,
) -> PrioritisedSample:
    """`batch_size` items drawn with probability `P(i)`, with their importance weights.

    `stratified` draws one item from each of `batch_size` equal segments of the
    priority mass, as Schaul et al. do (App. B.2.1); each draw's marginal is still
    `P(i)`. Returns garbage from an empty buffer: gate with `buffer.can_sample`.
    """
    buffer.check_batch_size(state.buffer, batch_size)
    _check_exponent("beta", beta)
    indices = sum_tree.sample(state.tree, key, batch_size, stratified=stratified)
    probabilities = sum_tree.get(state.tree, indices) / sum_tree.total(state.tree)
    return PrioritisedSample(
        items=buffer.gather(state.buffer, indices),
        indices=indices,
        probabilities=probabilities,
        weights=importance_weights(probabilities, beta),
    )


def importance_weights(probabilities: jax.Array, beta: float | jax.Array) -> jax.Array:
    """`(N P(i))^-beta / max_j (N P(j))^-beta = (min_j P(j) / P(i))^beta` over the batch
    (Schaul et al. 2016, sec. 3.4); corrects the bias of non-uniform sampling fully at
    `beta = 1`."""
    return (jnp.min(probabilities) / probabilities) ** beta


def set_priorities(
    state: PrioritisedState,
    indices: jax.Array,
    priorities: jax.Array,
    alpha: float | jax.Array,
) -> PrioritisedState:
    """Sets the priorities `p` of slots `indices` (usually `|TD error| + eps`), storing `p^alpha`.

    `alpha = 0` is uniform sampling, `alpha = 1` fully proportional. A priority of 0
    means "never sample" (whatever alpha). For an index sampled more than once, the
    last priority given wins. Priorities must be finite and >= 0.
    """
    _check_exponent("alpha", alpha)
    priorities = jnp.asarray(priorities, jnp.float32)
    scaled = jnp.where(priorities > 0, priorities**alpha, 0.0)
    return state.replace(
        tree=sum_tree.update(state.tree, indices, scaled),
        max_priority=jnp.maximum(state.max_priority, jnp.max(scaled)),
    )


def _check_exponent(name: str, value: Any) -> None:
    if isinstance(value, (int, float)):
        check(0.0 <= value <= 1.0, name, value, "in [0, 1]")
