"""DQN (`jaxrl/algorithms/dqn/`): its targets, dueling aggregation, loss weighting and
epsilon schedule against hand computations, its config errors, and a few updates
through the driver. Learning thresholds are in test_dqn_learning.py (slow)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import c51, dqn
from jaxrl.algorithms.dqn import losses
from jaxrl.algorithms.qlearning import QNetwork, bootstrap_value, dueling_aggregate, next_action
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.driver import RunConfig, train

# Small enough that the driver tests compile and run in seconds.
TINY = dict(
    total_steps=256,
    num_envs=2,
    train_frequency=4,
    gradient_steps=2,
    batch_size=16,
    buffer_size=128,
    learning_starts=64,
    hidden_sizes=(16,),
)


def tiny(**overrides) -> dqn.DQN:
    return dqn.make(cfg.replace(dqn.DQNConfig(), **{**TINY, **overrides}))


def init_learner(algo: dqn.DQN, seed: int = 0):
    return jax.jit(algo.init_learner)(jax.random.key(seed), algo.hyperparams(), None)


# ----------------------------------------------------------------------------- targets


NEXT_Q_TARGET = jnp.array([[1.0, 5.0, 3.0], [2.0, 0.0, -1.0]])
NEXT_Q_ONLINE = jnp.array([[0.0, 1.0, 4.0], [0.5, 2.0, 0.0]])


def test_q_learning_target_takes_the_target_networks_max():
    np.testing.assert_array_equal(next_action(NEXT_Q_TARGET), [1, 0])
    np.testing.assert_allclose(bootstrap_value(NEXT_Q_TARGET), [5.0, 2.0])


def test_double_q_target_values_the_online_networks_choice_with_the_target_network():
    # The online network prefers action 2 in row 0 and action 1 in row 1.
    np.testing.assert_array_equal(next_action(NEXT_Q_TARGET, NEXT_Q_ONLINE), [2, 1])
    np.testing.assert_allclose(bootstrap_value(NEXT_Q_TARGET, NEXT_Q_ONLINE), [3.0, 0.0])


def test_learn_step_regresses_on_the_n_step_double_q_target():
    """The target DQN's learn step uses: reward + discount * Q_target(s', argmax Q_online)."""
    algo = tiny(loss="mse", double_q=True)
    params, learner = init_learner(algo)
    learner = learner.replace(target_params=init_learner(algo, seed=1)[0])
    obs = jax.random.normal(jax.random.key(2), (3, 4))
    next_obs = jax.random.normal(jax.random.key(3), (3, 4))
    batch = NStepBatch(
        observation=obs,
        action=jnp.array([0, 1, 1]),
        reward=jnp.array([1.0, 1.99, 0.5]),
        discount=jnp.array([0.99, 0.9801, 0.0]),  # n = 1, n = 2, a termination
        next_observation=next_obs,
    )
    q_target = np.asarray(algo.q_values(learner.target_params, next_obs))
    choice = np.asarray(algo.q_values(params, next_obs)).argmax(-1)
    expected_target = (
        np.asarray(batch.reward) + np.asarray(batch.discount) * q_target[np.arange(3), choice]
    )
    q_taken = np.asarray(algo.q_values(params, obs))[np.arange(3), [0, 1, 1]]
    expected_loss = np.mean(0.5 * (q_taken - expected_target) ** 2)
    _, _, priorities, metrics = jax.jit(algo.learn_step)(
        params, learner, batch, jnp.ones(3), algo.hyperparams(), jax.random.key(4), jnp.int32(0)
    )
    np.testing.assert_allclose(metrics["loss"], expected_loss, rtol=1e-5)
    np.testing.assert_allclose(priorities, np.abs(q_taken - expected_target), rtol=1e-5)
    np.testing.assert_allclose(metrics["q_mean"], q_taken.mean(), rtol=1e-5)


# ----------------------------------------------------------------------------- losses


def test_huber_and_squared_td_losses_by_hand():
    q = jnp.array([0.0, 0.0, 0.0])
    target = jnp.array([0.5, -2.0, 3.0])  # errors -0.5, 2, -3
    ones = jnp.ones(3)
    huber, td = losses.td_loss(q, target, ones, "huber")
    # 0.5 * 0.25 = 0.125 inside the unit interval; |d| - 0.5 = 1.5, 2.5 beyond.
    np.testing.assert_allclose(huber, (0.125 + 1.5 + 2.5) / 3)
    np.testing.assert_allclose(td, [0.5, 2.0, 3.0])
    mse, _ = losses.td_loss(q, target, ones, "mse")
    np.testing.assert_allclose(mse, 0.5 * (0.25 + 4.0 + 9.0) / 3)


def test_importance_weights_scale_each_samples_loss_and_gradient():
    q = jnp.array([1.0, 2.0, 3.0])
    target = jnp.array([0.0, 0.0, 0.0])
    weights = jnp.array([1.0, 0.5, 0.0])
    loss, td = losses.td_loss(q, target, weights, "mse")
    np.testing.assert_allclose(loss, (0.5 * 1 + 0.5 * 0.5 * 4 + 0.0) / 3)
    np.testing.assert_allclose(td, [1.0, 2.0, 3.0])  # priorities are unweighted
    grad = jax.grad(lambda q: losses.td_loss(q, target, weights, "mse")[0])(q)
    np.testing.assert_allclose(grad, np.array([1.0 * 1, 0.5 * 2, 0.0 * 3]) / 3)
    # Huber's gradient is the clipped error, times the weight.
    grad = jax.grad(lambda q: losses.td_loss(q, target, weights, "huber")[0])(q)
    np.testing.assert_allclose(grad, np.array([1.0, 0.5, 0.0]) / 3)


def test_targets_get_no_gradient():
    q = jnp.array([1.0])
    grad = jax.grad(lambda t: losses.td_loss(q, t, jnp.ones(1), "mse")[0])(jnp.array([3.0]))
    np.testing.assert_array_equal(grad, [0.0])


# ----------------------------------------------------------------------------- networks


def test_dueling_aggregation_by_hand():
    value = jnp.array([10.0, -1.0])
    advantage = jnp.array([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])  # means 3 and 1
    np.testing.assert_allclose(
        dueling_aggregate(value, advantage), [[8.0, 9.0, 13.0], [-2.0, -2.0, 1.0]]
    )
    # Per atom (C51 with dueling): the same along the trailing axis.
    per_atom = dueling_aggregate(jnp.stack([value, value], -1), jnp.stack([advantage] * 2, -1))
    np.testing.assert_allclose(per_atom[..., 1], [[8.0, 9.0, 13.0], [-2.0, -2.0, 1.0]])


def test_dueling_network_mean_advantage_is_the_value_head():
    net = QNetwork(action_dim=3, hidden_sizes=(8,), dueling=True)
    obs = jax.random.normal(jax.random.key(0), (5, 4))
    params = net.init(jax.random.key(1), obs)
    q = net.apply(params, obs)
    features = jax.nn.relu(
        obs @ params["params"]["MLP_0"]["Dense_0"]["kernel"]
        + params["params"]["MLP_0"]["Dense_0"]["bias"]
    )
    value = features @ params["params"]["Dense_1"]["kernel"] + params["params"]["Dense_1"]["bias"]
    np.testing.assert_allclose(q.mean(-1), value[:, 0], rtol=1e-5, atol=1e-6)


def test_image_observations_get_the_conv_torso_and_vectors_the_mlp():
    minatar = dqn.make(dqn.default_config("Breakout-MinAtar"))
    assert minatar.network.torso == "conv"
    env, env_params = envs.make("Breakout-MinAtar")
    obs, _ = env.reset(jax.random.key(0), env_params)
    params = minatar.network.init(jax.random.key(0), obs[None])
    kernel = params["params"]["ConvTorso_0"]["Conv_0"]["kernel"]
    assert kernel.shape == (3, 3, obs.shape[-1], 16)
    # 10x10 'valid' 3x3 -> 8x8x16 = 1024 features into the 128 hidden units.
    assert params["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (8 * 8 * 16, 128)
    assert minatar.q_values(params, obs[None]).shape == (1, minatar.action_dim)
    assert tiny().network.torso == "mlp"
    assert tiny(network="auto").network.torso == "mlp"


# ----------------------------------------------------------------------------- exploration


def test_epsilon_decays_linearly_over_the_fraction_then_stays():
    # 1000 steps of 2 environments x 5 = 100 updates; decay over the first 50.
    algo = tiny(
        total_steps=1000,
        num_envs=2,
        train_frequency=5,
        eps_start=1.0,
        eps_end=0.1,
        eps_fraction=0.5,
    )
    hp = algo.hyperparams()
    eps = [float(algo.epsilon(hp, jnp.int32(u))) for u in (0, 10, 25, 50, 99)]
    np.testing.assert_allclose(eps, [1.0, 0.82, 0.55, 0.1, 0.1], rtol=1e-6)
    flat = tiny(eps_fraction=0.0, eps_end=0.2)
    assert float(flat.epsilon(flat.hyperparams(), jnp.int32(0))) == pytest.approx(0.2)


def test_exploration_with_epsilon_zero_is_greedy():
    algo = tiny(eps_start=0.0, eps_end=0.0)
    params, learner = init_learner(algo)
    obs = jax.random.normal(jax.random.key(1), (64, 4))
    actions = algo.explore(params, learner, algo.hyperparams(), obs, jax.random.key(2), 0)
    np.testing.assert_array_equal(actions, algo.q_values(params, obs).argmax(-1))


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("module", [dqn, c51])
def test_config_errors_name_the_field(module):
    cases = {
        "eps_end": dict(eps_start=0.1, eps_end=0.5),
        "batch_size": dict(batch_size=256, buffer_size=128),
        "learning_starts": dict(learning_starts=256),
        "max_grad_norm": dict(max_grad_norm=-1.0),
        "network": dict(network="transformer"),
        "lr": dict(lr=0.0),
    }
    for field, overrides in cases.items():
        config = cfg.replace(module.Config(), **{**TINY, **overrides})
        with pytest.raises(cfg.ConfigError, match=f"invalid {field}="):
            module.make(config)


@pytest.mark.parametrize("module", [dqn, c51])
def test_a_conv_torso_needs_image_observations(module):
    with pytest.raises(cfg.ConfigError, match="invalid network='conv'.*images"):
        module.make(cfg.replace(module.Config(), **TINY, network="conv"))


@pytest.mark.parametrize("module", [dqn, c51])
def test_a_continuous_environment_is_refused(module):
    config = cfg.replace(module.Config(), **{**TINY, "env": "Pendulum-v1"})
    with pytest.raises(cfg.ConfigError, match="env='Pendulum-v1'.*Discrete"):
        module.make(config)


def test_unknown_loss_is_refused():
    with pytest.raises(cfg.ConfigError, match="invalid loss='l1'.*huber"):
        tiny(loss="l1")


def test_schedules_defined_by_total_steps():
    assert tiny(eps_fraction=0.5).schedule_follows_total
    assert not tiny(eps_fraction=0.0).schedule_follows_total
    assert not tiny(eps_start=0.05, eps_end=0.05).schedule_follows_total
    assert tiny(eps_fraction=0.0, prioritised=True).schedule_follows_total  # beta -> 1
    assert not tiny(
        eps_fraction=0.0, prioritised=True, importance_exponent=1.0
    ).schedule_follows_total


def test_presets_are_valid_configs():
    for env in dqn.PRESETS:
        dqn.default_config(env).validate()
    assert dqn.default_config("CartPole-v1").env == "CartPole-v1"
    assert set(dqn.SWEEPABLE) >= {"lr", "gamma", "tau"}


# ----------------------------------------------------------------------------- the driver


def _run(algo, seed=0, **run):
    return train(algo, RunConfig(num_seeds=2, seed=seed, progress=False, **run))


def test_updates_through_the_driver_are_finite():
    # Determinism and resume of the shared loop: tests/algorithms/test_offpolicy.py.
    algo = tiny(double_q=True, dueling=True, n_step=3, prioritised=True)
    first = _run(algo)
    rows = first.metrics
    assert {"loss", "q_mean", "epsilon", "episode_return"} <= set(rows[-1])
    # 32 updates, epsilon from 1 to 0.05 over the first 3.2 (eps_fraction 0.1).
    assert rows[0]["epsilon"][0] > 0.05 and rows[-1]["epsilon"] == pytest.approx([0.05, 0.05])
    for row in rows:
        assert np.isfinite(row["loss"]).all() and np.isfinite(row["q_mean"]).all()
    assert rows[-1]["loss"][0] != 0.0  # learning has started
    params = first.state.params
    leaf = jax.tree.leaves(params)[0]
    assert not np.allclose(leaf[0], leaf[1])  # the two seeds differ


def test_sweepable_hyperparameters_are_validated_float32_leaves():
    hp = tiny().hyperparams(lr=1e-3, tau=0.5, eps_fraction=0.25)
    assert set(vars(hp)) == set(dqn.SWEEPABLE)
    assert all(leaf.dtype == jnp.float32 and leaf.shape == () for leaf in jax.tree.leaves(hp))
    assert float(hp.tau) == 0.5
    with pytest.raises(cfg.ConfigError, match="invalid eps_end="):
        tiny().hyperparams(eps_start=0.01)  # below eps_end = 0.05
