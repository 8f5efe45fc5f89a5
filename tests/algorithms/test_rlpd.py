"""Offline-to-online (`jaxrl/algorithms/rlpd/`): symmetric sampling draws exactly the
configured share of every batch from the dataset, the target's minimum is over a random
subset of the critics, `--init-from` starts from an offline run's networks (cql, iql,
td3-bc, rebrac; observation normalisation folded into the first layers), a run with
offline data resumes bit-exactly, and bad input is refused before training."""

from __future__ import annotations

import itertools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import datasets, envs, prng
from jaxrl.algorithms import cql, iql, rebrac, rlpd
from jaxrl.algorithms.actor_critic import (
    DeterministicActor,
    EnsembleQ,
    GaussianActor,
    clipped_double_q,
    init_actor_critic,
)
from jaxrl.algorithms.rlpd import warm_start
from jaxrl.datasets import collect
from jaxrl.datasets.normalization import ObsNorm
from jaxrl.evaluation import load_run
from jaxrl.replay.nstep import NStepBatch
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


# ----------------------------------------------------------------------------- random critic subset


def test_critic_subset_draws_distinct_critics_every_pair_alike():
    keys = jax.random.split(jax.random.key(0), 1200)
    drawn = np.asarray(jax.vmap(lambda k: rlpd.critic_subset(k, 4, 2))(keys))
    assert drawn.shape == (1200, 2) and ((drawn >= 0) & (drawn < 4)).all()
    assert (drawn[:, 0] != drawn[:, 1]).all()
    counts = {pair: 0 for pair in itertools.combinations(range(4), 2)}
    for a, b in drawn:
        counts[(min(a, b), max(a, b))] += 1
    # 6 pairs, 200 draws each expected; binomial std ~13: a wide band still catches a bias.
    assert all(140 < n < 260 for n in counts.values()), counts


def constant_critics(params, values):
    """Critics without LayerNorm whose outputs are the constants `values` (zero head
    weights, `values` as biases), whatever the input."""
    head = params["params"]["critics"]["Dense_0"]
    head = {"kernel": jnp.zeros_like(head["kernel"]), "bias": jnp.asarray(values)[:, None]}
    critics = {**params["params"]["critics"], "Dense_0": head}
    return {"params": {**params["params"], "critics": critics}}


def test_the_subset_ensemble_is_the_drawn_critics():
    full = EnsembleQ((8,), "relu", num_critics=3)
    pair = EnsembleQ((8,), "relu", num_critics=2)
    obs, action = jnp.ones((4, 3)), jnp.zeros((4, 1))
    params = full.init(jax.random.key(0), obs, action)
    q = full.apply(params, obs, action)
    subset = jnp.array([2, 0])
    np.testing.assert_array_equal(
        pair.apply(rlpd.take_critics(params, subset), obs, action), q[subset]
    )
    # By hand: critics worth 5, 1, 3; the pair {0, 2} has minimum 3, the pair {1, 2} 1.
    constant = constant_critics(params, [5.0, 1.0, 3.0])
    for subset, expected in (([0, 2], 3.0), ([1, 2], 1.0), ([0, 1], 1.0)):
        q_pair = pair.apply(rlpd.take_critics(constant, jnp.array(subset)), obs, action)
        np.testing.assert_array_equal(clipped_double_q(q_pair), np.full(4, expected))


def test_the_target_is_the_minimum_over_a_pair_drawn_at_every_step():
    """Critics worth 5, 1 and 3, alpha 0, reward 0, discount 1: the target y is the drawn
    pair's minimum (3 for {0, 2}, else 1), the loss sum_i (Q_i - y)^2 (8 or 20)."""
    algo = make(num_critics=3, critic_subset=2, layer_norm=False)
    hparams = algo.hyperparams()
    params, learner = algo.init_learner(jax.random.key(0), hparams, None)
    values = np.array([5.0, 1.0, 3.0])
    params = {**params, "critic": constant_critics(params["critic"], values)}
    learner = learner.replace(
        target_critic=params["critic"],
        log_alpha=jnp.float32(-1e4),  # alpha = 0
    )
    batch = NStepBatch(
        observation=jnp.zeros((8, 3)),
        action=jnp.zeros((8, 1)),
        reward=jnp.zeros(8),
        discount=jnp.ones(8),
        next_observation=jnp.zeros((8, 3)),
    )
    keys = jax.random.split(jax.random.key(0), 12)

    @jax.jit
    @jax.vmap
    def step(key):  # the loss, and the pair the step draws from its key's split
        _, _, k_subset = prng.split(key, 3)
        _, _, _, metrics = algo.learn_step(params, learner, batch, jnp.ones(8), hparams, key, 0)
        return metrics["loss"], rlpd.critic_subset(k_subset, 3, 2)

    losses, pairs = step(keys)
    targets = values[np.asarray(pairs)].min(axis=1)
    np.testing.assert_allclose(losses, ((values[None] - targets[:, None]) ** 2).sum(axis=1))
    assert set(targets) == {1.0, 3.0}  # a new pair at every step


def test_critic_subset_is_checked():
    with pytest.raises(cfg.ConfigError, match=r"invalid critic_subset=3: .*\[1, num_critics=2\]"):
        make(critic_subset=3)


# ----------------------------------------------------------------------------- warm starts


def source_run(actor, critic, params, env="Pendulum-v1", obs_norm=None, name="offline"):
    """A stand-in for a restored run: its algorithm's networks and config, and a state
    with a leading agent axis of one."""
    config = types.SimpleNamespace(env=env, normalize_obs=obs_norm is not None)
    algo = types.SimpleNamespace(name=name, config=config, actor=actor, critic=critic)
    state = types.SimpleNamespace(
        params=jax.tree.map(lambda x: np.asarray(x)[None], params),
        obs_norm=None if obs_norm is None else jax.tree.map(lambda x: x[None], obs_norm),
    )
    return algo, state


def random_params(module, *inputs, seed=0):
    """A network's parameters at random values of unit scale (not the small heads of an
    initialisation), so that a mapping error shows in the outputs."""
    shapes = jax.eval_shape(module.init, jax.random.key(seed), *inputs)
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: rng.standard_normal(x.shape).astype(np.float32), shapes)


OBS = jax.random.normal(jax.random.key(7), (16, 3)) * 3.0 + 1.0
ACTION = jax.random.uniform(jax.random.key(8), (16, 1), minval=-1.0, maxval=1.0)


def test_an_iql_actor_maps_onto_rlpd_with_its_mean_and_log_std():
    algo = make(layer_norm=False)
    actor = GaussianActor(1, (16,), "relu")
    critic = EnsembleQ((16,), "relu", 2)
    actor_params = random_params(actor, OBS)
    critic_params = random_params(critic, OBS, ACTION, seed=2)
    source, state = source_run(actor, critic, {"actor": actor_params, "critic": critic_params})
    params = warm_start.from_run(algo, source, state, "iql-run")
    init = init_actor_critic(algo, jax.random.key(0), params)  # checks the tree fits
    theirs = actor.apply(actor_params, OBS)
    ours = algo.actor.apply(init["actor"], OBS)
    np.testing.assert_allclose(jnp.tanh(ours.mode()), theirs.mode(), atol=1e-6)
    log_std = np.clip(actor_params["params"]["log_std"], -5.0, 2.0)
    np.testing.assert_allclose(ours.log_std, np.broadcast_to(log_std, (16, 1)), atol=1e-5)
    # The critics are copied as they are.
    assert tree_fingerprint(init["critic"]) == tree_fingerprint(critic_params)


def test_a_rebrac_actor_with_normalised_observations_maps_onto_rlpd():
    """A deterministic LayerNorm actor and LayerNorm critics trained on normalised
    observations: RLPD's actor and critics on raw observations compute the same."""
    algo = make(actor_layer_norm=True)
    actor = DeterministicActor(1, (16,), "relu", layer_norm=True)
    critic = EnsembleQ((16,), "relu", 2, layer_norm=True)
    norm = ObsNorm(mean=jnp.array([1.0, -2.0, 0.5]), scale=jnp.array([2.0, 0.5, 3.0]))
    actor_params = random_params(actor, OBS)
    critic_params = random_params(critic, OBS, ACTION, seed=2)
    source, state = source_run(
        actor, critic, {"actor": actor_params, "critic": critic_params}, obs_norm=norm
    )
    params = warm_start.from_run(algo, source, state, "rebrac-run")
    init = init_actor_critic(algo, jax.random.key(0), params)
    ours = algo.actor.apply(init["actor"], OBS)
    expected = actor.apply(actor_params, norm.normalize(OBS))
    np.testing.assert_allclose(jnp.tanh(ours.mode()), expected, atol=1e-5)
    np.testing.assert_allclose(ours.log_std, np.full((16, 1), -1.5), atol=1e-6)  # squash(0)
    q_ours = algo.critic.apply(init["critic"], OBS, ACTION)
    q_theirs = critic.apply(critic_params, norm.normalize(OBS), ACTION)
    np.testing.assert_allclose(q_ours, q_theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "overrides, source_options, match",
    [
        ({}, {"actor_ln": True}, r"its rebrac actor has layer_norm=True, .*actor_layer_norm=False"),
        (
            {"layer_norm": False},
            {},
            r"critics have layer_norm=True, this rlpd config's layer_norm=",
        ),
        ({"num_critics": 4}, {}, r"critics have num_critics=2, this rlpd config's num_critics=4"),
        ({"hidden_sizes": (32,)}, {}, r"actor has hidden_sizes=\(16,\), .*hidden_sizes=\(32,\)"),
        ({}, {"env": "MountainCarContinuous-v0"}, r"env='MountainCarContinuous-v0'"),
    ],
)
def test_networks_that_differ_are_refused_naming_the_field(overrides, source_options, match):
    algo = make(**overrides)
    actor = DeterministicActor(1, (16,), "relu", layer_norm=source_options.get("actor_ln", False))
    critic = EnsembleQ((16,), "relu", 2, layer_norm=True)
    params = {
        "actor": actor.init(jax.random.key(0), OBS),
        "critic": critic.init(jax.random.key(1), OBS, ACTION),
    }
    source, state = source_run(
        actor, critic, params, env=source_options.get("env", "Pendulum-v1"), name="rebrac"
    )
    with pytest.raises(cfg.ConfigError, match=match):
        warm_start.from_run(algo, source, state, "run")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["iql", "rebrac"])
def test_init_from_an_iql_or_rebrac_run_acts_as_its_policy(dataset_path, tmp_path, case):
    tiny = dict(total_steps=20, eval_interval=10, eval_episodes=1, batch_size=8, hidden_sizes=(16,))
    if case == "iql":
        config = cfg.replace(iql.IQLConfig(env="Pendulum-v1", dataset=dataset_path), **tiny,
                             layer_norm=True)  # fmt: skip
        offline = iql.IQL.make(config)
    else:
        config = cfg.replace(rebrac.ReBRACConfig(env="Pendulum-v1", dataset=dataset_path), **tiny,
                             normalize_obs=True)  # fmt: skip
        offline = rebrac.ReBRAC.make(config)
    run_dir = tmp_path / case
    train(offline, RunConfig(run_dir=str(run_dir), progress=False))
    algo = make(init_from=str(run_dir), dataset=dataset_path, actor_layer_norm=case == "rebrac")
    state = algo.init(jax.random.key(0), algo.hyperparams(), algo.load_params())
    source, offline_state, _ = load_run(run_dir)
    one = jax.tree.map(lambda x: x[0], offline_state)
    obs = jnp.asarray(datasets.load(dataset_path).observations[:32])
    theirs, _ = source.act(one, obs, None, None, jax.random.key(0))
    ours, _ = algo.act(state, obs, None, None, jax.random.key(0))
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


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
    # Networks that differ (no LayerNorm here) are refused, naming the field.
    with pytest.raises(cfg.ConfigError, match="critics have layer_norm=True"):
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
