"""The shared replay-based agent (`jaxrl/algorithms/offpolicy.py`), tested with a tiny
linear Q-learner so that what is checked is the plumbing, not an algorithm: what goes
into replay, when learning starts, how many gradient steps run, target updates, the
config's errors, and resume through the driver."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.offpolicy import OffPolicy, OffPolicyConfig
from jaxrl.replay import buffer, sum_tree
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train

LinearHParams = cfg.make_hyperparams_class("LinearHParams", ("lr", "gamma", "tau"))


@dataclasses.dataclass(frozen=True)
class LinearConfig(OffPolicyConfig):
    lr: float = 1e-2
    """SGD learning rate."""


class LinearQ(OffPolicy):
    """Q(s, .) = s W + b, greedy exploration: the smallest agent the base can run."""

    name = "linear-q"
    sweepable = ("lr", "gamma", "tau")
    action_kind = "discrete"

    def hyperparams(self, **overrides):
        return cfg.hyperparams_from(
            cfg.replace(self.config, **overrides), LinearHParams, self.sweepable
        )

    def init_learner(self, key, hparams, params):
        if params is None:
            w = 0.01 * jax.random.normal(key, (self.obs_shape[0], self.action_dim))
            params = {"w": w, "b": jnp.zeros((self.action_dim,))}
        return params, {"target": params, "opt": optax.sgd(1.0).init(params)}

    def _q(self, params, obs):
        return obs.astype(jnp.float32) @ params["w"] + params["b"]

    def explore(self, params, learner, hparams, obs, key, update_step):
        return jnp.zeros(obs.shape[0], jnp.int32)  # always action 0: randomness is the base's

    def learn_step(self, params, learner, batch, weights, hparams, key, grad_step):
        target = offpolicy.td_target(
            batch, self._q(learner["target"], batch.next_observation).max(-1)
        )

        def loss_fn(p):
            q = jnp.take_along_axis(self._q(p, batch.observation), batch.action[:, None], -1)[:, 0]
            return jnp.mean(weights * (q - target) ** 2), q - target

        (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt = optax.sgd(hparams.lr).update(grads, learner["opt"])
        params = optax.apply_updates(params, updates)
        tgt = offpolicy.update_target(
            learner["target"], params, hparams.tau, grad_step, self.config.target_update_interval
        )
        return params, {"target": tgt, "opt": opt}, jnp.abs(td), {"loss": loss}

    def act(self, state, obs, carry, reset, key, deterministic=True):
        return self._q(state.params, obs).argmax(-1), carry


def make(**overrides) -> LinearQ:
    base = dict(total_steps=512, num_envs=2, batch_size=8, buffer_size=64, learning_starts=32)
    config = LinearConfig(**{**base, **overrides})
    env, params = envs.make(config.env)
    return LinearQ(config, env, params)


def run_updates(algo: LinearQ, n: int, seed: int = 0):
    state = algo.init(jax.random.key(seed), algo.hyperparams())
    update = jax.jit(algo.update)
    rows = []
    for _ in range(n):
        state, metrics = update(state)
        rows.append(jax.device_get(metrics))
    return state, rows


# ----------------------------------------------------------------------------- plumbing


def test_updates_fill_replay_and_learn_only_after_learning_starts():
    algo = make(train_frequency=4, gradient_steps=3, learning_starts=24)  # 8 env steps/update
    state0 = algo.init(jax.random.key(0), algo.hyperparams())
    state, rows = run_updates(algo, 5)
    assert int(state.replay.size) == 5 * 4  # one ring row per step of the 2 environments
    # After update u, (u+1) * 8 env steps are done: learning from the one that reaches 24.
    assert [float(r["loss"]) != 0.0 for r in rows] == [False, False, True, True, True]
    assert int(state.grad_steps) == 3 * 3
    assert int(state.update_step) == 5
    assert not np.allclose(state.params["w"], state0.params["w"])


def test_random_actions_until_learning_starts_then_the_agents_own():
    algo = make(train_frequency=8, learning_starts=32)  # 16 env steps/update
    state, _ = run_updates(algo, 4)
    actions = np.asarray(state.replay.items.action)  # rows in time order (ring not wrapped)
    assert set(actions[:16].ravel()) == {0, 1}  # updates 0-1: uniform random
    assert set(actions[16:32].ravel()) == {0}  # updates 2-3: explore() always says 0


def test_transitions_keep_the_true_next_observation_and_the_done_flags():
    algo = make(train_frequency=32, learning_starts=1_000, total_steps=2048, buffer_size=128)
    state, _ = run_updates(algo, 1)
    items = jax.tree.map(lambda x: x[:32], jax.device_get(state.replay.items))  # written rows
    done = items.terminated | items.truncated
    assert done.any()  # random CartPole episodes last ~20 steps
    same = np.all(items.next_observation[:-1] == items.observation[1:], axis=-1)
    # Within an episode the next observation is the next row's; at an end it is the
    # final observation, not the reset one the environment continues from.
    assert same[~done[:-1]].all()
    assert not same[done[:-1]].any()


def test_time_limits_stored_as_terminal_without_bootstrap_truncation():
    algo = make(bootstrap_truncation=False)
    env, params = envs.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=5)  # every episode ends by truncation
    algo = LinearQ(algo.config, env, params)
    state, _ = run_updates(algo, 8)
    items = jax.device_get(state.replay.items)
    assert not items.truncated.any()
    assert items.terminated.sum() >= 2


def test_prioritised_replay_updates_priorities_of_sampled_slots():
    algo = make(prioritised=True, learning_starts=0, gradient_steps=2)
    state, rows = run_updates(algo, 6)
    leaves = np.asarray(sum_tree.leaves(state.replay.tree))
    written = int(buffer.num_items(state.replay.buffer))
    assert (leaves[:written] > 0).all() and (leaves[written:] == 0).all()
    assert len(set(np.round(leaves[:written], 6))) > 2  # not all the initial max priority
    assert all(np.isfinite(r["loss"]) for r in rows)


def test_update_target_is_polyak_every_interval_steps():
    target, online = {"w": jnp.array([0.0])}, {"w": jnp.array([1.0])}
    after = [
        float(offpolicy.update_target(target, online, 0.25, jnp.int32(step), 2)["w"][0])
        for step in range(4)
    ]
    assert after == [0.0, 0.25, 0.0, 0.25]  # steps 1 and 3 are the 2nd and 4th: due


def test_config_errors_name_the_field():
    cases = {
        "batch_size": dict(batch_size=128, buffer_size=64),
        "learning_starts": dict(learning_starts=512),
        "n_step": dict(n_step=40, buffer_size=64),  # 32 rows per environment
        "tau": dict(tau=0.0),
        "buffer_size": dict(buffer_size=1),
        "gamma": dict(gamma=1.5),
    }
    for field, overrides in cases.items():
        with pytest.raises(cfg.ConfigError, match=field):
            make(**overrides)


def test_a_continuous_environment_is_refused_for_a_discrete_agent():
    config = LinearConfig(env="Pendulum-v1", total_steps=512, learning_starts=32)
    env, params = envs.make("Pendulum-v1")
    with pytest.raises(cfg.ConfigError, match="env='Pendulum-v1'.*Discrete"):
        LinearQ(config, env, params)


# ----------------------------------------------------------------------------- through the driver


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    """The replay buffer is part of the checkpoint: a resumed run samples the same data."""
    algo = make(total_steps=256, train_frequency=4, learning_starts=16)  # 32 updates
    whole = train(algo, RunConfig(num_seeds=2, progress=False, log_every=64))
    run_dir = tmp_path / "run"
    half = make(total_steps=128, train_frequency=4, learning_starts=16)
    train(half, RunConfig(num_seeds=2, run_dir=str(run_dir), progress=False, log_every=64))
    resumed = train(
        algo,
        RunConfig(num_seeds=2, run_dir=str(run_dir), resume=True, progress=False, log_every=64),
    )
    assert tree_fingerprint(resumed.state) == tree_fingerprint(whole.state)
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]
