"""Checkpoints of the whole training state with orbax-checkpoint.

Each checkpoint is one orbax step directory holding a state pytree (the driver
saves the whole training state except the fields an algorithm declares frozen:
parameters, optimizer state, environment states, replay buffers, RNG keys,
normalisation statistics, counters) as the sharded arrays it is made of, with no
gather to one host, plus a JSON record with the host-side state and a fingerprint
(`tree_fingerprint`) of what was saved. Orbax writes into a temporary directory and renames it only
when complete, so a run killed mid-save leaves no half-written step that
looks finished; a finalised step whose files were damaged fails to restore or
fails the fingerprint check, and is skipped with a warning in favour of the
previous one. It is never loaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pathlib
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

log = logging.getLogger(__name__)


def tree_fingerprint(tree: Any) -> str:
    """A SHA-256 (hex) over every leaf's dtype, shape and two 32-bit checksums of its bits.

    The checksums are computed on the devices that hold the leaf (one small jitted
    reduction per tree structure), so a sharded state (a replay buffer, an FSDP
    model, a multi-host run) is never gathered to one host, and only 8 bytes per
    leaf cross to it. Per leaf, with `b_i` the bits of element `i` as uint32 and
    `w_i = 2654435761 * i + 1` (odd):

        c1 = sum_i b_i * w_i            (mod 2^32)   any single changed element changes it
        c2 = sum_i mix(b_i ^ w_i)       (mod 2^32)   mix = murmur3's 32-bit finaliser

    so any change of one element, of element order, of dtype or of shape changes the
    fingerprint, and other changes do so with probability about 1 - 2^-64. This is
    what checkpoint integrity and summary.json's `params_fingerprint` (equal for a
    resumed and an uninterrupted run) need; it is not a cryptographic hash of the
    bytes. PRNG keys are hashed through their raw key data.
    """
    leaves = [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(tree)]
    leaves = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in leaves]
    digest = hashlib.sha256()
    if leaves:
        sums = np.asarray(_checksums_on(_mesh_of(leaves))(leaves))  # (leaves, 2), replicated
        for leaf, (c1, c2) in zip(leaves, sums, strict=True):
            digest.update(f"{leaf.dtype}{tuple(leaf.shape)}{int(c1)}:{int(c2)};".encode())
    return digest.hexdigest()


def _as_uint32_bits(x: jax.Array) -> jax.Array:
    """The bits of every element as uint32 (flattened); 8/16-bit types zero-extended."""
    x = x.reshape(-1)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    width = jnp.dtype(x.dtype).itemsize
    if width == 4:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    if width in (1, 2):
        unsigned = jnp.uint8 if width == 1 else jnp.uint16
        return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
    if width == 8:  # two 32-bit words per element
        return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(-1)
    raise TypeError(f"cannot fingerprint dtype {x.dtype}")


def _mix32(h: jax.Array) -> jax.Array:
    """murmur3's fmix32: every input bit affects every output bit."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _mesh_of(leaves: list[jax.Array]) -> Mesh | None:
    for leaf in leaves:
        if isinstance(leaf.sharding, NamedSharding):
            return leaf.sharding.mesh
    return None


@functools.lru_cache(maxsize=8)
def _checksums_on(mesh: Mesh | None):
    """`_checksums` jitted with a replicated result on `mesh`, so every process of a
    multi-host run can read it (one compile per mesh and tree structure)."""
    if mesh is None:
        return jax.jit(_checksums)
    return jax.jit(_checksums, out_shardings=NamedSharding(mesh, PartitionSpec()))


def _checksums(leaves: list[jax.Array]) -> jax.Array:
    out = []
    for leaf in leaves:
        bits = _as_uint32_bits(leaf)
        w = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)
        out.append(jnp.stack([jnp.sum(bits * w), jnp.sum(_mix32(bits ^ w))]))
    return jnp.stack(out)


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint could not be restored or failed its integrity check."""


class Checkpointer:
    """Saves and restores training states under `directory`, keeping the last `keep`."""

    def __init__(self, directory: str | pathlib.Path, keep: int = 3, read_only: bool = False):
        self.directory = pathlib.Path(directory).absolute()
        self.read_only = read_only
        if read_only:
            # For readers (evaluation): never create, delete or clean up anything,
            # in particular not the temporary directory of a save in progress.
            # (Not orbax's `read_only`, which logs warnings on every use.)
            options = ocp.CheckpointManagerOptions(
                max_to_keep=None,
                create=False,
                enable_async_checkpointing=False,
                cleanup_tmp_directories=False,
            )
        else:
            options = ocp.CheckpointManagerOptions(
                max_to_keep=keep,
                create=True,
                # Synchronous saves: the driver only checkpoints between compiled
                # chunks, and a finished save must be on disk before we go on.
                enable_async_checkpointing=False,
                cleanup_tmp_directories=True,
            )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )
        self._await_tmp_cleanup()

    def _await_tmp_cleanup(self) -> None:
        """Waits for orbax's clean-up of unfinished saves, started in a thread above.

        orbax awaits it only before the first save, and its `close` does not: a
        process that stops before saving (e.g. a refused resume) would otherwise
        exit with that thread still running, which prints a traceback at
        interpreter shutdown ("cannot schedule new futures").
        """
        await_cleanup = getattr(self._manager, "_maybe_await_cleanup_tmp_directory", None)
        if await_cleanup is not None:
            await_cleanup()

    def steps(self) -> list[int]:
        """Finalised checkpoint steps, oldest first."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Saves `state` at `step` (an update count) with a fingerprint in `meta`."""
        if self.read_only:
            raise RuntimeError(f"{self.directory}: this Checkpointer is read-only")
        meta = {**meta, "fingerprint": tree_fingerprint(state), "step": int(step)}
        if int(step) in self.steps():
            # Only a checkpoint skipped as damaged on resume can be in the way
            # (the run resumed from an earlier one and reached this step again).
            self._manager.delete(int(step))
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_to_savable(state)), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
        self._manager.wait_until_finished()

    def restore_latest(self, target: Any) -> tuple[int, Any, dict[str, Any]] | None:
        """Restores the newest intact checkpoint into the structure of `target`.

        `target` is a state with the right structure, shapes, dtypes and
        shardings (e.g. a freshly initialised one). Damaged checkpoints are
        skipped with a `CorruptCheckpointWarning`. Returns `(step, state,
        meta)` or None when no intact checkpoint exists.
        """
        for step in reversed(self.steps()):
            try:
                with _quiet_failed_reads(self.directory / str(step)):
                    restored = self._manager.restore(
                        step,
                        args=ocp.args.Composite(
                            state=ocp.args.StandardRestore(_abstract(target)),
                            meta=ocp.args.JsonRestore(),
                        ),
                    )
                state = _from_savable(restored["state"], target)
                meta = dict(restored["meta"])
                fingerprint = tree_fingerprint(state)
                if meta.get("fingerprint") != fingerprint:
                    raise ValueError(
                        f"fingerprint mismatch (recorded {meta.get('fingerprint')}, "
                        f"restored {fingerprint})"
                    )
            except Exception as err:  # noqa: BLE001 - any failure means "do not load"
                _ABANDONED_READS.ignore(self.directory / str(step))
                reason = str(err).split(" [tensorstore_spec")[0]
                if len(reason) > 200:
                    reason = reason[:200] + "..."
                warnings.warn(
                    f"skipping damaged checkpoint {self.directory / str(step)} "
                    f"({type(err).__name__}: {reason})",
                    CorruptCheckpointWarning,
                    stacklevel=2,
                )
                continue
            return step, state, meta
        return None

    def close(self) -> None:
        self._manager.close()


@contextlib.contextmanager
def _quiet_failed_reads(step_dir: pathlib.Path) -> Iterator[None]:
    """Keeps orbax/tensorstore's noise about a damaged checkpoint off the terminal.

    When one array of a checkpoint fails to read, orbax's `asyncio.run` closes its
    event loop while tensorstore's other reads are still in flight; each of them
    then prints an "Event loop is closed" traceback from a native thread, straight
    to file descriptor 2, and absl logs an ERROR per unreadable metadata file. On
    failure this waits briefly for those reads to finish, drops exactly that noise
    and passes anything else through; the caller reports the failure in one line.
    The abandoned reads' "exception was never retrieved" reports are dropped from the
    moment of failure (`_ABANDONED_READS`): the garbage collector may make them while
    this still captures file descriptor 2, which would otherwise pass them through.
    """
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.CRITICAL)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            _ABANDONED_READS.ignore(step_dir)
            raise
        finally:
            if failed:
                time.sleep(0.5)  # let the in-flight reads report (into `captured`)
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            absl_logger.setLevel(level)
            captured.seek(0)
            kept = _without_closed_loop_tracebacks(captured.read().decode(errors="replace"))
            if kept.strip():
                sys.stderr.write(kept)


class _AbandonedReadsFilter(logging.Filter):
    """Drops asyncio's "Future exception was never retrieved" reports about reads of a
    checkpoint already reported as damaged.

    orbax abandons the other reads of a checkpoint once one fails; their futures fail
    too, and the garbage collector reports each one through the `asyncio` logger at
    whatever moment it collects them (often at interpreter exit, long after
    `_quiet_failed_reads`), with the whole tensorstore spec. Only reports naming a
    skipped checkpoint's directory are dropped; any other asyncio error still shows.
    """

    def __init__(self) -> None:
        super().__init__()
        self.directories: set[str] = set()

    def ignore(self, step_dir: pathlib.Path) -> None:
        if not self.directories:
            logging.getLogger("asyncio").addFilter(self)
        self.directories.add(f"{step_dir}/")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "exception was never retrieved" not in message:
            return True
        return not any(directory in message for directory in self.directories)


_ABANDONED_READS = _AbandonedReadsFilter()


def _without_closed_loop_tracebacks(text: str) -> str:
    """Drops whole "Traceback ... RuntimeError: Event loop is closed" blocks (lines of
    concurrent tracebacks interleave, so every line such a block is made of goes, and
    so do pieces of them that the interleaving left on a line of their own, such as
    ": Event loop is closed" or "RuntimeErrorEvent loop is closed")."""
    if "Event loop is closed" not in text:
        return text
    noise = (
        "Traceback (most recent call last):",
        "asyncio/base_events.py",
        "self._check_closed()",
        "raise RuntimeError('Event loop is closed')",
        "RuntimeError: Event loop is closed",
        "self.call_soon_threadsafe",
        "loop.call_soon_threadsafe",
    )
    # What interleaving leaves of the last line, e.g. "RuntimeError" and ": Event loop is
    # closed" glued together or apart: a line made of nothing else is noise too.
    fragments = ("RuntimeError", "Event loop is closed", ":")

    def is_noise(line: str) -> bool:
        if any(n in line for n in noise):
            return True
        for fragment in fragments:
            line = line.replace(fragment, "")
        return not line.strip()

    return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))


# Orbax stores typed PRNG keys poorly across versions; store their raw data.
def _to_savable(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: jax.random.key_data(x) if _is_key(x) else x,
        tree,
    )


def _from_savable(tree: Any, target: Any) -> Any:
    return jax.tree.map(
        lambda saved, ref: (
            jax.random.wrap_key_data(saved, impl=jax.random.key_impl(ref))
            if _is_key(ref)
            else saved
        ),
        tree,
        target,
    )


def _abstract(target: Any) -> Any:
    savable = _to_savable(target)
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        savable,
    )


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
