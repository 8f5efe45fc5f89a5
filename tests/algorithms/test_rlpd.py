"""Offline-to-online (`jaxrl/algorithms/rlpd/`): symmetric sampling draws exactly the
configured share of every batch from the dataset, `--init-from` starts from an offline
run's networks, a run with offline data resumes bit-exactly, and bad input is refused
before training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import datasets, envs
from jaxrl.algorithms import cql, rlpd
from jaxrl.datasets import collect
from jaxrl.evaluation import load_run
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train

TINY = dict(
    total_steps=96,
    buffer_size=96,
    learning_starts=32,
    batch_size=8,
    gradient_steps=2,
    hidden_sizes=(16,),
)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    env, params = envs.make("Pendulum-v1")
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(1), 200)
    return str(datasets.save(data, tmp_path_factory.mktemp("data") / "random.npz"))


def make(**overrides) -> rlpd.RLPD:
    return rlpd.RLPD.make(cfg.replace(rlpd.RLPDConfig(env="Pendulum-v1"), **{**TINY, **overrides}))


def test_symmetric_sampling_draws_half_of_each_batch_from_the_dataset(dataset_path):
    algo = make(dataset=dataset_path)
    state = jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())
    # Mark the online ring's observations so the two halves can be told apart.
    replay = state.replay.replace(
        items=state.replay.items.replace(
            observation=jnp.full_like(state.replay.items.observation, 9.0)
        )
    )
    replay = replay.replace(size=jnp.int32(algo.config.buffer_size))
    batch, _, weights = algo.replay_batch(
        state.learner, replay, jax.random.key(1), state.hparams, jnp.float32(1.0)
    )
    online = np.all(np.asarray(batch.observation) == 9.0, axis=-1)
    np.testing.assert_array_equal(online, [True] * 4 + [False] * 4)
    np.testing.assert_array_equal(weights, np.ones(8))


def test_without_a_dataset_it_is_online_sac_with_layernorm_critics():
    algo = make()
    state = jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())
    assert state.learner.offline is None
    assert "LayerNorm_0" in state.params["critic"]["params"]["critics"]


@pytest.mark.slow
def test_init_from_an_offline_run_starts_from_its_networks(dataset_path, tmp_path):
    offline_dir = tmp_path / "cql"
    config = cfg.replace(
        cql.CQLConfig(env="Pendulum-v1", dataset=dataset_path),
        total_steps=20, eval_interval=10, eval_episodes=1, batch_size=8, hidden_sizes=(16,),
        layer_norm=True,
    )  # fmt: skip
    train(cql.CQL.make(config), RunConfig(run_dir=str(offline_dir), progress=False))
    algo = make(init_from=str(offline_dir), dataset=dataset_path)
    params = algo.load_params()
    state = algo.init(jax.random.key(0), algo.hyperparams(), params)
    _, offline_state, _ = load_run(offline_dir)
    offline_params = jax.tree.map(lambda x: x[0], offline_state.params)
    assert tree_fingerprint(state.params) == tree_fingerprint(offline_params)
    # Networks that differ (no LayerNorm here) are refused, naming the parameters.
    with pytest.raises(cfg.ConfigError, match="params"):
        other = make(init_from=str(offline_dir), layer_norm=False)
        other.init(jax.random.key(0), other.hyperparams(), other.load_params())


@pytest.mark.slow
def test_resume_with_offline_data_matches_an_uninterrupted_run(dataset_path, tmp_path):
    whole = train(make(dataset=dataset_path), RunConfig(num_seeds=2, progress=False))
    assert np.isfinite(whole.metrics[-1]["loss"]).all()
    run_dir = str(tmp_path / "run")
    train(
        make(dataset=dataset_path, total_steps=48),
        RunConfig(num_seeds=2, run_dir=run_dir, progress=False),
    )
    resumed = train(
        make(dataset=dataset_path),
        RunConfig(num_seeds=2, run_dir=run_dir, resume=True, progress=False),
    )
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(offline_ratio=1.0), r"invalid offline_ratio=1.0: must be in \(0.0, 1.0\)"),
        (dict(num_critics=1), r"invalid num_critics=1: must be an integer >= 2"),
    ],
)
def test_config_errors_name_the_field(overrides, match):
    with pytest.raises(cfg.ConfigError, match=match):
        make(**overrides)
