"""The shared on-policy actor-critics (jaxrl/nn/actor_critic.py): PPO's parameter trees
are pinned (saved runs and params_fingerprints depend on the names and shapes), and the
heads build the distributions their flags ask for.

The lists below were printed from the networks as they were in
`jaxrl/algorithms/ppo/networks.py` before they moved to `jaxrl.nn`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algorithms.ppo import train as ppo_train
from jaxrl.nn import ActorCritic, Categorical, DiagGaussian, RecurrentActorCritic, TanhGaussian

FEED_FORWARD_DISCRETE = [  # ActorCritic(2, discrete=True) on obs (4,)
    ("params/actor_head/Dense_0/bias", (2,)),
    ("params/actor_head/Dense_0/kernel", (64, 2)),
    ("params/actor_torso/Dense_0/bias", (64,)),
    ("params/actor_torso/Dense_0/kernel", (4, 64)),
    ("params/actor_torso/Dense_1/bias", (64,)),
    ("params/actor_torso/Dense_1/kernel", (64, 64)),
    ("params/critic_head/Dense_0/bias", (1,)),
    ("params/critic_head/Dense_0/kernel", (64, 1)),
    ("params/critic_torso/Dense_0/bias", (64,)),
    ("params/critic_torso/Dense_0/kernel", (4, 64)),
    ("params/critic_torso/Dense_1/bias", (64,)),
    ("params/critic_torso/Dense_1/kernel", (64, 64)),
]
FEED_FORWARD_CONTINUOUS = [  # ActorCritic(1, discrete=False, tanh_squash=True) on obs (3,)
    ("params/actor_head/Dense_0/bias", (1,)),
    ("params/actor_head/Dense_0/kernel", (64, 1)),
    ("params/actor_head/log_std", (1,)),
    ("params/actor_torso/Dense_0/bias", (64,)),
    ("params/actor_torso/Dense_0/kernel", (3, 64)),
    ("params/actor_torso/Dense_1/bias", (64,)),
    ("params/actor_torso/Dense_1/kernel", (64, 64)),
    ("params/critic_head/Dense_0/bias", (1,)),
    ("params/critic_head/Dense_0/kernel", (64, 1)),
    ("params/critic_torso/Dense_0/bias", (64,)),
    ("params/critic_torso/Dense_0/kernel", (3, 64)),
    ("params/critic_torso/Dense_1/bias", (64,)),
    ("params/critic_torso/Dense_1/kernel", (64, 64)),
]
RECURRENT = [  # RecurrentActorCritic(2, True, hidden_sizes=(64,), rnn_hidden_size=16), obs (4,)
    ("params/actor_head/Dense_0/bias", (2,)),
    ("params/actor_head/Dense_0/kernel", (64, 2)),
    ("params/actor_torso/Dense_0/bias", (64,)),
    ("params/actor_torso/Dense_0/kernel", (16, 64)),
    ("params/critic_head/Dense_0/bias", (1,)),
    ("params/critic_head/Dense_0/kernel", (64, 1)),
    ("params/critic_torso/Dense_0/bias", (64,)),
    ("params/critic_torso/Dense_0/kernel", (16, 64)),
    ("params/embed/Dense_0/bias", (64,)),
    ("params/embed/Dense_0/kernel", (4, 64)),
    ("params/gru/GRUCell_0/hn/bias", (16,)),
    ("params/gru/GRUCell_0/hn/kernel", (16, 16)),
    ("params/gru/GRUCell_0/hr/kernel", (16, 16)),
    ("params/gru/GRUCell_0/hz/kernel", (16, 16)),
    ("params/gru/GRUCell_0/in/bias", (16,)),
    ("params/gru/GRUCell_0/in/kernel", (64, 16)),
    ("params/gru/GRUCell_0/ir/bias", (16,)),
    ("params/gru/GRUCell_0/ir/kernel", (64, 16)),
    ("params/gru/GRUCell_0/iz/bias", (16,)),
    ("params/gru/GRUCell_0/iz/kernel", (64, 16)),
]


def _paths_and_shapes(params) -> list[tuple[str, tuple[int, ...]]]:
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return sorted(
        (jax.tree_util.keystr(path, simple=True, separator="/"), tuple(leaf.shape))
        for path, leaf in leaves
    )


def _init(network, *inputs):
    return jax.eval_shape(network.init, jax.random.key(0), *inputs)


def test_feed_forward_parameter_trees_are_unchanged():
    discrete = _init(ActorCritic(2, discrete=True), jnp.zeros((5, 4)))
    continuous = _init(ActorCritic(1, discrete=False, tanh_squash=True), jnp.zeros((5, 3)))
    assert _paths_and_shapes(discrete) == FEED_FORWARD_DISCRETE
    assert _paths_and_shapes(continuous) == FEED_FORWARD_CONTINUOUS


def test_recurrent_parameter_tree_is_unchanged():
    network = RecurrentActorCritic(2, discrete=True, hidden_sizes=(64,), rnn_hidden_size=16)
    params = _init(network, jnp.zeros((5, 16)), jnp.zeros((1, 5, 4)), jnp.zeros((1, 5), bool))
    assert _paths_and_shapes(params) == RECURRENT


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({}, FEED_FORWARD_DISCRETE),
        ({"recurrent": True, "hidden_sizes": (64,), "rnn_hidden_size": 16}, RECURRENT),
    ],
)
def test_ppo_builds_these_networks_for_cartpole(overrides, expected):
    algo = ppo_train.make(jaxrl.make_config("ppo", "CartPole-v1", num_envs=4, **overrides))
    state = jax.eval_shape(algo.init, jax.random.key(0), algo.hyperparams())
    assert _paths_and_shapes(state.params) == expected


def test_heads_build_the_distribution_the_flags_ask_for():
    obs = jnp.ones((3, 4))
    for kwargs, kind in [
        ({"discrete": True}, Categorical),
        ({"discrete": False}, DiagGaussian),
        ({"discrete": False, "tanh_squash": True}, TanhGaussian),
    ]:
        network = ActorCritic(2, hidden_sizes=(8,), init_log_std=-0.5, **kwargs)
        params = network.init(jax.random.key(0), obs)
        dist, value = network.apply(params, obs)
        assert isinstance(dist, kind) and value.shape == (3,)
        # Zero-initialised biases and the same torso input: every row is the same.
        np.testing.assert_array_equal(value, jnp.full(3, value[0]))
        if not kwargs["discrete"]:
            np.testing.assert_array_equal(params["params"]["actor_head"]["log_std"], [-0.5] * 2)
        # `policy` and `value` are the two halves of `__call__`.
        np.testing.assert_array_equal(network.apply(params, obs, method="value"), value)


def test_recurrent_heads_can_be_deeper_than_the_embedding():
    """`head_sizes` (PPO's `rnn_head_sizes`) sizes each head's torso after the GRU; the
    embedding before it keeps `hidden_sizes` (the Craftax baselines' shape, at width 8)."""
    network = RecurrentActorCritic(
        2, discrete=True, hidden_sizes=(8,), rnn_hidden_size=16, head_sizes=(8, 8)
    )
    params = _init(network, jnp.zeros((5, 16)), jnp.zeros((1, 5, 4)), jnp.zeros((1, 5), bool))
    shapes = dict(_paths_and_shapes(params))
    assert (
        shapes["params/embed/Dense_0/kernel"] == (4, 8)
        and "params/embed/Dense_1/kernel" not in shapes
    )
    for torso in ("actor_torso", "critic_torso"):
        assert shapes[f"params/{torso}/Dense_0/kernel"] == (16, 8)
        assert shapes[f"params/{torso}/Dense_1/kernel"] == (8, 8)
    algo = ppo_train.make(
        jaxrl.make_config(
            "ppo",
            "CartPole-v1",
            num_envs=4,
            recurrent=True,
            hidden_sizes=(8,),
            rnn_hidden_size=16,
            rnn_head_sizes=(8, 8),
        )
    )
    state = jax.eval_shape(algo.init, jax.random.key(0), algo.hyperparams())
    assert dict(_paths_and_shapes(state.params)) == shapes
