"""Behaviour cloning (`jaxrl/algorithms/bc/`, losses in
`jaxrl/algorithms/behaviour_cloning.py`): the losses against hand computations, the
config's errors, one step of each action kind by hand, and (slow) cloning a scripted
expert on CartPole (discrete) and Pendulum (continuous).

Where the learning thresholds come from (4 seeds, this test's first run, on a busy 2-core
CPU): the scripted CartPole expert scores 500 in every episode and the cloned policies
scored 500 on every seed after 1,000 and 2,000 gradient steps; the scripted Pendulum
expert's episodes average about -150 and the clones ended between -98 and -186 (mean
-147) after 3,000 steps, uniformly random actions about -1,200. The thresholds sit below
the worst seed: CartPole's mean at least 400, Pendulum's mean within the expert's return
again (at least twice the dataset's mean return, about -300), far above random.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import config as cfg
from jaxrl import datasets, envs
from jaxrl.algorithms import behaviour_cloning as bcl
from jaxrl.algorithms.bc import BC, BCConfig
from jaxrl.algorithms.td3_bc import losses as td3_bc_losses
from jaxrl.datasets import collect

TINY = dict(total_steps=40, eval_interval=20, eval_episodes=1, batch_size=8, hidden_sizes=(16,))


# ----------------------------------------------------------------------------- scripted experts


def pendulum_expert(obs, carry, reset, key):
    """Energy pumping, then a PD controller near the top (Pendulum: theta'' = 15 sin theta
    + 3u, so E = theta'^2 / 2 + 15 cos theta is 15 upright at rest)."""
    c, s, w = obs[:, 0], obs[:, 1], obs[:, 2]
    energy = 0.5 * w**2 + 15.0 * c
    pd = -(12.0 * jnp.arctan2(s, c) + 2.0 * w)
    pump = 0.5 * (15.0 - energy) * jnp.sign(w + 1e-3)
    return jnp.clip(jnp.where(c > 0.9, pd, pump), -2.0, 2.0)[:, None], carry


def cartpole_expert(obs, carry, reset, key):
    """Push towards where the pole falls (its angle plus half its angular velocity)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(jnp.int32), carry


def expert_dataset(directory, env_id: str, policy, steps: int, num_envs: int = 4) -> str:
    env, params = envs.make(env_id)
    data = collect.rollout(env, params, policy, lambda n: None, jax.random.key(0), steps, num_envs)
    return str(datasets.save(data.with_metadata(env=env_id), directory / f"{env_id}.npz"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bc")


@pytest.fixture(scope="module")
def pendulum_path(data_dir):
    return expert_dataset(data_dir, "Pendulum-v1", pendulum_expert, 200, 2)


@pytest.fixture(scope="module")
def cartpole_path(data_dir):
    return expert_dataset(data_dir, "CartPole-v1", cartpole_expert, 600, 1)


def make(env_id: str, path: str, **overrides) -> BC:
    return BC.make(cfg.replace(BCConfig(env=env_id, dataset=path), **{**TINY, **overrides}))


# ----------------------------------------------------------------------------- losses


def test_mse_bc_loss_by_hand():
    pi = jnp.array([[0.5, -1.0], [0.0, 0.2]])
    a = jnp.array([[0.0, -1.0], [1.0, 0.0]])
    # Squared errors 0.25, 0, 1, 0.04: their mean over batch and dimensions.
    assert float(bcl.mse_bc_loss(pi, a)) == pytest.approx(1.29 / 4)
    # d/dpi = 2 (pi - a) / 4.
    grad = jax.grad(bcl.mse_bc_loss)(pi, a)
    np.testing.assert_allclose(grad, [[0.25, 0.0], [-0.5, 0.1]], rtol=1e-6)


def test_td3_bc_behaviour_term_is_the_shared_loss():
    pi, a = jnp.array([[0.5, -0.5], [0.1, 0.9]]), jnp.array([[0.0, 0.5], [-0.3, 1.0]])
    alone = td3_bc_losses.td3_bc_actor_loss(jnp.array([3.0, 1.0]), pi, a, 0.0)
    assert float(alone) == float(bcl.mse_bc_loss(pi, a))


def test_cross_entropy_bc_loss_by_hand():
    # Row 1: softmax([0, log 3]) = [1/4, 3/4], the data took 0: -log(1/4) = log 4.
    # Row 2: uniform over three actions: log 3.
    logits = jnp.array([[0.0, math.log(3.0), -jnp.inf], [1.0, 1.0, 1.0]])
    loss = bcl.cross_entropy_bc_loss(logits, jnp.array([0, 2]))
    assert float(loss) == pytest.approx((math.log(4.0) + math.log(3.0)) / 2, rel=1e-6)
    # Large logits stay finite (log-sum-exp, not a log of a softmax that underflows).
    far = bcl.cross_entropy_bc_loss(jnp.array([[1000.0, 0.0]]), jnp.array([1]))
    assert float(far) == pytest.approx(1000.0)
    # The gradient is softmax - one_hot(a), over the batch size.
    grad = jax.grad(bcl.cross_entropy_bc_loss)(jnp.array([[0.0, math.log(3.0)]]), jnp.array([0]))
    np.testing.assert_allclose(grad, [[0.25 - 1.0, 0.75]], rtol=1e-6)


def test_action_accuracy_counts_greedy_agreement():
    logits = jnp.array([[0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    assert float(bcl.action_accuracy(logits, jnp.array([1, 1, 1]))) == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- the learner


def test_minatar_presets_match_cql_discretes():
    """bc_breakout_replay and cql_discrete_breakout_replay compare on equal terms: the
    same network, batch, budget and learning rate (the actor's, the critic's)."""
    from jaxrl.algorithms.bc.config import PRESETS
    from jaxrl.algorithms.cql.config import DISCRETE_PRESETS

    for env_id, preset in DISCRETE_PRESETS.items():
        if env_id.endswith("-MinAtar"):
            ours = dict(PRESETS[env_id])
            assert ours.pop("actor_lr") == preset["critic_lr"]
            assert ours == {k: v for k, v in preset.items() if k != "critic_lr"}


@pytest.mark.parametrize(
    "env_id, overrides, match",
    [
        ("Pendulum-v1", dict(network="conv"), r"invalid network='conv': .*continuous"),
        ("CartPole-v1", dict(network="conv"), r"invalid network='conv': .*needs \(H, W, C\)"),
        ("CartPole-v1", dict(network="cnn"), r"invalid network='cnn': must be one of"),
        ("CartPole-v1", dict(conv_channels=0), r"invalid conv_channels=0: must be > 0"),
        ("CartPole-v1", dict(batch_size=10_000), r"invalid batch_size=10000: .*500 transitions"),
    ],
)
def test_config_errors_name_the_field(pendulum_path, cartpole_path, env_id, overrides, match):
    path = pendulum_path if env_id == "Pendulum-v1" else cartpole_path
    with pytest.raises(cfg.ConfigError, match=match):
        make(env_id, path, **overrides)


def one_step(algo: BC, loss_fn):
    """One gradient step on a batch: the batch, the loss before (by `loss_fn`), the step's
    logged loss, the loss after, and the new parameters."""
    state = algo.init(jax.random.key(0), algo.hyperparams())
    batch = jax.jit(algo.sample_batch)(state.dataset, jax.random.key(1), state.hparams)

    def loss(params):
        return loss_fn(algo.actor.apply(params["actor"], batch.observation), batch.action)

    params, _, metrics = jax.jit(algo.learn_step)(
        state.params, state.learner, batch, state.hparams, jax.random.key(2), jnp.int32(0)
    )
    return (
        state,
        batch,
        float(loss(state.params)),
        float(metrics["loss"]),
        float(loss(params)),
        params,
    )


def test_one_discrete_step_descends_the_cross_entropy(cartpole_path):
    algo = make("CartPole-v1", cartpole_path)
    assert algo.action_kind == "discrete"
    _, batch, before, logged, after, params = one_step(algo, bcl.cross_entropy_bc_loss)
    assert logged == pytest.approx(before, rel=1e-6) and after < before
    greedy = algo.policy(params, batch.observation, jax.random.key(3), True)
    assert greedy.dtype == jnp.int32 and greedy.shape == (8,)
    sampled = algo.policy(params, batch.observation, jax.random.key(3), False)
    assert sampled.dtype == jnp.int32 and set(np.asarray(sampled).tolist()) <= {0, 1}


def test_one_continuous_step_descends_the_squared_error(pendulum_path):
    algo = make("Pendulum-v1", pendulum_path)
    assert algo.action_kind == "continuous"
    state, batch, before, logged, after, params = one_step(algo, bcl.mse_bc_loss)
    assert float(jnp.max(jnp.abs(batch.action))) <= 1.0  # the dataset's actions, in [-1, 1]
    assert logged == pytest.approx(before, rel=1e-6) and after < before
    # Acting maps the actor's [-1, 1] onto Pendulum's [-2, 2].
    action, _ = algo.act(state.replace(params=params), batch.observation, None, None, None)
    assert action.shape == (8, 1) and float(jnp.max(jnp.abs(action))) <= 2.0


# ----------------------------------------------------------------------------- learning (slow)

SEEDS = 4


def cloned_returns(env_id: str, path: str, steps: int) -> tuple[np.ndarray, float]:
    summary = jaxrl.train(
        "bc",
        env=env_id,
        dataset=path,
        total_steps=steps,
        eval_interval=1_000,
        hidden_sizes=(64, 64),
        actor_lr=1e-3,
        num_seeds=SEEDS,
        seed=0,
        progress=False,
    ).summary
    return np.asarray(summary["final_eval_returns_per_agent"]), summary[
        "dataset_behaviour_return_mean"
    ]


@pytest.mark.slow  # ~20 s
def test_cloning_a_cartpole_expert(data_dir):
    path = expert_dataset(data_dir, "CartPole-v1", cartpole_expert, 1_000, 4)
    returns, behaviour = cloned_returns("CartPole-v1", path, 2_000)
    print("bc CartPole", returns.tolist(), "expert", behaviour)
    assert behaviour == 500.0
    assert returns.mean() >= 400.0, returns


@pytest.mark.slow  # ~20 s
def test_cloning_a_pendulum_expert(data_dir):
    path = expert_dataset(data_dir, "Pendulum-v1", pendulum_expert, 1_000, 4)
    returns, behaviour = cloned_returns("Pendulum-v1", path, 3_000)
    print("bc Pendulum", returns.tolist(), "expert", behaviour)
    assert returns.mean() >= 2.0 * behaviour, (returns, behaviour)
