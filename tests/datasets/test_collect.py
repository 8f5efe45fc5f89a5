"""Collecting datasets (`jaxrl/datasets/collect.py`, `jaxrl dataset collect`): random
rollouts keep complete episodes whose returns are the environment's; a run's replay
buffer becomes a medium-replay dataset with the environment's actions; a run's policy
and mixes through the command line, with reference returns in the metadata."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from jaxrl import cli, datasets, envs
from jaxrl.config import ConfigError
from jaxrl.datasets import collect
from jaxrl.evaluation import load_run
from jaxrl.training.driver import RunConfig, train


def test_a_random_rollout_keeps_complete_episodes():
    env, params = envs.make("Pendulum-v1")  # 200 steps per episode
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(0), 450, num_envs=2)
    # Each of 2 environments finished 2 episodes in 450 steps; the partial third is dropped.
    assert len(data) == 800 and data.episode_returns().shape == (4,)
    assert data.truncations.sum() == 4 and not data.terminations.any()
    # Within an episode, each next observation is the following observation (up to the
    # float32 rounding of computing the observation twice: as the next and as the final one).
    inside = ~data.truncations[:-1]
    np.testing.assert_allclose(
        data.next_observations[:-1][inside], data.observations[1:][inside], atol=1e-6
    )
    assert np.abs(data.actions).max() <= 2.0
    datasets.check(data, env.observation_space(params), env.action_space(params))


def test_no_finished_episode_is_a_clear_error():
    env, params = envs.make("Pendulum-v1")
    policy, carry = collect.random_policy(env, params)
    with pytest.raises(ConfigError, match="no episode finished"):
        collect.rollout(env, params, policy, carry, jax.random.key(0), 50)


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory):
    """A tiny SAC run on Pendulum: 600 steps, so its buffer holds 3 whole episodes."""
    from jaxrl.algorithms import sac

    run_dir = tmp_path_factory.mktemp("sac")
    config = sac.SACConfig(
        env="Pendulum-v1",
        total_steps=600,
        buffer_size=600,
        learning_starts=500,
        batch_size=16,
        hidden_sizes=(16,),
    )
    train(sac.make(config), RunConfig(run_dir=str(run_dir), progress=False))
    return run_dir


@pytest.mark.slow  # trains a tiny SAC run (module fixture)
def test_the_replay_buffer_becomes_a_medium_replay_dataset(sac_run):
    algo, data = collect.from_replay(str(sac_run))
    assert len(data) == 600 and data.episode_returns().shape == (3,)
    _, state, _ = load_run(sac_run)
    stored = np.asarray(state.replay.items.action[0, :, 0])  # agent 0, [-1, 1]
    np.testing.assert_allclose(data.actions, 2.0 * stored, atol=1e-6)  # Pendulum: [-2, 2]
    np.testing.assert_array_equal(data.rewards, np.asarray(state.replay.items.reward[0, :, 0]))


@pytest.mark.slow  # trains a tiny SAC run (module fixture)
def test_the_cli_collects_a_mixed_dataset_with_reference_returns(sac_run, tmp_path, capsys):
    out = tmp_path / "mixed.npz"
    argv = ["dataset", "collect", "--source", "random", "--source", str(sac_run)]
    argv += ["--source", f"replay:{sac_run}", "--steps", "400", "--expert-return", "-100"]
    argv += ["--reference-episodes", "2", "-o", str(out)]
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    data = datasets.load(out)
    assert data.metadata["env"] == "Pendulum-v1"
    assert data.metadata["sources"] == ["random", str(sac_run), f"replay:{sac_run}"]
    assert len(data) == 400 + 400 + 600 and printed["episodes"] == 7
    assert data.metadata["random_return"] < -100 and data.metadata["expert_return"] == -100
    assert cli.main(["dataset", "info", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["behaviour_return_mean"] == pytest.approx(float(data.episode_returns().mean()))
    # An existing output is not overwritten without --force.
    assert cli.main(argv) == 2
    assert "--force" in capsys.readouterr().err


@pytest.mark.slow  # trains a tiny SAC run (module fixture)
def test_sources_of_different_environments_are_refused(sac_run):
    with pytest.raises(ConfigError, match="a dataset is of one environment"):
        collect.collect(["random", str(sac_run)], 400, env_id="CartPole-v1")


@pytest.mark.slow  # trains a tiny SAC run (module fixture)
def test_an_expert_runs_deterministic_return_is_the_scores_100(sac_run):
    data = collect.collect(
        ["random"],
        400,
        env_id="Pendulum-v1",
        expert=str(sac_run),
        random_return=-2000.0,
        reference_episodes=2,
        seed=5,
    )
    assert data.metadata["random_return"] == -2000.0
    env, params = envs.make("Pendulum-v1")
    _, policy, carry = collect.run_policy(str(sac_run), deterministic=True)
    k_expert = jax.random.split(jax.random.fold_in(jax.random.key(5), 1))[1]
    expected = collect.reference_return(env, params, policy, carry, k_expert, 2)
    assert data.metadata["expert_return"] == pytest.approx(expected)
