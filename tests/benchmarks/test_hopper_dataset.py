"""The Hopper medium-replay recipe (benchmarks/offline_datasets.py) and its registry
entries: without brax it fails in one line naming the extra, before anything runs; the
entries, the recipe and the learners' Hopper presets agree; and (optional tier: brax,
in CI's optional venv) the recipe at a tiny budget writes the replay's complete episodes
with the shapes of Brax's Hopper and its reference returns in the metadata."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from benchmarks import offline_datasets, registry
from jaxrl import algorithms, datasets
from jaxrl.config import ConfigError

ENTRIES = ("iql_hopper_medium_replay", "td3_bc_hopper_medium_replay", "rebrac_hopper_medium_replay")


def test_without_brax_the_recipe_fails_in_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "brax", None)  # `import brax` fails, find_spec is None
    argv = [str(tmp_path), "--expert", "--recipe", "hopper_medium_replay"]
    assert offline_datasets.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "brax extra" in err[0] and "jaxrl[brax]" in err[0], err
    with pytest.raises(ImportError, match=r"jaxrl\[brax\]"):  # the function itself too
        offline_datasets.hopper_medium_replay(tmp_path)
    assert not any(tmp_path.iterdir())  # nothing ran


def test_an_expert_budget_not_above_the_medium_one_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="expert_steps=100: must be more than medium_steps=100"):
        offline_datasets.hopper_medium_replay(tmp_path, medium_steps=100, expert_steps=100)


@pytest.mark.parametrize("name", ENTRIES)
def test_the_hopper_entries_use_the_recipe_and_the_presets(name):
    entry = registry.get(name)
    recipe = entry.overrides["dataset"]
    assert recipe == "hopper_medium_replay" and recipe in offline_datasets.RECIPES
    assert entry.extra == offline_datasets.RECIPE_EXTRAS[recipe] == "brax"
    assert entry.env == offline_datasets.HOPPER_ENV and entry.tier == "full"
    assert entry.seeds == 5 and entry.metric == "final_eval_normalized_score_per_agent"
    assert f"--recipe {recipe}" in entry.command and f"--env {entry.env}" in entry.command
    algorithm = algorithms.get(entry.algorithm)
    preset = algorithm.algorithm.presets[entry.env]
    config = algorithm.default_config(entry.env).validate()
    assert all(getattr(config, field) == value for field, value in preset.items())


@pytest.mark.optional
@pytest.mark.slow
def test_a_tiny_recipe_writes_the_replay_of_complete_episodes(monkeypatch, tmp_path):
    """Without its expert: a policy trained for a few hundred steps is no better than
    random actions, which a dataset's reference returns refuse (`reference_returns`); the
    normalised score is `collect`'s, tested in tests/datasets."""
    pytest.importorskip("brax")
    # Small networks and few steps: shapes and bookkeeping, not learning.
    tiny = {**offline_datasets.HOPPER_SAC, "hidden_sizes": (32, 32), "learning_starts": 300}
    monkeypatch.setattr(offline_datasets, "HOPPER_SAC", tiny)
    path = offline_datasets.hopper_medium_replay(tmp_path, expert=False, medium_steps=1_000)
    data = datasets.load(path)
    n = len(data)
    assert data.observations.shape == (n, 11) and data.next_observations.shape == (n, 11)
    assert data.actions.shape == (n, 3) and np.abs(data.actions).max() <= 1.0
    assert data.rewards.shape == data.terminations.shape == data.truncations.shape == (n,)
    # The replay of the first 1,000 steps (4 environments), each column cut after its
    # last complete episode.
    assert 0 < n <= 1_000
    ends = np.logical_or(data.terminations, data.truncations)
    assert ends[-1] and data.episode_returns().size == ends.sum()
    inside = ~ends[:-1]  # within an episode, a step's next observation is the next row's
    np.testing.assert_array_equal(
        data.observations[1:][inside], data.next_observations[:-1][inside]
    )
    meta = data.metadata
    assert meta["env"] == offline_datasets.HOPPER_ENV and meta["expert_return"] is None
    assert meta["sources"] == [f"replay:{tmp_path / 'sac_medium'}"]
    assert isinstance(meta["random_return"], float) and isinstance(meta["medium_return"], float)
    assert "behaviour_normalized_score" not in meta  # no expert, no normalised score
    saved = json.loads((tmp_path / "sac_medium" / "config.json").read_text())
    assert saved["config"]["total_steps"] == 1_000 and saved["config"]["num_envs"] == 4
