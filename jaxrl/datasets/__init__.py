"""Offline datasets: `Dataset` (complete episodes of transitions, numpy on the host), its
checks, the `.npz` format, the normalised score and the on-device replay ring
(`dataset.py`); the observation statistics of normalisation (`normalization.py`);
collecting datasets from runs (`collect.py`, imported on its own: it restores runs); the
Minari format (`minari_io.py`, needs the `offline` extra). See docs/offline.md."""

from .dataset import (
    FIELDS,
    Dataset,
    DatasetError,
    check,
    concatenate,
    from_arrays,
    load,
    normalized_score,
    reference_returns,
    save,
    summary,
    to_replay,
)
from .normalization import ObsNorm, observation_stats

__all__ = [
    "FIELDS",
    "Dataset",
    "DatasetError",
    "ObsNorm",
    "check",
    "concatenate",
    "from_arrays",
    "load",
    "normalized_score",
    "observation_stats",
    "reference_returns",
    "save",
    "summary",
    "to_replay",
]
