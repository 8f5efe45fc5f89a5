"""Offline datasets: what one holds, its checks, its file format, and its replay ring.

A `Dataset` is a sequence of complete episodes of transitions, as numpy arrays on the
host (one row per environment step):

    observations        [N, *obs_shape]   s_t
    actions             [N, *action_shape] a_t, in the environment's action space
    rewards             [N]               r_t
    terminations        [N] bool          s_{t+1} is terminal (no bootstrap)
    truncations         [N] bool          the episode was cut after this step (a time
                                          limit; bootstrap from next_observations)
    next_observations   [N, *obs_shape]   s_{t+1}: at an episode end the true last
                                          observation, never an auto-reset one

Every episode ends with a termination or a truncation (the last row ends one), so
`episode_returns` is exact. `metadata` is a JSON dictionary: the environment id, the
sources it was collected from, and the reference returns of the normalised score
(`random_return`, `expert_return`; D4RL's, Fu et al. 2020).

* `check` raises `DatasetError` (a `ConfigError`, so the CLI prints one line) naming the
  field and what it must be: a missing field, an empty dataset, unequal lengths,
  NaNs or infinities, observations or actions that do not fit the environment's
  spaces (actions outside a Box's bounds are an error, never clipped).
* `save` / `load`: our own `.npz` format (the six arrays and the metadata as JSON).
* `to_replay`: the dataset as a `jaxrl.replay.buffer.ReplayState` of
  `jaxrl.replay.Transition`s (one column, full, on the device), so the replay layer
  samples it like a buffer (`buffer.sample`, `nstep.nstep_batch`) under `jit` and
  `vmap`. Continuous actions are mapped into the learners' normalised box [-1, 1]^d
  (`jaxrl.acting.from_box`).
* `normalized_score`: `100 (R - R_random) / (R_expert - R_random)`.

What is not here: collecting datasets from runs (`jaxrl/datasets/collect.py`), the
Minari format (`jaxrl/datasets/minari_io.py`), the learners (`jaxrl/algorithms/offline.py`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs
from jaxrl.acting import from_box
from jaxrl.config import ConfigError
from jaxrl.replay import buffer
from jaxrl.replay.nstep import Transition

FIELDS = (
    "observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "next_observations",
)
"""The arrays every dataset holds, one row per environment step."""

# Actions this far outside a Box's bounds still count as inside (float32 round-off of
# an affine map to the bounds and back).
BOUND_TOLERANCE = 1e-5


class DatasetError(ConfigError):
    """A dataset is malformed or does not fit the environment; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Transitions of complete episodes, numpy arrays on the host (see the module docstring)."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    next_observations: np.ndarray
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def episode_ends(self) -> np.ndarray:
        """Row indices of the last step of every episode."""
        return np.flatnonzero(np.logical_or(self.terminations, self.truncations))

    def episode_returns(self) -> np.ndarray:
        """The undiscounted return of every episode, in order (float64)."""
        ends = self.episode_ends
        sums = np.cumsum(self.rewards.astype(np.float64))[ends]
        return np.diff(np.concatenate([[0.0], sums]))

    def with_metadata(self, **values: Any) -> Dataset:
        """A copy with `values` added to (or replacing keys of) the metadata."""
        return dataclasses.replace(self, metadata={**self.metadata, **values})


def from_arrays(arrays: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Dataset:
    """A `Dataset` from a mapping with every field of `FIELDS` (numpy-convertible);
    a missing field is a `DatasetError` naming it. Checks the structure (`check`)."""
    missing = [name for name in FIELDS if name not in arrays]
    if missing:
        raise DatasetError(
            f"invalid dataset: missing field(s) {missing}; a dataset needs all of {list(FIELDS)}"
        )
    data = Dataset(
        observations=np.asarray(arrays["observations"]),
        actions=np.asarray(arrays["actions"]),
        rewards=np.asarray(arrays["rewards"], np.float32),
        terminations=np.asarray(arrays["terminations"]).astype(bool),
        truncations=np.asarray(arrays["truncations"]).astype(bool),
        next_observations=np.asarray(arrays["next_observations"]),
        metadata=dict(metadata or {}),
    )
    check(data)
    return data


def concatenate(datasets: Sequence[Dataset], metadata: Mapping[str, Any] | None = None) -> Dataset:
    """The datasets one after another (a mixed dataset); metadata from `metadata`."""
    if not datasets:
        raise DatasetError("invalid datasets=[]: must name at least one dataset to concatenate")
    arrays = {name: np.concatenate([getattr(d, name) for d in datasets]) for name in FIELDS}
    return from_arrays(arrays, metadata)


# ----------------------------------------------------------------------------- checks


def check(
    data: Dataset,
    observation_space: envs.spaces.Space | None = None,
    action_space: envs.spaces.Space | None = None,
    env_id: str = "the environment",
) -> Dataset:
    """Returns `data` if it is well formed (and fits the given spaces), else raises
    `DatasetError` naming the first bad field and what it must be."""
    n = len(data)
    if data.rewards.ndim != 1:
        _fail("rewards", f"shape {data.rewards.shape}", "one reward per step, shape (N,)")
    if n == 0:
        raise DatasetError("invalid dataset: it is empty (0 transitions); it needs at least one")
    for name in FIELDS:
        rows = getattr(data, name).shape[0] if getattr(data, name).ndim else 0
        if rows != n:
            _fail(name, f"{rows} rows", f"{n} rows, one per step like rewards")
    for name in ("terminations", "truncations"):
        if getattr(data, name).ndim != 1:
            _fail(name, f"shape {getattr(data, name).shape}", "one flag per step, shape (N,)")
    if data.observations.shape != data.next_observations.shape:
        _fail(
            "next_observations",
            f"shape {data.next_observations.shape}",
            f"the shape of observations, {data.observations.shape}",
        )
    for name in ("observations", "actions", "rewards", "next_observations"):
        values = getattr(data, name)
        if np.issubdtype(values.dtype, np.floating):
            bad = np.flatnonzero(~np.isfinite(values.reshape(n, -1)).all(axis=1))
            if bad.size:
                _fail(
                    name,
                    f"{bad.size} row(s) with NaN or infinity (first at row {bad[0]})",
                    "finite numbers",
                )
        elif not np.issubdtype(values.dtype, np.integer) and values.dtype != bool:
            _fail(name, f"dtype {values.dtype}", "numbers")
    if not (data.terminations[-1] or data.truncations[-1]):
        _fail(
            "truncations",
            "False at the last row (its episode is incomplete)",
            "True (or terminations True) at the last row: a dataset holds complete "
            "episodes; mark the last step truncated or drop the partial episode",
        )
    if observation_space is not None:
        _check_observations(data, observation_space, env_id)
    if action_space is not None:
        _check_actions(data, action_space, env_id)
    return data


def _fail(field: str, got: str, allowed: str) -> None:
    raise DatasetError(f"invalid dataset field {field!r}: {got}; must be {allowed}")


def _check_observations(data: Dataset, space: envs.spaces.Space, env_id: str) -> None:
    want = tuple(space.shape)
    got = tuple(data.observations.shape[1:])
    if got != want:
        _fail(
            "observations",
            f"per-step shape {got}",
            f"{env_id}'s observation shape {want}",
        )


def _check_actions(data: Dataset, space: envs.spaces.Space, env_id: str) -> None:
    actions = data.actions
    if isinstance(space, envs.spaces.Discrete):
        if actions.shape[1:] != () or not np.issubdtype(actions.dtype, np.integer):
            _fail(
                "actions",
                f"per-step shape {actions.shape[1:]}, dtype {actions.dtype}",
                f"one integer per step for {env_id}'s Discrete({space.n}) actions",
            )
        outside = np.flatnonzero((actions < 0) | (actions >= space.n))
        if outside.size:
            _fail(
                "actions",
                f"{outside.size} value(s) outside [0, {space.n}) (first {actions[outside[0]]} "
                f"at row {outside[0]})",
                f"integers in [0, {space.n}) for {env_id}",
            )
        return
    if not isinstance(space, envs.spaces.Box):
        raise DatasetError(f"invalid env={env_id!r}: datasets need a Box or Discrete action space")
    want = tuple(space.shape)
    if tuple(actions.shape[1:]) != want:
        _fail("actions", f"per-step shape {tuple(actions.shape[1:])}", f"{env_id}'s {want}")
    low = np.broadcast_to(np.asarray(space.low, np.float64), want)
    high = np.broadcast_to(np.asarray(space.high, np.float64), want)
    span = np.maximum(high - low, 1.0) * BOUND_TOLERANCE
    flat = actions.reshape(len(data), -1).astype(np.float64)
    outside = np.flatnonzero(
        ((flat < (low - span).reshape(1, -1)) | (flat > (high + span).reshape(1, -1))).any(axis=1)
    )
    if outside.size:
        _fail(
            "actions",
            f"{outside.size} row(s) outside the bounds (first at row {outside[0]}: "
            f"{actions[outside[0]].tolist()})",
            f"inside {env_id}'s Box bounds [{low.tolist()}, {high.tolist()}] (nothing is clipped)",
        )


# ----------------------------------------------------------------------------- scores


def normalized_score(returns: Any, random_return: float, expert_return: float) -> Any:
    """`100 (R - R_random) / (R_expert - R_random)`: 0 is the random policy, 100 the
    expert (D4RL's normalised score, Fu et al. 2020, "D4RL: Datasets for Deep
    Data-Driven Reinforcement Learning", sec. 5). Works on numbers, numpy and jax arrays."""
    return 100.0 * (returns - random_return) / (expert_return - random_return)


def reference_returns(metadata: Mapping[str, Any]) -> tuple[float, float] | None:
    """`(random_return, expert_return)` from a dataset's metadata, or None when either is
    missing; raises `DatasetError` if they do not span an interval."""
    random_return = metadata.get("random_return")
    expert_return = metadata.get("expert_return")
    if random_return is None or expert_return is None:
        return None
    if not float(expert_return) > float(random_return):
        raise DatasetError(
            f"invalid dataset metadata expert_return={expert_return!r}: must be greater than "
            f"random_return={random_return!r} (the normalised score divides by their difference)"
        )
    return float(random_return), float(expert_return)


def summary(data: Dataset) -> dict[str, Any]:
    """What `jaxrl dataset info` prints and `save` records: size, episodes, the
    behaviour policy's returns (mean, std, min, max) and their normalised score."""
    returns = data.episode_returns()
    info: dict[str, Any] = {
        "transitions": len(data),
        "episodes": int(returns.size),
        "behaviour_return_mean": float(returns.mean()),
        "behaviour_return_std": float(returns.std()),
        "behaviour_return_min": float(returns.min()),
        "behaviour_return_max": float(returns.max()),
    }
    refs = reference_returns(data.metadata)
    if refs is not None:
        info["behaviour_normalized_score"] = float(normalized_score(returns.mean(), *refs))
    return info


# ----------------------------------------------------------------------------- files


def save(data: Dataset, path: str | pathlib.Path) -> pathlib.Path:
    """Writes `data` as `.npz` (the arrays, and the metadata with `summary` as JSON)."""
    check(data)
    path = pathlib.Path(path)
    if path.suffix != ".npz":
        raise DatasetError(f"invalid path={str(path)!r}: must end in .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {**data.metadata, **summary(data)}
    arrays = {name: getattr(data, name) for name in FIELDS}
    with open(path, "wb") as f:
        np.savez(f, metadata=np.asarray(json.dumps(metadata)), **arrays)
    return path


def load(path: str | pathlib.Path) -> Dataset:
    """Reads a dataset `save` wrote; a missing file or field is a `DatasetError`."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise DatasetError(f"invalid dataset={str(path)!r}: no such file")
    with np.load(path, allow_pickle=False) as f:
        arrays = {name: f[name] for name in f.files if name != "metadata"}
        metadata = json.loads(str(f["metadata"])) if "metadata" in f.files else {}
    return from_arrays(arrays, metadata)


# ----------------------------------------------------------------------------- on the device


def to_replay(data: Dataset, action_space: envs.spaces.Space) -> buffer.ReplayState:
    """The dataset as a full replay ring of `Transition`s (one column, `len(data)` rows,
    on the device): `buffer.sample` draws uniformly from all of it and
    `nstep.nstep_batch` builds the targets, terminations stopping the bootstrap.
    Box actions are mapped into [-1, 1]^d; Discrete ones stay integers."""
    if isinstance(action_space, envs.spaces.Discrete):
        actions = jnp.asarray(data.actions, jnp.int32)
    else:
        actions = from_box(jnp.asarray(data.actions, jnp.float32), action_space)
    # Float observations as float32; integer or boolean ones (MinAtar's) as stored, a
    # quarter of the memory: the networks cast them.
    obs_dtype = jnp.float32 if np.issubdtype(data.observations.dtype, np.floating) else None
    items = Transition(
        observation=jnp.asarray(data.observations, obs_dtype),
        action=actions,
        reward=jnp.asarray(data.rewards, jnp.float32),
        terminated=jnp.asarray(data.terminations, bool),
        truncated=jnp.asarray(data.truncations, bool),
        next_observation=jnp.asarray(data.next_observations, obs_dtype),
    )
    items = jax.tree.map(lambda x: x[:, None], items)  # [N, ...] -> one column, [N, 1, ...]
    return buffer.ReplayState(items=items, head=jnp.int32(0), size=jnp.int32(len(data)))
