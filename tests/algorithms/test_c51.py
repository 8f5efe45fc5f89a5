"""C51 (`jaxrl/algorithms/c51/`): the categorical projection and the cross-entropy
against hand computations, the learn step's target, its config errors, and a few
prioritised updates through the driver. DQN's shared pieces (epsilon schedule,
network, the base's config errors for both) are tested in test_dqn.py; learning
thresholds are in test_dqn_learning.py (slow)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import c51
from jaxrl.algorithms.c51 import losses
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.driver import RunConfig, train

ATOMS = jnp.arange(5, dtype=jnp.float32)  # v_min 0, v_max 4, dz 1
NEXT_PROBS = jnp.array([0.1, 0.2, 0.3, 0.4, 0.0])

TINY = dict(
    total_steps=256,
    num_envs=2,
    train_frequency=4,
    gradient_steps=2,
    batch_size=16,
    buffer_size=128,
    learning_starts=64,
    hidden_sizes=(16,),
    num_atoms=11,
    v_min=0.0,
    v_max=20.0,
)


def tiny(**overrides) -> c51.C51:
    return c51.make(cfg.replace(c51.C51Config(), **{**TINY, **overrides}))


def project(reward: float, discount: float, probs=NEXT_PROBS) -> np.ndarray:
    out = losses.categorical_projection(
        probs[None], jnp.array([reward]), jnp.array([discount]), ATOMS
    )
    return np.asarray(out[0])


# ----------------------------------------------------------------------------- projection


def test_projection_splits_mass_between_neighbouring_atoms():
    # Tz = 0.5 + 0.5 z = [0.5, 1, 1.5, 2, 2.5]: atom 0's 0.1 goes half to 0 and half
    # to 1, atom 1's 0.2 lands on 1, atom 2's 0.3 splits over 1 and 2, atom 3's 0.4
    # lands on 2, atom 4 has no mass.
    np.testing.assert_allclose(project(0.5, 0.5), [0.05, 0.4, 0.55, 0.0, 0.0], atol=1e-6)


def test_projection_clips_atoms_outside_the_support_onto_its_ends():
    # Tz = 3 + z = [3, 4, 5, 6, 7] -> [3, 4, 4, 4, 4]: everything but atom 0's mass on 4.
    np.testing.assert_allclose(project(3.0, 1.0), [0.0, 0.0, 0.0, 0.1, 0.9], atol=1e-6)
    # Tz = z - 2.5 = [-2.5, -1.5, -0.5, 0.5, 1.5] -> [0, 0, 0, 0.5, 1.5]: 0.1 + 0.2 + 0.3
    # + half of 0.4 on atom 0, the other half on atom 1 (atom 4's 1.5 has no mass).
    np.testing.assert_allclose(project(-2.5, 1.0), [0.8, 0.2, 0.0, 0.0, 0.0], atol=1e-6)


def test_a_terminal_transition_projects_the_reward_alone():
    # discount 0 (a termination): every atom moves to 2.3 -> 0.7 on atom 2, 0.3 on 3.
    np.testing.assert_allclose(project(2.3, 0.0), [0.0, 0.0, 0.7, 0.3, 0.0], atol=1e-6)


def test_projection_conserves_probability_on_the_papers_support():
    atoms = losses.support(51, -10.0, 10.0)
    assert float(atoms[1] - atoms[0]) == pytest.approx(0.4)
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(0), (64, 51)))
    reward = jax.random.uniform(jax.random.key(1), (64,), minval=-15.0, maxval=15.0)
    discount = jnp.where(jnp.arange(64) % 4 == 0, 0.0, 0.99**3)
    target = losses.categorical_projection(probs, reward, discount, atoms)
    np.testing.assert_allclose(target.sum(-1), 1.0, rtol=1e-5)
    assert (target >= 0).all()
    # The mean moves as reward + discount * mean wherever nothing is clipped.
    inside = np.abs(np.asarray(reward)) < 0.5
    mean = np.asarray((target * atoms).sum(-1))
    shifted = np.asarray(reward + discount * (probs * atoms).sum(-1))
    np.testing.assert_allclose(mean[inside], shifted[inside], atol=1e-4)


# ----------------------------------------------------------------------------- loss


def test_cross_entropy_by_hand_and_weighted():
    target = jnp.array([[0.0, 0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    logits = jnp.stack([jnp.zeros(5), jnp.log(jnp.array([0.5, 0.125, 0.125, 0.125, 0.125]))])
    loss, cross_entropy = losses.categorical_loss(logits, target, jnp.array([1.0, 0.5]))
    np.testing.assert_allclose(cross_entropy, [np.log(5.0), np.log(2.0)], rtol=1e-6)
    np.testing.assert_allclose(loss, (np.log(5.0) + 0.5 * np.log(2.0)) / 2, rtol=1e-6)
    # d CE / d logits = softmax - target, scaled by weight / batch.
    grad = jax.grad(lambda x: losses.categorical_loss(x, target, jnp.array([1.0, 0.0]))[0])(logits)
    np.testing.assert_allclose(grad[0], (0.2 - target[0]) / 2, atol=1e-6)
    np.testing.assert_allclose(grad[1], 0.0, atol=1e-7)


def test_expected_q_is_the_distributions_mean():
    logits = jnp.log(jnp.array([[0.5, 0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0, 0.0]]) + 1e-30)
    np.testing.assert_allclose(losses.expected_q(logits, ATOMS), [2.0, 2.0], atol=1e-5)


def test_learn_step_targets_the_projected_double_q_distribution():
    algo = tiny(double_q=True)
    hp = algo.hyperparams()
    init = jax.jit(algo.init_learner)
    params, learner = init(jax.random.key(0), hp, None)
    learner = learner.replace(target_params=init(jax.random.key(1), hp, None)[0])
    obs = jax.random.normal(jax.random.key(2), (3, 4))
    next_obs = jax.random.normal(jax.random.key(3), (3, 4))
    batch = NStepBatch(
        observation=obs,
        action=jnp.array([0, 1, 0]),
        reward=jnp.array([1.0, 2.0, 25.0]),  # the last falls beyond v_max = 20
        discount=jnp.array([0.99, 0.9801, 0.0]),
        next_observation=next_obs,
    )
    atoms = np.linspace(0.0, 20.0, 11)
    choice = np.asarray(algo.q_values(params, next_obs)).argmax(-1)  # the online network's
    next_logits = np.asarray(algo.network.apply(learner.target_params, next_obs))
    next_probs = jax.nn.softmax(next_logits[np.arange(3), choice], -1)
    target = losses.categorical_projection(next_probs, batch.reward, batch.discount, atoms)
    np.testing.assert_allclose(target[2], np.eye(11)[10], atol=1e-6)  # clipped onto v_max
    logits = np.asarray(algo.network.apply(params, obs))[np.arange(3), [0, 1, 0]]
    expected = -(np.asarray(target) * jax.nn.log_softmax(logits, -1)).sum(-1)
    _, _, priorities, metrics = jax.jit(algo.learn_step)(
        params, learner, batch, jnp.ones(3), hp, jax.random.key(4), jnp.int32(0)
    )
    np.testing.assert_allclose(priorities, expected, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss"], expected.mean(), rtol=1e-5)
    q_taken = (np.asarray(jax.nn.softmax(logits, -1)) * atoms).sum(-1)
    np.testing.assert_allclose(metrics["q_mean"], q_taken.mean(), rtol=1e-5)


# ----------------------------------------------------------------------------- config


def test_config_errors_name_the_field():
    cases = {
        "v_min": dict(v_min=5.0, v_max=5.0),
        "num_atoms": dict(num_atoms=1),
    }
    for field, overrides in cases.items():
        with pytest.raises(cfg.ConfigError, match=f"invalid {field}="):
            tiny(**overrides)


def test_q_values_are_the_means_over_the_support():
    algo = tiny()
    params, _ = jax.jit(algo.init_learner)(jax.random.key(0), algo.hyperparams(), None)
    obs = jax.random.normal(jax.random.key(1), (2, 4))
    logits = algo.network.apply(params, obs)
    assert logits.shape == (2, algo.action_dim, 11)
    np.testing.assert_allclose(
        algo.q_values(params, obs), losses.expected_q(logits, jnp.linspace(0.0, 20.0, 11))
    )


# ----------------------------------------------------------------------------- the driver


def test_prioritised_updates_through_the_driver_are_finite():
    # Determinism and resume of the shared loop: tests/algorithms/test_offpolicy.py.
    algo = tiny(prioritised=True, n_step=3, dueling=True)
    first = train(algo, RunConfig(num_seeds=2, progress=False))
    for row in first.metrics:
        assert np.isfinite(row["loss"]).all() and np.isfinite(row["q_mean"]).all()
    assert 0.0 < first.metrics[-1]["loss"][0] < np.log(11.0) + 1.0
    assert first.metrics[-1]["q_mean"][0] > 0.0  # returns on [0, 20]: CartPole's are positive
