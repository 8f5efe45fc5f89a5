"""SAC (`jaxrl/algorithms/sac/`): its losses against hand computations, the squashed
Gaussian's log-probability against a numerical change of variables, one learning
step's pieces (which parameters move when), the config's errors, and a few updates
through the driver. Learning on Pendulum is in test_continuous_learning.py (slow)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.acting import to_box
from jaxrl.algorithms import sac
from jaxrl.algorithms.sac import losses
from jaxrl.nn import TanhGaussian
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.driver import RunConfig, train

TINY = dict(
    total_steps=64,
    batch_size=8,
    buffer_size=64,
    learning_starts=16,
    hidden_sizes=(16, 16),
)


def make(**overrides) -> sac.SAC:
    return sac.make(cfg.replace(sac.SACConfig(env="Pendulum-v1"), **{**TINY, **overrides}))


def hand_batch(batch_size: int = 8, seed: int = 0) -> NStepBatch:
    """A batch of Pendulum-shaped transitions (3-D observations, 1-D actions)."""
    rng = np.random.default_rng(seed)
    return NStepBatch(
        observation=jnp.asarray(rng.normal(size=(batch_size, 3)), jnp.float32),
        action=jnp.asarray(rng.uniform(-1, 1, size=(batch_size, 1)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=batch_size), jnp.float32),
        discount=jnp.full((batch_size,), 0.99, jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(batch_size, 3)), jnp.float32),
    )


# ----------------------------------------------------------------------------- losses


def test_soft_td_target_is_reward_plus_discounted_min_q_minus_alpha_log_prob():
    batch = NStepBatch(
        observation=None,
        action=None,
        reward=jnp.array([1.0, -2.0]),
        discount=jnp.array([0.9, 0.0]),  # the second window ended by termination
        next_observation=None,
    )
    next_q = jnp.array([[3.0, 10.0], [5.0, 7.0]])  # critics x batch
    next_log_prob = jnp.array([-1.0, 2.0])
    target = losses.soft_td_target(batch, next_q, next_log_prob, jnp.float32(0.5))
    # 1 + 0.9 * (min(3, 5) - 0.5 * -1) = 1 + 0.9 * 3.5; -2 + 0 * anything.
    np.testing.assert_allclose(target, [4.15, -2.0], rtol=1e-6)


def test_twin_critic_loss_sums_each_critics_mean_squared_error():
    q = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    target = jnp.array([1.0, 1.0])
    # critic 1: (0 + 1) / 2 = 0.5; critic 2: (4 + 9) / 2 = 6.5.
    assert float(losses.twin_critic_loss(q, target)) == pytest.approx(7.0)


def test_actor_loss_is_alpha_log_prob_minus_the_smaller_q():
    q = jnp.array([[1.0, 5.0], [2.0, 3.0]])
    log_prob = jnp.array([-1.0, 0.5])
    # mean(0.2 * -1 - 1, 0.2 * 0.5 - 3) = mean(-1.2, -2.9)
    assert float(losses.actor_loss(q, log_prob, jnp.float32(0.2))) == pytest.approx(-2.05)


def test_temperature_loss_value_and_gradients():
    log_prob = jnp.array([-1.0, -3.0])  # entropy estimate 2, above the target -1
    loss, (g_alpha, g_logp) = jax.value_and_grad(losses.temperature_loss, argnums=(0, 1))(
        jnp.float32(0.3), log_prob, jnp.float32(-1.0)
    )
    # -(0.3 * mean(-2, -4)) = 0.9; d/dlog_alpha = -mean(log_prob + target) = 3 > 0, so
    # gradient descent lowers alpha when the entropy exceeds its target.
    assert float(loss) == pytest.approx(0.9)
    assert float(g_alpha) == pytest.approx(3.0)
    np.testing.assert_array_equal(g_logp, [0.0, 0.0])  # the policy term is held fixed


# ----------------------------------------------------------------------------- squashed Gaussian


def test_squashed_log_prob_is_the_change_of_variables_of_the_gaussian():
    dist = TanhGaussian(mean=jnp.array([0.3, -0.5]), log_std=jnp.array([-0.2, 0.4]))
    u = jnp.array([0.7, -1.9])
    gaussian = jnp.sum(jax.scipy.stats.norm.logpdf(u, dist.mean, jnp.exp(dist.log_std)))
    # log p(a) = log p(u) - log |det da/du|, the Jacobian of tanh taken numerically.
    _, log_det = jnp.linalg.slogdet(jax.jacfwd(jnp.tanh)(u))
    assert float(dist.log_prob(u)) == pytest.approx(float(gaussian - log_det), abs=1e-5)


def test_squashed_density_integrates_to_one_over_the_action_interval():
    dist = TanhGaussian(mean=jnp.array([0.8]), log_std=jnp.array([0.3]))
    a = np.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)
    u = jnp.asarray(np.arctanh(a), jnp.float32)[:, None]
    density = np.exp(np.asarray(dist.log_prob(u), np.float64))
    assert np.trapezoid(density, a) == pytest.approx(1.0, abs=2e-3)


def test_squashed_log_prob_is_finite_where_tanh_saturates():
    dist = TanhGaussian(mean=jnp.array([0.0]), log_std=jnp.array([0.0]))
    u = jnp.array([[20.0]])  # tanh(u)^2 == 1 in float32: a naive log(1 - tanh^2) is -inf
    expected = -0.5 * 20.0**2 - 0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 20.0)
    assert float(dist.log_prob(u)[0]) == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- the agent


def test_actions_map_from_the_unit_box_onto_the_bounds():
    box = envs.spaces.Box(low=np.array([-2.0, 0.0]), high=np.array([2.0, 10.0]), shape=(2,))
    actions = jnp.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 0.5]])
    np.testing.assert_allclose(to_box(actions, box), [[-2, 0], [0, 5], [2, 7.5]])


def test_target_entropy_defaults_to_minus_the_action_dimension():
    assert float(make().hyperparams().target_entropy) == -1.0  # Pendulum: 1-D actions
    assert float(make(target_entropy=-3.5).hyperparams().target_entropy) == -3.5
    assert float(make().hyperparams(target_entropy=0.5).target_entropy) == 0.5


def init(algo: sac.SAC) -> SimpleNamespace:
    """What `act` and `learn_step` read of a state (no environments, no replay)."""
    hparams = algo.hyperparams()
    params, learner = algo.init_learner(jax.random.key(0), hparams, None)
    return SimpleNamespace(params=params, learner=learner, hparams=hparams)


def test_explore_and_act_stay_in_the_box():
    algo = make()
    state = init(algo)
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(64, 3)) * 5, jnp.float32)
    explore = jax.jit(algo.explore)
    explored = explore(state.params, state.learner, state.hparams, obs, jax.random.key(1), 0)
    assert explored.shape == (64, 1) and bool(jnp.all(jnp.abs(explored) < 1))
    acted, _ = jax.jit(lambda o, k: algo.act(state, o, None, None, k))(obs, jax.random.key(2))
    mean = algo.actor.apply(state.params["actor"], obs).mean
    np.testing.assert_allclose(acted, 2.0 * jnp.tanh(mean), atol=1e-6)  # Pendulum: [-2, 2]


def learn(algo: sac.SAC, grad_steps: tuple[int, ...]):
    """The initial state and `learn_step`'s outputs from it at each of `grad_steps`."""
    state = init(algo)
    step = jax.jit(algo.learn_step)
    batch, weights = hand_batch(), jnp.ones((8,))
    outs = [
        step(
            state.params,
            state.learner,
            batch,
            weights,
            state.hparams,
            jax.random.key(1),
            jnp.int32(g),
        )
        for g in grad_steps
    ]
    return state, outs


def changed(a, b) -> bool:
    return any(
        not np.array_equal(x, y)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_learn_step_moves_critics_actor_and_temperature_and_polyak_averages_targets():
    algo = make(tau=0.25)
    state, [(params, learner, priorities, metrics)] = learn(algo, (0,))
    assert priorities is None
    assert changed(params["critic"], state.params["critic"])
    assert changed(params["actor"], state.params["actor"])
    assert float(learner.log_alpha) != float(state.learner.log_alpha)
    expected = jax.tree.map(
        lambda new, old: 0.25 * new + 0.75 * old, params["critic"], state.params["critic"]
    )
    for got, want in zip(
        jax.tree.leaves(learner.target_critic), jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert set(metrics) == {"loss", "actor_loss", "q_mean", "alpha", "entropy"}
    assert float(metrics["alpha"]) == pytest.approx(1.0)  # the initial temperature
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_policy_frequency_delays_the_actor_and_temperature():
    algo = make(policy_frequency=2)
    state, [first, second] = learn(algo, (0, 1))
    params, learner = first[:2]  # the 1st gradient step: not due
    assert changed(params["critic"], state.params["critic"])
    assert not changed(params["actor"], state.params["actor"])
    assert not changed(learner.actor_opt, state.learner.actor_opt)
    assert float(learner.log_alpha) == float(state.learner.log_alpha)
    params, learner = second[:2]  # the 2nd: due, two actor and temperature updates
    assert changed(params["actor"], state.params["actor"])
    assert int(learner.actor_opt[0].count) == 2
    assert float(learner.log_alpha) != float(state.learner.log_alpha)


def test_warm_start_parameters_are_used_and_checked():
    algo = make()
    params = init(algo).params
    warm = jax.tree.map(lambda x: x + 1.0, params)
    got, learner = algo.init_learner(jax.random.key(5), algo.hyperparams(), warm)
    assert not changed(got, warm) and not changed(learner.target_critic, warm["critic"])
    with pytest.raises(cfg.ConfigError, match="invalid params"):
        make(hidden_sizes=(8,)).init_learner(jax.random.key(5), algo.hyperparams(), warm)


def test_a_fixed_temperature_does_not_move():
    algo = make(autotune=False, alpha=0.05)
    _, [(_, learner, _, metrics)] = learn(algo, (0,))
    assert float(jnp.exp(learner.log_alpha)) == pytest.approx(0.05)
    assert float(metrics["alpha"]) == pytest.approx(0.05)


@pytest.mark.parametrize(
    "field, overrides",
    [
        ("prioritised", dict(prioritised=True)),
        ("alpha", dict(alpha=0.0)),
        ("alpha_lr", dict(alpha_lr=-1e-3)),
        ("actor_lr", dict(actor_lr=0.0)),
        ("critic_lr", dict(critic_lr=float("nan"))),
        ("policy_frequency", dict(policy_frequency=0)),
        ("target_entropy", dict(target_entropy=float("inf"))),
    ],
)
def test_config_errors_name_the_field(field, overrides):
    with pytest.raises(cfg.ConfigError, match=f"invalid {field}="):
        make(**overrides)


def test_a_discrete_environment_is_refused():
    with pytest.raises(cfg.ConfigError, match="env='CartPole-v1'.*1-D Box"):
        sac.make(cfg.replace(sac.SACConfig(env="CartPole-v1"), **TINY))


def test_every_preset_is_valid():
    for env in sac.PRESETS:
        sac.make(sac.default_config(env))


# ----------------------------------------------------------------------------- through the driver


def test_a_few_updates_through_the_driver_are_finite_and_deterministic():
    algo = make()  # 64 updates of one step, learning from the 16th
    run = RunConfig(num_seeds=2, progress=False, log_every=32)
    first, second = train(algo, run), train(algo, run)
    assert first.summary["params_fingerprint"] == second.summary["params_fingerprint"]
    last = first.metrics[-1]
    for name in ("loss", "actor_loss", "q_mean", "alpha", "entropy"):
        values = np.asarray(last[name])
        assert values.shape == (2,) and np.isfinite(values).all(), name
    assert last["loss"][0] != last["loss"][1]  # two agents, two seeds
    assert last["alpha"][0] < 1.0  # the temperature has been tuned down from 1
