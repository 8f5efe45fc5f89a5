"""The Minari format (`jaxrl/datasets/minari_io.py`): a dataset we generate round-trips
through a local Minari dataset (needs the `offline` extra), and malformed episodes are
errors naming the field (no minari needed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from jaxrl import datasets, envs
from jaxrl.datasets import DatasetError, minari_io


def tiny() -> datasets.Dataset:
    """Three Pendulum-shaped episodes of lengths 2, 3, 1 (terminated, truncated, truncated)."""
    ends = [1, 4, 5]
    n = 6
    obs = np.arange(n * 3, dtype=np.float32).reshape(n, 3) / 10
    next_obs = np.roll(obs, -1, axis=0)
    next_obs[ends] = -obs[ends]  # the true last observations
    terminations = np.zeros(n, bool)
    terminations[1] = True
    truncations = np.zeros(n, bool)
    truncations[[4, 5]] = True
    return datasets.from_arrays(
        {
            "observations": obs,
            "actions": np.linspace(-2, 2, n, dtype=np.float32)[:, None],
            "rewards": np.arange(n, dtype=np.float32),
            "terminations": terminations,
            "truncations": truncations,
            "next_observations": next_obs,
        },
        {"random_return": -10.0, "expert_return": 20.0},
    )


def test_episodes_carry_the_final_observation():
    data = tiny()
    eps = minari_io.episodes(data)
    assert [len(e["rewards"]) for e in eps] == [2, 3, 1]
    np.testing.assert_array_equal(eps[1]["observations"][:-1], data.observations[2:5])
    np.testing.assert_array_equal(eps[1]["observations"][-1], data.next_observations[4])


def test_a_missing_episode_field_is_named():
    episode = SimpleNamespace(
        observations=np.zeros((3, 3)), actions=np.zeros((2, 1)), rewards=None,
        terminations=np.array([False, True]), truncations=np.array([False, False]),
    )  # fmt: skip
    with pytest.raises(DatasetError, match=r"episode 7: field 'rewards' is missing"):
        minari_io._episode(episode, 7)


def test_observations_must_be_one_longer_than_rewards():
    episode = SimpleNamespace(
        observations=np.zeros((2, 3)), actions=np.zeros((2, 1)), rewards=np.zeros(2),
        terminations=np.array([False, True]), truncations=np.array([False, False]),
    )  # fmt: skip
    with pytest.raises(DatasetError, match=r"'observations' has 2 rows; must be rewards' 2 \+ 1"):
        minari_io._episode(episode, 0)


def test_round_trip_through_a_local_minari_dataset(tmp_path):
    pytest.importorskip("minari")
    env, params = envs.make("Pendulum-v1")
    data = tiny()
    minari_io.write(
        data, "pendulum/tiny-v0", env.observation_space(params), env.action_space(params), tmp_path
    )
    back = minari_io.read("pendulum/tiny-v0", root=tmp_path, env="Pendulum-v1")
    for name in datasets.FIELDS:
        np.testing.assert_allclose(getattr(back, name), getattr(data, name))
    assert back.metadata["random_return"] == -10.0 and back.metadata["expert_return"] == 20.0
    with pytest.raises(DatasetError, match="no such local Minari dataset.*does not download"):
        minari_io.read("pendulum/other-v0", root=tmp_path)
