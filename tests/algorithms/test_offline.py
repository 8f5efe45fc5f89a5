"""The offline learners (`jaxrl/algorithms/offline.py`, `iql/`, `td3_bc/`, `cql/`,
`sac_n/`, `rebrac/`): their losses
against hand computations, the config's and the dataset's errors before training, a
few updates through the driver, resume across a checkpoint, and `jaxrl train` /
`jaxrl eval` / `jaxrl plot` on a dataset with normalised scores. The runs of every
learner through the driver and resume are `slow` (compilation dominates); learning is in
test_offline_learning.py (slow)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import algorithms, api, cli, datasets, envs
from jaxrl import config as cfg
from jaxrl.algorithms import cql, iql, rebrac, sac_n, td3_bc
from jaxrl.algorithms.actor_critic import EnsembleQ, QValue
from jaxrl.algorithms.cql import losses as cql_losses
from jaxrl.algorithms.iql import losses as iql_losses
from jaxrl.algorithms.rebrac import losses as rebrac_losses
from jaxrl.algorithms.sac_n import losses as sac_n_losses
from jaxrl.algorithms.td3_bc import losses as td3_bc_losses
from jaxrl.datasets import collect
from jaxrl.evaluation import load_run
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train
from jaxrl.training.run_dir import checkpointed_fields

TINY = dict(total_steps=40, eval_interval=20, eval_episodes=2, batch_size=8, hidden_sizes=(16,))


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    """Two random Pendulum episodes, with reference returns in the metadata."""
    env, params = envs.make("Pendulum-v1")
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(0), 400)
    data = data.with_metadata(env="Pendulum-v1", random_return=-1200.0, expert_return=-150.0)
    return str(datasets.save(data, tmp_path_factory.mktemp("data") / "random.npz"))


def make(cls, dataset_path, **overrides):
    config = cfg.replace(cls.Config(env="Pendulum-v1", dataset=dataset_path), **TINY)
    return cls.make(cfg.replace(config, **overrides))


# ----------------------------------------------------------------------------- IQL losses


def test_expectile_loss_weighs_positive_residuals_by_tau():
    # u = [2, -1], tau = 0.7: (0.7 * 4 + 0.3 * 1) / 2.
    loss = iql_losses.expectile_loss(jnp.array([2.0, -1.0]), 0.7)
    assert float(loss) == pytest.approx(1.55)
    # tau = 0.5 is half the mean squared error.
    assert float(iql_losses.expectile_loss(jnp.array([2.0, -1.0]), 0.5)) == pytest.approx(1.25)


def test_value_loss_moves_only_the_value():
    q, v = jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0])
    grad_q, grad_v = jax.grad(iql_losses.value_loss, argnums=(0, 1))(q, v, 0.9)
    np.testing.assert_array_equal(grad_q, [0.0, 0.0])
    # d/dv mean(w (q - v)^2) = -2 w (q - v) / B: w = 0.9 for u = 1, 0.1 for u = -1.
    np.testing.assert_allclose(grad_v, [-0.9, 0.1], rtol=1e-6)


def test_advantage_weights_are_exponentiated_and_clipped():
    q, v = jnp.array([0.0, 1.0, 10.0]), jnp.zeros(3)
    weights = iql_losses.advantage_weights(q, v, 2.0, 100.0)
    np.testing.assert_allclose(weights, [1.0, np.exp(2.0), 100.0], rtol=1e-6)


def test_awr_actor_loss_is_weighted_negative_log_likelihood():
    loss = iql_losses.awr_actor_loss(jnp.array([-1.0, -3.0]), jnp.array([1.0, 2.0]))
    assert float(loss) == pytest.approx(3.5)  # -(1 * -1 + 2 * -3) / 2


def test_iql_target_bootstraps_from_the_value_and_stops_at_terminations():
    batch = NStepBatch(None, None, jnp.array([1.0, -2.0]), jnp.array([0.9, 0.0]), None)
    target = iql_losses.iql_target(batch, jnp.array([10.0, 10.0]))
    np.testing.assert_allclose(target, [10.0, -2.0], rtol=1e-6)


# ----------------------------------------------------------------------------- TD3+BC loss


def test_td3_bc_actor_loss_by_hand():
    q1 = jnp.array([2.0, -4.0])
    pi, a = jnp.array([[0.5], [0.0]]), jnp.array([[0.0], [0.5]])
    # lambda = 2.5 / mean|Q| = 2.5 / 3; -lambda mean(Q) = 2.5 / 3; BC: mean 0.25.
    loss = td3_bc_losses.td3_bc_actor_loss(q1, pi, a, 2.5)
    assert float(loss) == pytest.approx(2.5 / 3 + 0.25)
    # lambda is held fixed: dL/dQ_b = -lambda / B.
    grad = jax.grad(td3_bc_losses.td3_bc_actor_loss)(q1, pi, a, 2.5)
    np.testing.assert_allclose(grad, [-2.5 / 6, -2.5 / 6], rtol=1e-6)


def test_alpha_zero_is_behaviour_cloning():
    pi, a = jnp.array([[0.5, -0.5]]), jnp.array([[0.0, 0.5]])
    loss = td3_bc_losses.td3_bc_actor_loss(jnp.array([3.0]), pi, a, 0.0)
    assert float(loss) == pytest.approx((0.25 + 1.0) / 2)


# ----------------------------------------------------------------------------- EDAC, CQL, ReBRAC


def test_ensemble_diversity_is_the_mean_pairwise_cosine():
    # Sample 0: parallel gradients (cosine 1, counted for both ordered pairs); sample 1:
    # orthogonal ones (0). Mean over samples (2 + 0) / 2, divided by N - 1 = 1.
    grads = jnp.array([[[1.0, 0.0], [1.0, 0.0]], [[2.0, 0.0], [0.0, 3.0]]])  # (N=2, B=2, d=2)
    assert float(sac_n_losses.ensemble_diversity(grads)) == pytest.approx(1.0)
    # Three critics, one sample: cosines 0, -1, 0 for the pairs (1, 2), (1, 3), (2, 3).
    three = jnp.array([[[1.0, 0.0]], [[0.0, 1.0]], [[-1.0, 0.0]]])
    assert float(sac_n_losses.ensemble_diversity(three)) == pytest.approx(-1.0)


def test_action_gradients_are_each_critics():
    critic = EnsembleQ((8,), "relu", num_critics=3)
    obs, action = jnp.ones((4, 3)), jnp.linspace(-1, 1, 8).reshape(4, 2)
    params = critic.init(jax.random.key(0), obs, action)
    grads = sac_n_losses.action_gradients(
        QValue((8,), "relu"), params["params"]["critics"], obs, action
    )
    for i in range(3):
        expected = jax.grad(lambda a, i=i: critic.apply(params, obs, a)[i].sum())(action)
        np.testing.assert_allclose(grads[i], expected, rtol=1e-5, atol=1e-7)


def test_cql_penalty_is_logsumexp_minus_the_data_q():
    q_data = jnp.array([[1.0]])
    q_sampled = jnp.log(jnp.array([[[1.0, 2.0, 3.0]]]))  # logsumexp = log 6
    assert float(cql_losses.cql_penalty(q_data, q_sampled, 1.0)) == pytest.approx(np.log(6) - 1)
    # T logsumexp(q / T) with T = 2: 2 log(1 + sqrt 2 + sqrt 3).
    expected = 2 * np.log(1 + np.sqrt(2) + np.sqrt(3)) - 1
    assert float(cql_losses.cql_penalty(q_data, q_sampled, 2.0)) == pytest.approx(expected)
    # Summed over critics, averaged over the batch.
    two = cql_losses.cql_penalty(jnp.zeros((2, 3)), jnp.zeros((2, 3, 4)), 1.0)
    assert float(two) == pytest.approx(2 * np.log(4))


def test_discrete_cql_penalty_is_the_exact_logsumexp_minus_the_data_q():
    q = jnp.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    penalty = cql_losses.discrete_cql_penalty(q, jnp.array([2, 0]))
    expected = np.mean([np.log(np.exp([1.0, 2.0, 3.0]).sum()) - 3.0, np.log(3.0)])
    assert float(penalty) == pytest.approx(expected, rel=1e-6)


def test_importance_weights_carry_no_gradient_into_the_density():
    grad = jax.grad(lambda d: cql_losses.importance_weighted(jnp.ones(3), d).sum())(jnp.ones(3))
    np.testing.assert_array_equal(grad, [0.0, 0.0, 0.0])


def test_rebrac_target_subtracts_the_critic_bc_penalty_where_valid():
    batch = NStepBatch(None, None, jnp.array([1.0, 1.0]), jnp.array([0.9, 0.9]), None)
    next_q = jnp.array([[3.0, 5.0], [4.0, 2.0]])  # min: [3, 2]
    next_action, data_next = jnp.array([[1.0], [0.0]]), jnp.array([[0.0], [2.0]])  # [1, 4]
    target = rebrac_losses.rebrac_target(
        batch, next_q, next_action, data_next, jnp.array([True, False]), 0.5
    )
    # 1 + 0.9 (3 - 0.5 * 1); the second has no next action in the data: 1 + 0.9 * 2.
    np.testing.assert_allclose(target, [3.25, 2.8], rtol=1e-6)


def test_rebrac_actor_loss_by_hand():
    q = jnp.array([[2.0, -4.0], [3.0, -2.0]])  # min over critics: [2, -4], mean |.| = 3
    pi, a = jnp.array([[0.5], [0.0]]), jnp.array([[0.0], [0.5]])  # penalties 0.25, 0.25
    loss = rebrac_losses.rebrac_actor_loss(q, pi, a, 2.0)
    assert float(loss) == pytest.approx(np.mean([0.5 - 2 / 3, 0.5 + 4 / 3]))
    raw = rebrac_losses.rebrac_actor_loss(q, pi, a, 2.0, normalize_q=False)
    assert float(raw) == pytest.approx(np.mean([0.5 - 2, 0.5 + 4]))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "cls, overrides, match",
    [
        (iql.IQL, dict(expectile=1.0), r"invalid expectile=1.0: must be in \(0.0, 1.0\)"),
        (iql.IQL, dict(expectile=0.0), r"invalid expectile=0.0"),
        (iql.IQL, dict(temperature=-1.0), r"invalid temperature=-1.0: must be >= 0"),
        (td3_bc.TD3BC, dict(alpha=-0.5), r"invalid alpha=-0.5: must be >= 0"),
        (td3_bc.TD3BC, dict(dataset=""), r"invalid dataset='': must be the path"),
        (td3_bc.TD3BC, dict(batch_size=10_000), r"invalid batch_size=10000: .*400 transitions"),
        (cql.CQL, dict(cql_alpha=-1.0), r"invalid cql_alpha=-1.0: must be >= 0"),
        (cql.CQL, dict(num_sampled_actions=0), r"invalid num_sampled_actions=0: must be > 0"),
        (sac_n.SACN, dict(num_critics=1), r"invalid num_critics=1: must be an integer >= 2"),
        (sac_n.SACN, dict(eta=-1.0), r"invalid eta=-1.0: must be >= 0"),
        (rebrac.ReBRAC, dict(actor_bc=-0.1), r"invalid actor_bc=-0.1: must be >= 0"),
    ],
)
def test_config_errors_name_the_field(dataset_path, cls, overrides, match):
    with pytest.raises(cfg.ConfigError, match=match):
        make(cls, dataset_path, **overrides)


def test_offline_learners_train_on_a_dataset_and_are_evaluated_in_an_env(dataset_path):
    for name in ("iql", "td3-bc", "cql", "cql-discrete", "sac-n", "rebrac", "bc"):
        entry = algorithms.get(name)
        assert entry.trains_on == "dataset" and api.uses_env(entry)  # --env: evaluation
    assert algorithms.get("rlpd").trains_on == "env"  # online, with a dataset mixed in
    config = jaxrl.make_config("iql", "Pendulum-v1", dataset=dataset_path)
    assert iql.IQL.target_name(config) == "random"  # run directories: iql-random-<time>


def test_a_dataset_of_another_environment_is_refused_before_training(dataset_path):
    config = cfg.replace(
        iql.IQLConfig(env="MountainCarContinuous-v0", dataset=dataset_path), **TINY
    )
    with pytest.raises(datasets.DatasetError, match=r"'observations': per-step shape \(3,\)"):
        iql.IQL.make(config)


def test_a_discrete_environment_is_refused(dataset_path):
    config = cfg.replace(td3_bc.TD3BCConfig(env="CartPole-v1", dataset=dataset_path), **TINY)
    with pytest.raises(cfg.ConfigError, match="needs a 1-D Box"):
        td3_bc.TD3BC.make(config)


# ----------------------------------------------------------------------------- normalisation


def test_observation_stats_by_hand():
    # Features [0, 2], [1, 1], [2, 4]: means 1, 1, 3; population stds 1, 0, 1; + eps 1e-3.
    data = datasets.from_arrays(
        {
            "observations": np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 4.0]], np.float32),
            "actions": np.zeros((2, 1), np.float32),
            "rewards": np.zeros(2, np.float32),
            "terminations": np.array([False, False]),
            "truncations": np.array([False, True]),
            "next_observations": np.zeros((2, 3), np.float32),
        }
    )
    norm = datasets.observation_stats(data)
    np.testing.assert_allclose(norm.mean, [1.0, 1.0, 3.0])
    np.testing.assert_allclose(norm.scale, [1.001, 0.001, 1.001], rtol=1e-6)
    # (2 - 1) / 1.001, (1 - 1) / 0.001, (2 - 3) / 1.001
    normalized = norm.normalize(jnp.array([[2.0, 1.0, 2.0]]))
    np.testing.assert_allclose(normalized, [[1 / 1.001, 0.0, -1 / 1.001]], rtol=1e-6)


def test_only_td3_bc_normalises_by_default():
    assert td3_bc.TD3BCConfig().normalize_obs  # Fujimoto & Gu 2021, sec. 5
    for config in (iql.IQLConfig(), rebrac.ReBRACConfig(), cql.CQLConfig(), sac_n.SACNConfig()):
        assert not config.normalize_obs


def test_normalisation_trains_and_acts_with_the_statistics_in_the_state(dataset_path):
    data = datasets.load(dataset_path)
    obs64 = data.observations.astype(np.float64)
    mean, scale = obs64.mean(axis=0), obs64.std(axis=0) + 1e-3
    algo = make(td3_bc.TD3BC, dataset_path)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    np.testing.assert_allclose(state.obs_norm.mean, mean, rtol=1e-5)
    np.testing.assert_allclose(state.obs_norm.scale, scale, rtol=1e-5)
    # Training samples the normalised ring (observations and next observations) ...
    ring = state.dataset.items
    np.testing.assert_allclose(ring.observation[:, 0], (obs64 - mean) / scale, atol=1e-5)
    expected_next = (data.next_observations - mean) / scale
    np.testing.assert_allclose(ring.next_observation[:, 0], expected_next, atol=1e-5)
    # ... and acting (evaluation, dataset collection) normalises raw observations with the
    # statistics the state holds (so those of a checkpoint), not recomputed ones.
    seen = []

    def spy(params, obs, key, deterministic):
        seen.append(obs)
        return jnp.zeros((obs.shape[0], 1))

    algo.policy = spy
    raw = jnp.asarray(data.observations[:5])
    algo.act(state, raw, None, None, jax.random.key(1))
    np.testing.assert_allclose(seen[-1], (obs64[:5] - mean) / scale, atol=1e-5)
    shifted = state.replace(obs_norm=state.obs_norm.replace(mean=state.obs_norm.mean + 1.0))
    algo.act(shifted, raw, None, None, jax.random.key(1))
    np.testing.assert_allclose(seen[-1], (obs64[:5] - mean - 1.0) / scale, atol=1e-5)
    # The statistics are checkpointed with the state.
    assert "obs_norm" in checkpointed_fields(algo, state)


def test_without_normalisation_nothing_changes_the_observations(dataset_path):
    data = datasets.load(dataset_path)
    algo = make(td3_bc.TD3BC, dataset_path, normalize_obs=False)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    np.testing.assert_array_equal(state.obs_norm.mean, np.zeros(3))
    np.testing.assert_array_equal(state.obs_norm.scale, np.ones(3))
    np.testing.assert_array_equal(state.dataset.items.observation[:, 0], data.observations)
    seen = []
    algo.policy = lambda params, obs, key, deterministic: seen.append(obs) or obs[:, :1]
    raw = jnp.asarray(data.observations[:5])
    algo.act(state, raw, None, None, jax.random.key(1))
    assert seen[-1] is raw


@pytest.mark.slow  # a short run through the driver (~20 s)
def test_a_restored_run_acts_with_the_training_statistics(dataset_path, tmp_path):
    run_dir = tmp_path / "run"
    train(make(td3_bc.TD3BC, dataset_path), RunConfig(run_dir=str(run_dir), progress=False))
    algo, state, _ = load_run(run_dir)
    expected = datasets.observation_stats(datasets.load(dataset_path))
    np.testing.assert_array_equal(state.obs_norm.mean[0], expected.mean)
    np.testing.assert_array_equal(state.obs_norm.scale[0], expected.scale)


# ----------------------------------------------------------------------------- the driver


CASES = {
    "iql": (iql.IQL, {}),
    "td3-bc": (td3_bc.TD3BC, {}),
    "cql": (cql.CQL, {}),
    "edac": (sac_n.SACN, {"eta": 1.0, "num_critics": 3}),
    "rebrac": (rebrac.ReBRAC, {}),
}


@pytest.mark.slow  # three short runs per learner, mostly compilation (~40 s each)
@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_are_finite_and_resume_matches_an_uninterrupted_run(dataset_path, tmp_path, case):
    cls, options = CASES[case]

    def make_case(**overrides):
        return make(cls, dataset_path, **{**options, **overrides})

    whole = train(make_case(), RunConfig(num_seeds=2, progress=False))
    row = whole.metrics[-1]
    assert np.isfinite(row["loss"]).all() and np.isfinite(row["normalized_score"]).all()
    assert row["gradient_steps"] == 40
    run_dir = str(tmp_path / "run")
    train(make_case(total_steps=20), RunConfig(num_seeds=2, run_dir=run_dir, progress=False))
    resumed = train(
        make_case(), RunConfig(num_seeds=2, run_dir=run_dir, resume=True, progress=False)
    )
    assert tree_fingerprint(resumed.state.params) == tree_fingerprint(whole.state.params)
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]


@pytest.mark.slow
def test_resume_with_a_changed_dataset_fails(dataset_path, tmp_path):
    """Same path, other content: the dataset is not checkpointed, so the frozen-part
    fingerprint is what notices."""
    data = datasets.load(dataset_path)
    path = str(datasets.save(data, tmp_path / "data.npz"))
    run_dir = str(tmp_path / "run")
    train(make(iql.IQL, path, total_steps=20), RunConfig(run_dir=run_dir, progress=False))
    arrays = {name: getattr(data, name) for name in datasets.FIELDS}
    datasets.save(datasets.from_arrays({**arrays, "rewards": data.rewards + 1.0}), path)
    with pytest.raises(cfg.ConfigError, match="frozen parts"):
        train(make(iql.IQL, path), RunConfig(run_dir=run_dir, resume=True, progress=False))


@pytest.fixture(scope="module")
def cartpole_path(tmp_path_factory):
    """Random CartPole episodes (discrete actions)."""
    env, params = envs.make("CartPole-v1")
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(0), 200, num_envs=2)
    return str(datasets.save(data, tmp_path_factory.mktemp("data") / "cartpole.npz"))


@pytest.mark.slow
def test_discrete_cql_trains_on_discrete_data_and_refuses_continuous(cartpole_path, dataset_path):
    config = cfg.replace(cql.DiscreteCQLConfig(env="CartPole-v1", dataset=cartpole_path), **TINY)
    result = train(cql.DiscreteCQL.make(config), RunConfig(num_seeds=2, progress=False))
    assert np.isfinite(result.metrics[-1]["loss"]).all()
    assert np.isfinite(result.metrics[-1]["episode_return"]).all()
    pendulum = cfg.replace(cql.DiscreteCQLConfig(env="Pendulum-v1", dataset=dataset_path), **TINY)
    with pytest.raises(cfg.ConfigError, match="needs a Discrete action space"):
        cql.DiscreteCQL.make(pendulum)


@pytest.mark.slow  # a run, an evaluation and a plot (~20 s)
def test_cli_train_eval_and_plot_report_normalised_scores(dataset_path, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "td3-bc", "--env", "Pendulum-v1", "--dataset", dataset_path]
    argv += ["--total-steps", "40", "--eval-interval", "20", "--batch-size", "8"]
    argv += ["--hidden-sizes", "16", "--num-seeds", "2", "--run-dir", str(run_dir), "--no-progress"]
    assert cli.main(argv) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["dataset_transitions"] == 400 and summary["dataset_random_return"] == -1200.0
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir), "--episodes", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["dataset"], report["env"]) == (dataset_path, "Pendulum-v1")
    scores = datasets.normalized_score(np.asarray(report["return_per_agent"]), -1200.0, -150.0)
    np.testing.assert_allclose(report["normalized_score_per_agent"], scores, rtol=1e-5)
    pytest.importorskip("matplotlib")
    out = tmp_path / "curve.png"
    assert cli.main(["plot", str(run_dir), "--metric", "normalized_score", "-o", str(out)]) == 0
    assert out.stat().st_size > 0
