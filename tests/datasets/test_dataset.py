"""Datasets (`jaxrl/datasets/dataset.py`): episode returns and the normalised score by
hand, the `.npz` round trip, every validation error naming its field, and the replay
ring that the learners sample from (under jit and vmap)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import datasets, envs
from jaxrl.datasets import DatasetError
from jaxrl.replay import buffer, nstep


def tiny(n_episodes: int = 2, length: int = 3, **metadata) -> datasets.Dataset:
    """Pendulum-shaped episodes: observation (3,), action (1,) in [-2, 2]; episode e's
    step t has reward e * 10 + t; the first episode terminates, the others truncate."""
    n = n_episodes * length
    steps = np.arange(n)
    obs = np.stack([steps, steps + 0.5, -steps], axis=1).astype(np.float32)
    terminations = np.zeros(n, bool)
    truncations = np.zeros(n, bool)
    terminations[length - 1] = True
    truncations[2 * length - 1 :: length] = True
    return datasets.from_arrays(
        {
            "observations": obs,
            "actions": np.linspace(-2.0, 2.0, n, dtype=np.float32)[:, None],
            "rewards": (steps // length * 10 + steps % length).astype(np.float32),
            "terminations": terminations,
            "truncations": truncations,
            "next_observations": obs + 1.0,
        },
        metadata,
    )


def pendulum_spaces():
    env, params = envs.make("Pendulum-v1")
    return env.observation_space(params), env.action_space(params)


# ----------------------------------------------------------------------------- returns, scores


def test_episode_returns_sum_each_episodes_rewards():
    data = tiny(n_episodes=3, length=3)
    # Episode e's rewards are 10e, 10e + 1, 10e + 2.
    np.testing.assert_array_equal(data.episode_returns(), [3.0, 33.0, 63.0])
    np.testing.assert_array_equal(data.episode_ends, [2, 5, 8])


def test_normalized_score_is_d4rls():
    # 100 (R - R_random) / (R_expert - R_random) = 100 * 1000 / 1400.
    assert datasets.normalized_score(-500.0, -1500.0, -100.0) == pytest.approx(100 * 1000 / 1400)
    assert datasets.normalized_score(-1500.0, -1500.0, -100.0) == 0.0
    assert datasets.normalized_score(-100.0, -1500.0, -100.0) == 100.0


def test_summary_records_behaviour_returns_and_their_score():
    info = datasets.summary(tiny(random_return=-7.0, expert_return=43.0))
    assert info["episodes"] == 2 and info["transitions"] == 6
    assert info["behaviour_return_mean"] == 18.0  # (3 + 33) / 2
    assert info["behaviour_normalized_score"] == pytest.approx(100 * (18 + 7) / 50)


def test_save_and_load_round_trip(tmp_path):
    data = tiny(env="Pendulum-v1", random_return=-7.0, expert_return=43.0)
    path = datasets.save(data, tmp_path / "d.npz")
    back = datasets.load(path)
    for name in datasets.FIELDS:
        np.testing.assert_array_equal(getattr(back, name), getattr(data, name))
    assert back.metadata["env"] == "Pendulum-v1" and back.metadata["expert_return"] == 43.0
    assert back.metadata["behaviour_return_mean"] == 18.0


# ----------------------------------------------------------------------------- errors


def arrays(**changes):
    data = tiny()
    values = {name: getattr(data, name) for name in datasets.FIELDS}
    values.update(changes)
    return values


def test_a_missing_field_is_named():
    values = arrays()
    del values["rewards"]
    with pytest.raises(DatasetError, match=r"missing field\(s\) \['rewards'\]"):
        datasets.from_arrays(values)


def test_an_empty_dataset_is_refused():
    empty = {name: np.zeros((0, *v.shape[1:]), v.dtype) for name, v in arrays().items()}
    with pytest.raises(DatasetError, match="empty"):
        datasets.from_arrays(empty)


def test_nans_are_named_with_their_first_row():
    rewards = np.zeros(6, np.float32)
    rewards[4] = np.nan
    with pytest.raises(DatasetError, match=r"'rewards': 1 row\(s\) with NaN .*first at row 4"):
        datasets.from_arrays(arrays(rewards=rewards))
    obs = arrays()["next_observations"].copy()
    obs[1, 2] = np.inf
    with pytest.raises(DatasetError, match="'next_observations'.*first at row 1"):
        datasets.from_arrays(arrays(next_observations=obs))


def test_unequal_lengths_are_named():
    with pytest.raises(DatasetError, match="'actions': 5 rows; must be 6 rows"):
        datasets.from_arrays(arrays(actions=np.zeros((5, 1), np.float32)))


def test_an_incomplete_last_episode_is_refused():
    with pytest.raises(DatasetError, match="'truncations'.*complete episodes"):
        datasets.from_arrays(arrays(truncations=np.zeros(6, bool)))


def test_observation_shape_must_match_the_environment():
    env, params = envs.make("MountainCarContinuous-v0")  # observations (2,)
    with pytest.raises(DatasetError, match=r"'observations': per-step shape \(3,\).*\(2,\)"):
        datasets.check(tiny(), env.observation_space(params), env.action_space(params), "MCC")


def test_actions_outside_the_bounds_are_an_error_not_clipped():
    obs_space, action_space = pendulum_spaces()
    actions = arrays()["actions"].copy()
    actions[3] = 2.5
    data = datasets.from_arrays(arrays(actions=actions))
    with pytest.raises(DatasetError, match=r"'actions': 1 row\(s\) outside.*row 3.*not.*clipped"):
        datasets.check(data, obs_space, action_space, "Pendulum-v1")


def test_discrete_actions_must_be_integers_in_range():
    space = envs.spaces.Discrete(2)
    data = datasets.from_arrays(arrays(actions=np.array([0, 1, 2, 0, 1, 0])))
    with pytest.raises(DatasetError, match=r"outside \[0, 2\).*first 2 at row 2"):
        datasets.check(data, None, space)
    floats = datasets.from_arrays(arrays(actions=np.zeros(6, np.float32)))
    with pytest.raises(DatasetError, match="one integer per step"):
        datasets.check(floats, None, space)


def test_reference_returns_must_span_an_interval():
    with pytest.raises(DatasetError, match="expert_return=-9.0: must be greater than random"):
        datasets.summary(tiny(random_return=-7.0, expert_return=-9.0))
    assert datasets.reference_returns({"random_return": -7.0}) is None


def test_a_missing_file_and_a_wrong_suffix_are_named(tmp_path):
    with pytest.raises(DatasetError, match="no such file"):
        datasets.load(tmp_path / "nope.npz")
    with pytest.raises(DatasetError, match="must end in .npz"):
        datasets.save(tiny(), tmp_path / "d.h5")


# ----------------------------------------------------------------------------- on the device


def test_the_replay_ring_holds_every_transition_with_box_actions_normalised():
    _, action_space = pendulum_spaces()
    data = tiny()
    ring = datasets.to_replay(data, action_space)
    assert buffer.capacity(ring) == len(data) and int(buffer.num_items(ring)) == len(data)
    items = buffer.gather(ring, jnp.arange(len(data)))
    np.testing.assert_allclose(items.action[:, 0], data.actions[:, 0] / 2.0, atol=1e-6)
    np.testing.assert_array_equal(items.observation, data.observations)
    batch = nstep.nstep_batch(ring, jnp.arange(len(data)), 1, 0.9)
    # Row 2 terminates (no bootstrap); row 5 is truncated (bootstraps).
    np.testing.assert_allclose(batch.discount, [0.9, 0.9, 0.0, 0.9, 0.9, 0.9], rtol=1e-6)


def test_sampling_under_jit_and_vmap_draws_every_row():
    _, action_space = pendulum_spaces()
    ring = datasets.to_replay(tiny(n_episodes=4), action_space)
    rings = jax.tree.map(lambda x: jnp.stack([x, x]), ring)  # two agents

    @jax.jit
    @jax.vmap
    def draw(ring, keys):  # per agent, 40 batches of 12 (a batch is at most the capacity)
        return jax.vmap(lambda key: buffer.sample(ring, key, 12).indices)(keys)

    keys = jax.random.split(jax.random.key(0), (2, 40))
    indices = np.asarray(draw(rings, keys))
    assert indices.shape == (2, 40, 12)
    assert set(np.unique(indices)) == set(range(12))
    assert not np.array_equal(indices[0], indices[1])


def test_the_npz_file_is_plain_arrays_and_json(tmp_path):
    path = datasets.save(tiny(env="Pendulum-v1"), tmp_path / "d.npz")
    with np.load(path, allow_pickle=False) as f:
        assert set(f.files) == {*datasets.FIELDS, "metadata"}
        assert json.loads(str(f["metadata"]))["env"] == "Pendulum-v1"
