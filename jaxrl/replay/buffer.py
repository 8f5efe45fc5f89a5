"""Uniform replay: a ring buffer of items and of per-environment sequences, as pure functions.

`init(example_item, capacity, add_batch_size) -> ReplayState`, `add(state, items)`,
`sample(state, key, batch_size)` (single items) and `sample_sequences(state, key,
batch_size, length)` (contiguous windows, for world models) in the optax style: the
state is a `flax.struct` pytree of fixed-shape arrays, so it lives inside the jitted
training state, `vmap`s over agents (one buffer each, stacked on a leading axis: vmap
these functions, do not call them on the stacked state) and is saved by orbax with
the rest of the state.

Layout: every leaf is `[rows, add_batch_size, *item_shape]`. One `add` writes one
row, one item per parallel environment, so column `e` of consecutive rows is
environment `e`'s experience in time order: windows along the row axis are
sequences (world models) and n-step windows (`jaxrl.replay.nstep`). An item is any
pytree; an item's *slot* is its flat index `row * add_batch_size + column`, the
index that `sample` returns and that prioritised replay keys priorities by
(`jaxrl.replay.prioritised`).

Rows fill in order; once all are written the oldest is overwritten. `head` is the
next row to write: the newest row is just behind it and the oldest at it, so a
sequence that crossed it would join the newest data to the oldest. Sampled
sequences never do. They may cross episode boundaries (environments auto-reset
inside a column): store an `is_first`/`terminated` flag in the item and let the
model reset on it, as DreamerV3 does.

What is not here: priorities (`prioritised.py`), n-step targets (`nstep.py`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import prng
from jaxrl.config import check


@struct.dataclass
class ReplayState:
    """A ring buffer of `rows x add_batch_size` items."""

    items: Any  # pytree; each leaf [rows, add_batch_size, *item_shape]
    head: jax.Array  # int32: the next row `add` writes
    size: jax.Array  # int32: rows written so far, saturating at `rows`


@struct.dataclass
class Sample:
    """Sampled items and the slots they came from (keys for `prioritised.set_priorities`)."""

    items: Any  # leaves [batch_size, ...], or [batch_size, length, ...] for sequences
    indices: jax.Array  # int32 [batch_size]: slot of the (first) item


def init(example_item: Any, capacity: int, add_batch_size: int = 1) -> ReplayState:
    """An empty buffer of `capacity // add_batch_size` rows of `add_batch_size` items.

    `example_item` is one item (no batch axis); its leaves' shapes and dtypes are the
    stored ones (e.g. give observations as uint8 to store them as bytes).
    """
    check(_is_int(add_batch_size) and add_batch_size >= 1, "add_batch_size", add_batch_size, ">= 1")
    check(
        _is_int(capacity) and capacity >= add_batch_size,
        "capacity",
        capacity,
        f"an integer >= add_batch_size ({add_batch_size})",
    )
    check(bool(jax.tree.leaves(example_item)), "example_item", example_item, "a non-empty pytree")
    rows = capacity // add_batch_size
    items = jax.tree.map(
        lambda x: jnp.zeros((rows, add_batch_size, *jnp.shape(x)), jnp.asarray(x).dtype),
        example_item,
    )
    return ReplayState(items=items, head=jnp.int32(0), size=jnp.int32(0))


def rows(state: ReplayState) -> int:
    """Rows (time steps per environment column) the buffer holds (static)."""
    return jax.tree.leaves(state.items)[0].shape[0]


def add_batch_size(state: ReplayState) -> int:
    """Items per row: how many `add` takes at once (static)."""
    return jax.tree.leaves(state.items)[0].shape[1]


def capacity(state: ReplayState) -> int:
    """Items the buffer holds when full (static)."""
    return rows(state) * add_batch_size(state)


def num_items(state: ReplayState) -> jax.Array:
    """Items written and not yet overwritten."""
    return state.size * add_batch_size(state)


def can_sample(state: ReplayState, min_items: int, length: int = 1) -> jax.Array:
    """True once the buffer holds `min_items` items and every column `length` steps."""
    return (num_items(state) >= min_items) & (state.size >= length)


def add(state: ReplayState, items: Any) -> ReplayState:
    """Writes one row: `items` has a leading axis of `add_batch_size` (one per environment).

    Overwrites the oldest row when the buffer is full. Leaves are cast to the stored
    dtypes; their shapes must match.
    """
    _check_items(state, items)
    new = jax.tree.map(
        lambda buf, x: jax.lax.dynamic_update_index_in_dim(buf, x.astype(buf.dtype), state.head, 0),
        state.items,
        items,
    )
    return ReplayState(
        items=new,
        head=(state.head + 1) % rows(state),
        size=jnp.minimum(state.size + 1, rows(state)),
    )


def sample(state: ReplayState, key: jax.Array, batch_size: int) -> Sample:
    """`batch_size` items drawn uniformly, with replacement, from the written slots.

    Returns garbage (in-bounds) items from an empty buffer: gate with `can_sample`.
    """
    check_batch_size(state, batch_size)
    indices = _uniform_starts(state, key, batch_size, length=1)
    return Sample(items=gather(state, indices), indices=indices)


def sample_sequences(state: ReplayState, key: jax.Array, batch_size: int, length: int) -> Sample:
    """`batch_size` windows of `length` consecutive steps of one environment each.

    Every window of written steps that does not cross the write head is equally
    likely (drawn with replacement), so no window joins the newest data to the
    oldest. Windows may cross episode boundaries (see the module docstring). Items
    are `[batch_size, length, ...]`; `indices` are the slots of the first steps.
    Gate with `can_sample(state, ..., length)`: with fewer than `length` rows
    written the windows are garbage.
    """
    check_batch_size(state, batch_size)
    check(
        _is_int(length) and 1 <= length <= rows(state),
        "length",
        length,
        f"an integer in [1, rows={rows(state)}] (the steps stored per environment: "
        "capacity // add_batch_size)",
    )
    indices = _uniform_starts(state, key, batch_size, length)
    items, _ = gather_windows(state, indices, length)
    return Sample(items=items, indices=indices)


def gather(state: ReplayState, indices: jax.Array) -> Any:
    """The items at slots `indices`, leaves `[*indices.shape, ...]`."""
    row, col = jnp.divmod(indices, add_batch_size(state))
    return jax.tree.map(lambda x: x[row, col], state.items)


def shift(state: ReplayState, indices: jax.Array, steps: jax.Array | int) -> jax.Array:
    """The slots `steps` rows after slots `indices`, in the same column (around the ring)."""
    row, col = jnp.divmod(indices, add_batch_size(state))
    return ((row + steps) % rows(state)) * add_batch_size(state) + col


def gather_windows(state: ReplayState, indices: jax.Array, length: int) -> tuple[Any, jax.Array]:
    """Windows of `length` steps of one column starting at slots `indices` (1-D).

    Returns `(items, valid)`: leaves `[batch, length, ...]` and a bool `[batch, length]`
    that is False for steps at or past the write head (not written yet, or older
    data behind it). `valid` is a prefix of each window and its first step is valid
    for every written slot.
    """
    row, col = jnp.divmod(indices, add_batch_size(state))
    steps = jnp.arange(length, dtype=jnp.int32)
    time = (row[:, None] + steps) % rows(state)
    items = jax.tree.map(lambda x: x[time, col[:, None]], state.items)
    age = (row - _oldest_row(state)) % rows(state)  # position of the start in time order
    return items, age[:, None] + steps < state.size


def _oldest_row(state: ReplayState) -> jax.Array:
    return (state.head - state.size) % rows(state)


def _uniform_starts(state: ReplayState, key: jax.Array, batch_size: int, length: int) -> jax.Array:
    """Slots drawn uniformly among the starts of windows of `length` written steps."""
    width = add_batch_size(state)
    num_starts = jnp.maximum(state.size - length + 1, 1) * width
    k = prng.randint(key, (batch_size,), 0, num_starts)
    age, col = jnp.divmod(k, width)
    row = (_oldest_row(state) + age) % rows(state)
    return row * width + col


def _check_items(state: ReplayState, items: Any) -> None:
    want = [(add_batch_size(state), *x.shape[2:]) for x in jax.tree.leaves(state.items)]
    got = [tuple(jnp.shape(x)) for x in jax.tree.leaves(items)]
    same_tree = jax.tree.structure(state.items) == jax.tree.structure(items)
    check(
        same_tree and want == got,
        "items",
        got,
        f"a pytree like the example item with a leading axis of add_batch_size, shapes {want}",
    )


def check_batch_size(state: ReplayState, batch_size: int) -> None:
    """Raises `ConfigError` unless `1 <= batch_size <= capacity` (static, at trace time)."""
    check(
        _is_int(batch_size) and 1 <= batch_size <= capacity(state),
        "batch_size",
        batch_size,
        f"an integer in [1, capacity={capacity(state)}] (a buffer smaller than a batch)",
    )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
