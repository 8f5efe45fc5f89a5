"""Reading and writing the Minari format (Farama's successor of D4RL), local datasets only.

Needs the `minari` package (`pip install 'jaxrl[offline]'`); nothing here downloads:
`read` loads a dataset already under the Minari root (`root`, else the
`MINARI_DATASETS_PATH` environment variable, else Minari's default), `write` creates one
there. Minari stores episodes: observations `[T + 1, ...]` (the first through the last),
actions, rewards, terminations and truncations `[T]`. A jaxrl `Dataset` is the same
episodes flattened into transitions (`observations` the first T, `next_observations` the
last T of each episode). The normalised score's references travel as Minari's
`ref_min_score` (random) and `ref_max_score` (expert).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from jaxrl import envs

from .dataset import Dataset, DatasetError, concatenate, from_arrays, reference_returns

EPISODE_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations")
"""What every Minari episode must hold for a jaxrl dataset."""


def _minari() -> Any:
    try:
        import minari
    except ImportError:
        raise ImportError(
            "the Minari format needs the minari package: pip install 'jaxrl[offline]'"
        ) from None
    return minari


@contextlib.contextmanager
def _root(root: str | pathlib.Path | None) -> Iterator[None]:
    """Minari reads its root from `MINARI_DATASETS_PATH` at each call: set it for the
    block (and restore it after) when `root` is given."""
    if root is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def gym_space(space: envs.spaces.Space) -> Any:
    """The gymnasium space Minari records for a jaxrl Box or Discrete space."""
    import gymnasium

    if isinstance(space, envs.spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n))
    if isinstance(space, envs.spaces.Box):
        low = np.broadcast_to(np.asarray(space.low, np.float32), tuple(space.shape))
        high = np.broadcast_to(np.asarray(space.high, np.float32), tuple(space.shape))
        return gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)
    raise DatasetError(f"invalid space={space!r}: Minari export supports Box and Discrete spaces")


def episodes(data: Dataset) -> list[dict[str, np.ndarray]]:
    """The dataset as Minari episode buffers (observations with the final one appended)."""
    out, start = [], 0
    for end in data.episode_ends:
        steps = slice(start, end + 1)
        out.append(
            {
                "observations": np.concatenate(
                    [data.observations[steps], data.next_observations[end : end + 1]]
                ),
                "actions": data.actions[steps],
                "rewards": data.rewards[steps],
                "terminations": data.terminations[steps],
                "truncations": data.truncations[steps],
            }
        )
        start = end + 1
    return out


def write(
    data: Dataset,
    dataset_id: str,
    observation_space: envs.spaces.Space,
    action_space: envs.spaces.Space,
    root: str | pathlib.Path | None = None,
) -> Any:
    """Creates the local Minari dataset `dataset_id` (e.g. `"pendulum/medium-replay-v0"`)
    from `data`; returns the `MinariDataset`."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer

    refs = reference_returns(data.metadata)
    buffers = [EpisodeBuffer(id=i, **episode) for i, episode in enumerate(episodes(data))]
    # Minari warns about each unset provenance field (author, code permalink, ...).
    with _root(root), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="minari")
        dataset = minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=buffers,
            observation_space=gym_space(observation_space),
            action_space=gym_space(action_space),
            algorithm_name="jaxrl dataset collect",
            description=f"jaxrl dataset, sources {data.metadata.get('sources')}",
        )
        if refs is not None:
            # Minari records reference scores itself only when it can make the environment
            # with gymnasium (jaxrl's are not registered there): written afterwards.
            dataset.storage.update_metadata({"ref_min_score": refs[0], "ref_max_score": refs[1]})
    return dataset


def read(
    dataset_id: str, root: str | pathlib.Path | None = None, env: str | None = None
) -> Dataset:
    """The local Minari dataset `dataset_id` as a jaxrl `Dataset` (never downloads: an
    unknown id is an error naming the root). An episode without one of
    `EPISODE_FIELDS`, or with mismatched lengths, is a `DatasetError` naming it."""
    minari = _minari()
    with _root(root):
        local = minari.list_local_datasets()
        if dataset_id not in local:
            where = root or os.environ.get("MINARI_DATASETS_PATH", "Minari's default root")
            raise DatasetError(
                f"invalid dataset_id={dataset_id!r}: no such local Minari dataset in {where} "
                f"(local: {sorted(local)}); jaxrl does not download datasets"
            )
        dataset = minari.load_dataset(dataset_id)
        parts = [_episode(episode, i) for i, episode in enumerate(dataset.iterate_episodes())]
        metadata = dict(getattr(dataset.storage, "metadata", {}) or {})
    info = {
        "env": env,
        "sources": [f"minari:{dataset_id}"],
        "random_return": metadata.get("ref_min_score"),
        "expert_return": metadata.get("ref_max_score"),
    }
    if not parts:
        raise DatasetError(f"invalid dataset {dataset_id!r}: it has no episodes")
    return concatenate(parts, info)


def _episode(episode: Any, index: int) -> Dataset:
    values = {}
    for name in EPISODE_FIELDS:
        value = getattr(episode, name, None)
        if value is None or isinstance(value, (dict, tuple)):
            raise DatasetError(
                f"invalid Minari episode {index}: field {name!r} is "
                f"{'missing' if value is None else 'a dict or tuple'}; jaxrl needs arrays of "
                f"all of {list(EPISODE_FIELDS)}"
            )
        values[name] = np.asarray(value)
    for name in ("rewards", "terminations", "truncations"):  # (T, 1) -> (T,); else checked
        if values[name].ndim == 2 and values[name].shape[1] == 1:
            values[name] = values[name][:, 0]
    steps = values["rewards"].shape[0]
    if values["observations"].shape[0] != steps + 1:
        raise DatasetError(
            f"invalid Minari episode {index}: field 'observations' has "
            f"{values['observations'].shape[0]} rows; must be rewards' {steps} + 1"
        )
    obs = values.pop("observations")
    return from_arrays({**values, "observations": obs[:-1], "next_observations": obs[1:]})
