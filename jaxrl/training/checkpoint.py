"""Checkpoints of the whole training state with orbax-checkpoint.

Each checkpoint is one orbax step directory holding the full state pytree
(parameters, optimizer state, environment states, RNG keys, normalisation
statistics, counters) plus a JSON record with a SHA-256 fingerprint of the
state's bytes. Orbax writes into a temporary directory and renames it only
when complete, so a run killed mid-save leaves no half-written step that
looks finished; a finalised step whose files were damaged fails to restore or
fails the fingerprint check, and is skipped with a warning in favour of the
previous one. It is never loaded.
"""

from __future__ import annotations

import hashlib
import logging
import pathlib
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


def tree_fingerprint(tree: Any) -> str:
    """SHA-256 (hex) of all leaves' bytes in `jax.tree` order.

    PRNG key arrays are hashed through their raw key data. Used both for
    checkpoint integrity and for `summary.json`'s `params_fingerprint`.
    """
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        arr = np.asarray(jax.device_get(leaf))
        digest.update(str(arr.dtype).encode())
        digest.update(str(arr.shape).encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
    return digest.hexdigest()


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
                warnings.warn(
                    f"skipping damaged checkpoint {self.directory / str(step)}: "
                    f"{type(err).__name__}: {err}",
                    CorruptCheckpointWarning,
                    stacklevel=2,
                )
                continue
            return step, state, meta
        return None

    def close(self) -> None:
        self._manager.close()


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
