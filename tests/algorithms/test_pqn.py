"""PQN: Q(lambda) targets and TD loss by hand, the epsilon schedule and epsilon-greedy
actions, time-limit bootstrapping, the LayerNorm network, config errors, warm starts,
and updates through the driver (finite and deterministic). Learning is in
test_pqn_learning.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import pqn
from jaxrl.algorithms.pqn import losses
from jaxrl.algorithms.pqn.networks import QNetwork
from jaxrl.algorithms.qlearning import epsilon_greedy, linear_epsilon
from jaxrl.config import ConfigError
from jaxrl.returns import q_lambda_targets
from jaxrl.training import driver

TINY = dict(
    num_envs=4,
    num_steps=16,
    num_epochs=2,
    num_minibatches=4,
    hidden_sizes=(32, 32),
    total_steps=4 * 16 * 3,
)


def _algo(env: str = "CartPole-v1", env_and_params=None, **overrides) -> pqn.PQN:
    config = cfg.replace(pqn.default_config(env), **{**TINY, **overrides})
    env_obj, params = env_and_params or (None, None)
    return pqn.make(config, env_obj, params)


# ----------------------------------------------------------------------------- Q(lambda) targets

# A rollout of 5 steps: a termination at t=1, a truncation at t=2, then two ordinary steps.
REWARD = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
TERMINATED = np.array([0, 1, 0, 0, 0], bool)
TRUNCATED = np.array([0, 0, 1, 0, 0], bool)
NEXT_Q = np.array([10.0, 20.0, 30.0, 40.0, 50.0], np.float32)  # max Q of the next observation
GAMMA = 0.9


@pytest.mark.parametrize(
    "q_lambda, expected",
    [
        # lambda = 0: one-step targets r + gamma * (1 - term) * next_q.
        (0.0, [1 + 0.9 * 10, 2.0, 3 + 0.9 * 30, 4 + 0.9 * 40, 5 + 0.9 * 50]),
        # lambda = 1: discounted return to the episode's (or rollout's) end, bootstrapped
        # there: t=0 reaches the termination (1 + 0.9 * 2); t=3 and t=4 the rollout's end.
        (1.0, [1 + 0.9 * 2, 2.0, 3 + 0.9 * 30, 4 + 0.9 * (5 + 0.9 * 50), 5 + 0.9 * 50]),
        # lambda = 0.5: G_t = r + gamma * (next_q + 0.5 * (G_{t+1} - next_q)) inside an
        # episode; G_2 bootstraps fully from its truncation, G_1 stops at its termination.
        (0.5, [1 + 0.9 * (10 + 0.5 * (2 - 10)), 2.0, 30.0, 4 + 0.9 * (40 + 0.5 * 10), 50.0]),
    ],
)
def test_q_lambda_targets_hand_computed(q_lambda, expected):
    targets = q_lambda_targets(
        jnp.asarray(REWARD), TERMINATED, TRUNCATED, jnp.asarray(NEXT_Q), GAMMA, q_lambda
    )
    np.testing.assert_allclose(targets, expected, rtol=1e-6)
    # The same numbers with an environment axis: (T, B) columns are independent.
    batched = q_lambda_targets(
        jnp.stack([REWARD, REWARD[::-1]], 1),
        np.stack([TERMINATED, np.zeros(5, bool)], 1),
        np.stack([TRUNCATED, np.zeros(5, bool)], 1),
        jnp.stack([NEXT_Q, NEXT_Q], 1),
        GAMMA,
        q_lambda,
    )
    np.testing.assert_allclose(batched[:, 0], expected, rtol=1e-6)


def test_td_loss_hand_computed_and_targets_get_no_gradient():
    q, g = jnp.array([1.0, 2.0]), jnp.array([2.0, 0.0])
    assert float(losses.td_loss(q, g)) == pytest.approx(0.5 * (1 + 4) / 2)
    grad_q, grad_g = jax.grad(losses.td_loss, argnums=(0, 1))(q, g)
    np.testing.assert_allclose(grad_q, [(1 - 2) / 2, (2 - 0) / 2])  # (q - g) / n
    np.testing.assert_allclose(grad_g, [0.0, 0.0])


# ----------------------------------------------------------------------------- exploration


def test_linear_epsilon_schedule():
    eps = lambda step, decay=0.2: float(linear_epsilon(step, 100, 1.0, 0.05, decay))  # noqa: E731
    assert eps(0) == pytest.approx(1.0)
    assert eps(10) == pytest.approx(1.0 - 0.95 * 0.5)  # half of the 20 decay updates
    assert eps(20) == pytest.approx(0.05)
    assert eps(99) == pytest.approx(0.05)
    assert eps(0, decay=0.0) == pytest.approx(0.05)  # no decay: eps_end from the start


def test_epsilon_greedy_explores_at_rate_epsilon():
    n, num_actions = 20_000, 4
    q = jnp.tile(jnp.array([0.0, 3.0, 1.0, 2.0]), (n, 1))  # greedy action: 1
    key = jax.random.key(0)
    np.testing.assert_array_equal(epsilon_greedy(key, q, 0.0), 1)
    counts = np.bincount(np.asarray(epsilon_greedy(key, q, 1.0)), minlength=num_actions) / n
    np.testing.assert_allclose(counts, 0.25, atol=0.015)
    # epsilon = 0.4: the greedy action with 0.6 + 0.4 / 4, each other one with 0.1.
    counts = np.bincount(np.asarray(epsilon_greedy(key, q, 0.4)), minlength=num_actions) / n
    np.testing.assert_allclose(counts, [0.1, 0.7, 0.1, 0.1], atol=0.015)


# ----------------------------------------------------------------------------- time limits


def _constant_q(state: pqn.PQNState, value: float) -> pqn.PQNState:
    """The state with a Q-network that returns `value` for every observation and action."""
    params = jax.tree.map(lambda x: x, state.params)
    head = params["params"]["q_head"]
    params["params"]["q_head"] = {
        "kernel": jnp.zeros_like(head["kernel"]),
        "bias": jnp.full_like(head["bias"], value),
    }
    return state.replace(params=params)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_truncated_steps_bootstrap_from_final_observation(bootstrap):
    """With the bootstrap a time limit's target is r + gamma * max Q(final obs); without
    it, a time limit is terminal (target r), as purejaxql does."""
    env_and_params = envs.make("CartPole-v1", max_steps_in_episode=5)
    algo = _algo(
        env_and_params=env_and_params, num_envs=2, num_steps=12, bootstrap_truncation=bootstrap
    )
    state = _constant_q(algo.init(jax.random.key(0), algo.hyperparams()), 3.0)
    _, traj, next_q, finished = algo._rollout(state, 0.5)
    # CartPole does not fall within 5 steps of a near-upright start: every episode ends
    # by its time limit at steps 5 and 10 (indices 4 and 9).
    done = np.asarray(finished.done)
    assert done[4].all() and done[9].all() and done.sum() == 4
    np.testing.assert_allclose(next_q, 3.0)
    hp = state.hparams
    targets = np.asarray(
        q_lambda_targets(
            traj.reward, traj.terminated, traj.truncated, next_q, hp.gamma, hp.q_lambda
        )
    )
    scale = algo.config.reward_scale
    if bootstrap:
        assert not np.asarray(traj.terminated).any()
        np.testing.assert_array_equal(traj.truncated, done)
        np.testing.assert_allclose(targets[done], scale + 0.99 * 3.0, rtol=1e-6)
    else:
        np.testing.assert_array_equal(traj.terminated, done)
        assert not np.asarray(traj.truncated).any()
        np.testing.assert_allclose(targets[done], scale, rtol=1e-6)


def test_next_q_reads_final_observations_only_at_time_limits():
    """The same rollout with and without the bootstrap: next_q differs only at the steps a
    time limit cut, where it is Q of the true last observation, not of the reset one."""
    env_and_params = envs.make("CartPole-v1", max_steps_in_episode=5)
    rollouts = []
    for bootstrap in (True, False):
        algo = _algo(
            env_and_params=env_and_params, num_envs=2, num_steps=12, bootstrap_truncation=bootstrap
        )
        state = algo.init(jax.random.key(0), algo.hyperparams())
        rollouts.append(algo._rollout(state, 0.5))
    (_, traj, with_bootstrap, finished), (_, _, without, _) = rollouts
    done = np.asarray(finished.done)
    np.testing.assert_allclose(
        np.asarray(with_bootstrap)[~done], np.asarray(without)[~done], rtol=1e-6
    )
    assert (np.abs(np.asarray(with_bootstrap)[done] - np.asarray(without)[done]) > 1e-4).all()
    # Within an episode, next_q is the max Q of the next step's observation.
    obs = np.asarray(traj.obs[1:5])  # (4 steps, 2 envs, 4)
    q_obs = np.asarray(algo.network.apply(state.params, obs.reshape(8, 4)).max(-1)).reshape(4, 2)
    np.testing.assert_allclose(np.asarray(without)[0:4], q_obs, rtol=1e-5)


# ----------------------------------------------------------------------------- network


def test_network_has_layer_norm_params_only_when_asked():
    x = jax.random.normal(jax.random.key(0), (8, 4))
    for norm, count in (("layer_norm", 2), ("none", 0)):
        net = QNetwork(action_dim=2, hidden_sizes=(16, 16), norm=norm)
        params = net.init(jax.random.key(1), x)["params"]
        assert sum(name.startswith("LayerNorm") for name in params) == count, params.keys()
        # At initialisation (zero biases), LayerNorm makes Q invariant to the input's
        # scale; without it, ReLU layers are positively homogeneous: Q(100 x) = 100 Q(x).
        q, q_scaled = net.apply({"params": params}, x), net.apply({"params": params}, 100 * x)
        if norm == "layer_norm":
            np.testing.assert_allclose(q_scaled, q, rtol=1e-3, atol=1e-4)
        else:
            np.testing.assert_allclose(q_scaled, 100 * q, rtol=1e-4, atol=1e-4)


def test_conv_torso_on_minatar_images():
    """The "conv" torso: a 3x3 valid convolution over (10, 10, C) images, then the MLP
    (a whole conv update runs in test_pqn_learning.py's Breakout test)."""
    obs = jax.random.bernoulli(jax.random.key(0), 0.1, (5, 10, 10, 4))  # MinAtar's layout
    net = QNetwork(action_dim=3, hidden_sizes=(32,), torso="conv", conv_channels=8)
    variables = net.init(jax.random.key(1), obs)
    layers = variables["params"]
    assert layers["Conv_0"]["kernel"].shape == (3, 3, obs.shape[-1], 8)
    assert layers["Dense_0"]["kernel"].shape == (8 * 8 * 8, 32)  # 10x10 -> 8x8 valid
    assert set(layers) == {"Conv_0", "LayerNorm_0", "Dense_0", "LayerNorm_1", "q_head"}
    assert net.apply(variables, obs).shape == (5, 3)


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"num_minibatches": 7}, "num_minibatches"),
        ({"eps_start": 0.1, "eps_end": 0.2}, "eps_end"),
        ({"gamma": 1.5}, "gamma"),
        ({"q_lambda": -0.1}, "q_lambda"),
        ({"total_steps": 32}, "total_steps"),
        ({"eps_fraction": 2.0}, "eps_fraction"),
        ({"norm": "batch_norm"}, "norm"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"lr": 0.0}, "lr"),
    ],
)
def test_bad_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"invalid {field}="):
        _algo(**overrides)


def test_continuous_actions_and_conv_on_vectors_are_refused():
    with pytest.raises(ConfigError, match=r"invalid env='Pendulum-v1'.*Discrete action space"):
        _algo("Pendulum-v1")
    with pytest.raises(ConfigError, match=r"invalid network='conv'.*\(4,\)"):
        _algo(network="conv")


def test_sweep_overrides_are_validated():
    algo = _algo()
    with pytest.raises(ConfigError, match="eps_end"):
        algo.hyperparams(eps_end=1.0, eps_start=0.5)
    assert float(algo.hyperparams(lr=3e-4).lr) == pytest.approx(3e-4)


# ----------------------------------------------------------------------------- warm start


def test_warm_start_uses_given_params_and_refuses_other_shapes():
    algo = _algo()
    given = algo.init(jax.random.key(1), algo.hyperparams()).params
    state = algo.init(jax.random.key(0), algo.hyperparams(), params=given)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(given), strict=True):
        np.testing.assert_array_equal(a, b)
    other = _algo(hidden_sizes=(8,))
    with pytest.raises(ConfigError, match="params"):
        other.init(jax.random.key(0), other.hyperparams(), params=given)


# ----------------------------------------------------------------------------- the driver


def _train(seed: int) -> driver.TrainResult:
    return driver.train(
        _algo(), driver.RunConfig(num_seeds=2, seed=seed, log_every=64, progress=False)
    )


def test_updates_through_the_driver_are_finite_and_deterministic():
    a, b = _train(0), _train(0)
    assert a.summary["num_agents"] == 2 and int(a.state.update_step[0]) == 3
    for row in a.metrics:
        for name in ("loss", "q_mean", "epsilon", "lr", "episode_return", "episode_length"):
            assert np.isfinite(row[name]).all(), (name, row)
    first = a.metrics[0]
    np.testing.assert_allclose(first["epsilon"], [1.0, 1.0])  # eps_start at the first update
    np.testing.assert_allclose(first["lr"], [1e-4, 1e-4], rtol=1e-6)  # not yet annealed
    assert a.summary["params_fingerprint"] == b.summary["params_fingerprint"]
    # The two agents of a run are different seeds: different parameters, different play.
    kernel = np.asarray(a.state.params["params"]["q_head"]["kernel"])
    assert not np.allclose(kernel[0], kernel[1])
