"""TD3 (`jaxrl/algorithms/td3/`): its target smoothing, target and actor loss against
hand computations, delayed actor and target updates, exploration noise, the config's
errors, and a few updates through the driver. The twin-critic loss is SAC's
(test_sac.py); learning on Pendulum is in test_continuous_learning.py (slow)."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import td3
from jaxrl.algorithms.td3 import losses
from jaxrl.algorithms.td3.train import exploration_action
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.driver import RunConfig, train

TINY = dict(
    total_steps=64,
    batch_size=8,
    buffer_size=64,
    learning_starts=16,
    hidden_sizes=(16, 16),
)


def make(**overrides) -> td3.TD3:
    return td3.make(cfg.replace(td3.TD3Config(env="Pendulum-v1"), **{**TINY, **overrides}))


# ----------------------------------------------------------------------------- losses


def test_target_smoothing_clips_the_noise_then_the_action():
    next_action = jnp.array([0.5, -0.9, 0.95, 0.0])
    noise = jnp.array([10.0, -10.0, 0.1, -1.0])
    smoothed = losses.smoothed_target_action(next_action, noise, 0.2, 0.5)
    # 0.2 * noise = [2, -2, 0.02, -0.2], clipped to +-0.5: [0.5, -0.5, 0.02, -0.2];
    # added: [1.0, -1.4, 0.97, -0.2], clipped to the box [-1, 1].
    np.testing.assert_allclose(smoothed, [1.0, -1.0, 0.97, -0.2], rtol=1e-6)


def test_no_smoothing_with_a_zero_clip():
    next_action = jnp.array([0.3, -0.4])
    smoothed = losses.smoothed_target_action(next_action, jnp.array([3.0, -2.0]), 0.2, 0.0)
    np.testing.assert_array_equal(smoothed, next_action)


def test_td3_target_is_reward_plus_discounted_smaller_target_q():
    batch = NStepBatch(
        observation=None,
        action=None,
        reward=jnp.array([1.0, -2.0]),
        discount=jnp.array([0.9, 0.0]),  # the second window ended by termination
        next_observation=None,
    )
    next_q = jnp.array([[3.0, 10.0], [5.0, 7.0]])  # critics x batch
    np.testing.assert_allclose(losses.td3_target(batch, next_q), [1 + 0.9 * 3, -2.0])


def test_actor_loss_is_minus_the_mean_first_critic():
    assert float(losses.deterministic_actor_loss(jnp.array([1.0, 2.0, 6.0]))) == -3.0


def test_exploration_noise_scales_and_clips():
    action = jnp.array([[0.0, 0.95]])
    noise = jnp.array([[1.0, 1.0]])
    np.testing.assert_allclose(exploration_action(action, noise, 0.1), [[0.1, 1.0]])


# ----------------------------------------------------------------------------- the agent


def hand_batch(batch_size: int = 8) -> NStepBatch:
    rng = np.random.default_rng(0)
    return NStepBatch(
        observation=jnp.asarray(rng.normal(size=(batch_size, 3)), jnp.float32),
        action=jnp.asarray(rng.uniform(-1, 1, size=(batch_size, 1)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=batch_size), jnp.float32),
        discount=jnp.full((batch_size,), 0.99, jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(batch_size, 3)), jnp.float32),
    )


def init(algo: td3.TD3) -> SimpleNamespace:
    """What `act` and `learn_step` read of a state (no environments, no replay)."""
    hparams = algo.hyperparams()
    params, learner = algo.init_learner(jax.random.key(0), hparams, None)
    return SimpleNamespace(params=params, learner=learner, hparams=hparams)


def same(a, b) -> bool:
    return all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_actor_and_targets_move_only_every_policy_delay_steps():
    algo = make(policy_delay=2, tau=0.25)
    state = init(algo)
    step = jax.jit(algo.learn_step)
    args = (hand_batch(), jnp.ones((8,)), state.hparams, jax.random.key(1))
    skipped = step(state.params, state.learner, *args, jnp.int32(0))  # 1st gradient step
    due = step(state.params, state.learner, *args, jnp.int32(1))  # 2nd: the actor's turn
    params, learner, priorities, metrics = skipped
    assert priorities is None
    assert not same(params["critic"], state.params["critic"])  # the critics: every step
    assert same(params["actor"], state.params["actor"])
    assert same(learner.actor_opt, state.learner.actor_opt)
    assert same(learner.target_actor, state.learner.target_actor)
    assert same(learner.target_critic, state.learner.target_critic)
    assert set(metrics) == {"loss", "actor_loss", "q_mean"}
    assert all(np.isfinite(float(v)) for v in metrics.values())

    params, learner, _, _ = due
    assert not same(params["actor"], state.params["actor"])
    for online, target, before in (
        (params["actor"], learner.target_actor, state.learner.target_actor),
        (params["critic"], learner.target_critic, state.learner.target_critic),
    ):
        expected = jax.tree.map(lambda new, old: 0.25 * new + 0.75 * old, online, before)
        for got, want in zip(jax.tree.leaves(target), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_act_is_the_actor_mapped_onto_the_bounds():
    algo = make()
    state = init(algo)
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(16, 3)), jnp.float32)
    act = jax.jit(lambda k, det: algo.act(state, obs, None, None, k, det), static_argnums=1)
    acted, _ = act(jax.random.key(1), True)
    mu = algo.actor.apply(state.params["actor"], obs)
    np.testing.assert_allclose(acted, 2.0 * mu, atol=1e-6)  # Pendulum: [-2, 2]
    noisy, _ = act(jax.random.key(1), False)
    assert not np.allclose(noisy, acted) and bool(jnp.all(jnp.abs(noisy) <= 2.0))


@pytest.mark.parametrize(
    "field, overrides",
    [
        ("policy_noise", dict(policy_noise=0.0)),
        ("exploration_noise", dict(exploration_noise=-0.1)),
        ("noise_clip", dict(noise_clip=-0.5)),
        ("policy_delay", dict(policy_delay=0)),
        ("target_update_interval", dict(target_update_interval=2)),
        ("prioritised", dict(prioritised=True)),
        ("actor_lr", dict(actor_lr=0.0)),
    ],
)
def test_config_errors_name_the_field(field, overrides):
    with pytest.raises(cfg.ConfigError, match=f"invalid {field}="):
        make(**overrides)


def test_a_discrete_environment_is_refused():
    with pytest.raises(cfg.ConfigError, match="env='CartPole-v1'.*1-D Box"):
        td3.make(cfg.replace(td3.TD3Config(env="CartPole-v1"), **TINY))


def test_every_preset_is_valid():
    for env in td3.PRESETS:
        td3.make(td3.default_config(env))


# ----------------------------------------------------------------------------- through the driver


def test_a_few_updates_through_the_driver_are_finite():
    algo = make()  # 64 updates of one step, learning from the 16th
    result = train(algo, RunConfig(num_seeds=2, progress=False, log_every=32))
    last = result.metrics[-1]
    for name in ("loss", "actor_loss", "q_mean"):
        values = np.asarray(last[name])
        assert values.shape == (2,) and np.isfinite(values).all(), name
    assert last["loss"][0] != last["loss"][1]  # two agents, two seeds
