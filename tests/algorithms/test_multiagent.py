"""IPPO, MAPPO and PQN-VDN (`jaxrl/algorithms/{ippo,mappo,pqn_vdn}`, on the shared
`multiagent_ppo.py`, `jaxrl/nn/multiagent.py` and `jaxrl/losses.py`): the losses against
hand-computed values, the per-agent networks (shared with ids, separate), action masks
(the masked categorical and legal epsilon-greedy by hand; IPPO, MAPPO and PQN-VDN acting
and learning within a mask), each
algorithm and variant through the driver with exact resume, sweeps, the CLI with `jaxrl
eval`, and bad configs; with `-m optional` (jaxmarl installed) IPPO, MAPPO and PQN-VDN
on SMAX scenarios through the adapter and the CLI, within SMAX's legal actions.
Learning on SimpleSpread-MPE: test_multiagent_learning.py (slow)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import algorithms, cli, envs
from jaxrl.algorithms.ippo import ippo_loss
from jaxrl.algorithms.mappo import mappo_loss
from jaxrl.algorithms.multiagent_common import legal_epsilon_greedy, legal_q_values
from jaxrl.algorithms.pqn_vdn import max_q_total, q_total, vdn_td_loss
from jaxrl.algorithms.qlearning import epsilon_greedy
from jaxrl.config import ConfigError
from jaxrl.envs.multiagent import SimpleSpread
from jaxrl.nn import Categorical
from jaxrl.nn.multiagent import Actor, AgentNetwork, Critic, with_agent_ids
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train

PPO_TINY = dict(total_steps=256, num_envs=4, num_steps=16, hidden_sizes=(16,), num_minibatches=2)
VDN_TINY = dict(total_steps=256, num_envs=4, num_steps=16, hidden_sizes=(16,), num_minibatches=2)


# ----------------------------------------------------------------------------- losses
def ppo_inputs():
    return dict(
        log_prob=jnp.log(jnp.array([0.5, 0.25, 0.9])),
        entropy=jnp.array([0.3, 0.5, 9.0]),
        value=jnp.array([1.0, 2.0, 50.0]),
        old_log_prob=jnp.log(jnp.array([0.25, 0.25, 0.1])),  # ratios 2, 1, 9
        old_value=jnp.array([1.0, 2.0, 0.0]),
        advantages=jnp.array([1.0, -2.0, 100.0]),
        returns=jnp.array([2.0, 0.0, 0.0]),
        alive=jnp.array([True, True, False]),  # the third agent has left: it does not count
    )


def agent_loss(loss_fn, normalize=False, **inputs):
    args = {**ppo_inputs(), **inputs}
    return loss_fn(
        *args.values(),
        clip_eps=0.2,
        vf_clip_eps=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
        clip_value=False,
        normalize_advantages=normalize,
    )


@pytest.mark.parametrize("loss_fn", [ippo_loss, mappo_loss])
def test_agent_ppo_loss_matches_hand_computed_values_over_the_agents_alive(loss_fn):
    total, stats = agent_loss(loss_fn)
    # Surrogates: min(2 * 1, 1.2 * 1) = 1.2 and min(1 * -2, 1 * -2) = -2; mean -0.4.
    np.testing.assert_allclose(stats["policy_loss"], 0.4, rtol=1e-6)
    # 0.5 (1 - 2)^2 = 0.5 and 0.5 (2 - 0)^2 = 2: mean 1.25. Entropy: (0.3 + 0.5) / 2.
    np.testing.assert_allclose(stats["value_loss"], 1.25, rtol=1e-6)
    np.testing.assert_allclose(stats["entropy"], 0.4, rtol=1e-6)
    np.testing.assert_allclose(total, 0.4 + 0.5 * 1.25 - 0.01 * 0.4, rtol=1e-6)
    # d/d log_prob: the clipped first entry has no gradient, the second -(r A) / 2 * -1.
    grad = jax.grad(lambda lp: agent_loss(loss_fn, log_prob=lp)[0])(ppo_inputs()["log_prob"])
    np.testing.assert_allclose(grad, [0.0, 1.0, 0.0], atol=1e-6)
    # Advantages normalised over the agents alive: [1, -2] -> [1, -1] (mean -0.5, std 1.5);
    # surrogates 1.2 and -1.
    _, stats = agent_loss(loss_fn, normalize=True)
    np.testing.assert_allclose(stats["policy_loss"], -0.1, rtol=1e-5)


def test_vdn_sums_the_agents_alive_and_its_td_loss_by_hand():
    q_taken = jnp.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    alive = jnp.array([[True, True, False], [True, True, True]])
    np.testing.assert_allclose(q_total(q_taken, alive), [3.0, 3.5])
    q_values = jnp.array([[[1.0, 5.0], [2.0, -1.0], [9.0, 9.0]]])  # (1, N=3, A=2)
    np.testing.assert_allclose(max_q_total(q_values, alive[:1]), [7.0])  # 5 + 2, agent 3 gone
    q_tot, targets = jnp.array([3.0, 1.0]), jnp.array([2.0, 2.0])
    np.testing.assert_allclose(vdn_td_loss(q_tot, targets), 0.5)  # 0.5 * mean(1, 1)
    grads = jax.grad(vdn_td_loss, argnums=(0, 1))(q_tot, targets)
    np.testing.assert_allclose(grads[0], [0.5, -0.5])  # (Q_tot - G) / 2
    np.testing.assert_allclose(grads[1], [0.0, 0.0])  # the targets are held fixed


# ----------------------------------------------------------------------------- networks
def test_agent_ids_are_one_hot_along_the_agent_axis():
    x = jnp.zeros((2, 3, 4))  # (B, N, F)
    out = with_agent_ids(x, agent_axis=1)
    assert out.shape == (2, 3, 7)
    np.testing.assert_array_equal(out[1, :, 4:], np.eye(3))


def test_shared_parameters_with_ids_and_separate_parameters_per_agent():
    obs = jnp.ones((5, 3, 4))  # every agent sees the same observation
    shared = AgentNetwork(Critic((8,)), 3, "shared", (1,), 1)
    params = shared.init(jax.random.key(0), obs)
    kernel = params["params"]["critic_torso"]["Dense_0"]["kernel"]
    assert kernel.shape == (4 + 3, 8)  # one network; inputs extended by the agent ids
    values = shared.apply(params, obs)
    assert values.shape == (5, 3) and len(set(np.asarray(values[0]).tolist())) == 3
    separate = AgentNetwork(Critic((8,)), 3, "separate", (1,), 1)
    params = separate.init(jax.random.key(0), obs)
    assert params["params"]["critic_torso"]["Dense_0"]["kernel"].shape == (3, 4, 8)
    values = separate.apply(params, obs)
    agent_2 = jax.tree.map(lambda p: p[2], params)
    np.testing.assert_allclose(values[:, 2], Critic((8,)).apply(agent_2, obs[:, 2]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"must be one of \['shared', 'separate'\]"):
        AgentNetwork(Critic((8,)), 3, "both", (1,), 1)


def test_recurrent_actor_carries_a_state_per_agent_and_resets_with_the_episode():
    actor = AgentNetwork(Actor(5, (8,), rnn_hidden_size=6), 3, "shared", (1, 2, None), (1, 2), 1)
    carry = jnp.zeros((2, 3, 6))
    obs = jax.random.normal(jax.random.key(1), (4, 2, 3, 7))
    resets = jnp.zeros((4, 2), bool)
    params = actor.init(jax.random.key(0), carry, obs, resets)
    new_carry, dist = actor.apply(params, carry, obs, resets)
    assert new_carry.shape == (2, 3, 6) and dist.logits.shape == (4, 2, 3, 5)
    # A reset at the last step makes it forget the first three.
    reset_last = resets.at[3].set(True)
    _, fresh = actor.apply(params, carry, obs[3:], resets[3:] | True)
    _, late = actor.apply(params, new_carry * 0 + 1.0, obs, reset_last)
    np.testing.assert_allclose(late.logits[3], fresh.logits[0], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- action masks
def test_masked_categorical_is_the_softmax_over_the_legal_actions_by_hand():
    """logits (1, 2, 3) with action 1 illegal: p = softmax(1, 3) = (1, e^2) / (1 + e^2) on
    the legal actions and 0 on the other; log-probs and entropy are those of the two."""
    mask = jnp.array([True, False, True])
    dist = Categorical(jnp.array([1.0, 2.0, 3.0])).masked(mask)
    p0 = 1.0 / (1.0 + np.e**2)
    p2 = 1.0 - p0
    log_prob = jax.vmap(dist.log_prob)(jnp.array([0, 2]))
    np.testing.assert_allclose(log_prob, [np.log(p0), np.log(p2)], rtol=1e-6)
    np.testing.assert_allclose(dist.entropy(), -(p0 * np.log(p0) + p2 * np.log(p2)), rtol=1e-6)
    assert int(dist.mode()) == 2
    # Unmasked, the same logits give three actions' log-probs and a larger entropy.
    assert float(Categorical(jnp.array([1.0, 2.0, 3.0])).entropy()) > float(dist.entropy())
    # Sampling never draws the illegal action and draws the others at p0 and p2.
    draws = np.asarray(jax.vmap(dist.sample)(jax.random.split(jax.random.key(0), 20_000)))
    assert not (draws == 1).any()
    np.testing.assert_allclose((draws == 0).mean(), p0, atol=0.01)
    # Gradients are finite and none reaches the illegal logit.
    grad = jax.grad(lambda x: Categorical(x).masked(mask).entropy())(jnp.array([1.0, 2.0, 3.0]))
    assert np.isfinite(grad).all() and grad[1] == 0.0
    # dH/dx0 for two actions: p0 p2 (log p2 - log p0) = p0 p2 * 2.
    np.testing.assert_allclose(grad[0], p0 * p2 * 2.0, rtol=1e-5)
    # A row with no legal action (nothing to choose) stays finite: uniform.
    empty = Categorical(jnp.array([1.0, 2.0, 3.0])).masked(jnp.zeros(3, bool))
    np.testing.assert_allclose(empty.entropy(), np.log(3.0), rtol=1e-6)
    plain = Categorical(jnp.zeros(3))
    assert plain.masked(None) is plain  # no mask: the distribution itself


class MaskedSpread(SimpleSpread):
    """SimpleSpread whose agents may not take two of their five moves at each step
    (which two turns with the time and the agent), to test action masks without jaxmarl."""

    has_action_mask = True

    def get_obs(self, state, params):
        obs = super().get_obs(state, params)
        agent = jnp.arange(self.num_agents)[:, None]
        action = jnp.arange(5)[None, :]
        obs["action_mask"] = (action + agent + state.time) % 5 >= 2
        return obs


@pytest.mark.parametrize("name", ["ippo", pytest.param("mappo", marks=pytest.mark.slow)])
def test_ippo_and_mappo_act_and_learn_within_the_action_mask(name):
    """Every action of a rollout is legal (a policy ignoring the mask would take an illegal
    one 40% of the time); the loss's entropy is over the three legal actions (a fresh
    policy is near uniform over them: log 3, not log 5); `act` chooses legal actions.
    (The masking is `MultiAgentPPO`'s, the same for both: MAPPO runs with -m slow.)"""
    env = MaskedSpread()
    params = env.default_params
    assert env.observation_space(params).spaces["action_mask"].shape == (3, 5)
    tiny = dict(total_steps=64, num_envs=4, num_steps=16, hidden_sizes=(8,), num_minibatches=1)
    config = jaxrl.make_config(name, "SimpleSpread-MPE", update_epochs=1, **tiny)
    algo = algorithms.get(name).algorithm(config, env, params)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    # One program: the rollout's samples, and the update (the same rollout, then the loss).
    samples, metrics = jax.jit(lambda s: (algo._rollout(s)[1], algo.update(s)[1]))(state)
    mask, action = np.asarray(samples.action_mask), np.asarray(samples.action)
    assert mask.shape == (16, 4, 3, 5) and np.take_along_axis(mask, action[..., None], -1).all()
    assert np.isfinite(metrics["loss"]) and abs(float(metrics["entropy"]) - np.log(3.0)) < 0.05
    obs = jax.tree.map(lambda x: x[None], env.reset(jax.random.key(1), params)[0])
    chosen, _ = algo.act(state, obs, None, jnp.ones((1,), bool), jax.random.key(2))
    assert np.take_along_axis(np.asarray(obs["action_mask"][0]), chosen[0][:, None], -1).all()


def test_q_learning_within_the_legal_actions_by_hand():
    """PQN-VDN's greedy action and bootstrap max are over the legal actions; exploring, it
    draws uniformly from them; without a mask it is plain epsilon-greedy."""
    q = jnp.array([[5.0, 1.0, 3.0, 2.0]] * 4000)
    mask = jnp.array([False, True, True, True])
    np.testing.assert_array_equal(legal_q_values(q, mask).max(-1), 3.0)
    key = jax.random.key(0)
    np.testing.assert_array_equal(legal_epsilon_greedy(key, q, 0.0, mask), 2)
    counts = np.bincount(np.asarray(legal_epsilon_greedy(key, q, 1.0, mask)), minlength=4)
    assert counts[0] == 0 and np.allclose(counts[1:] / 4000, 1 / 3, atol=0.03)
    np.testing.assert_array_equal(
        legal_epsilon_greedy(key, q, 0.3, None), epsilon_greedy(key, q, 0.3)
    )


def test_pqn_vdn_acts_and_learns_within_the_action_mask():
    env = MaskedSpread()
    params = env.default_params
    config = jaxrl.make_config("pqn-vdn", "SimpleSpread-MPE", eps_end=1.0, **VDN_TINY)
    algo = algorithms.get("pqn-vdn").algorithm(config, env, params)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    obs = jax.tree.map(lambda x: x[None], env.reset(jax.random.key(1), params)[0])
    obs = jax.tree.map(lambda x: jnp.repeat(x, 64, axis=0), obs)  # 64 copies, same mask
    reset = jnp.ones((64,), bool)
    for deterministic in (True, False):  # greedy, and uniform over the legal actions
        chosen, _ = algo.act(state, obs, None, reset, jax.random.key(2), deterministic)
        legal = np.take_along_axis(
            np.asarray(obs["action_mask"]), np.asarray(chosen)[..., None], -1
        )
        assert legal.all()
    _, metrics = jax.jit(algo.update)(state)
    assert np.isfinite(metrics["loss"]) and np.isfinite(metrics["q_mean"])


# ----------------------------------------------------------------------------- algorithms
CASES = {
    "ippo": ("ippo", PPO_TINY),
    "ippo-separate": ("ippo", {**PPO_TINY, "parameter_sharing": "separate"}),
    "ippo-recurrent": ("ippo", {**PPO_TINY, "recurrent": True, "rnn_hidden_size": 8}),
    "mappo": ("mappo", PPO_TINY),
    "mappo-recurrent-separate": (
        "mappo",
        {**PPO_TINY, "recurrent": True, "rnn_hidden_size": 8, "parameter_sharing": "separate"},
    ),
    "mappo-no-bootstrap": ("mappo", {**PPO_TINY, "bootstrap_truncation": False}),
    "pqn-vdn": ("pqn-vdn", VDN_TINY),
    "pqn-vdn-separate": ("pqn-vdn", {**VDN_TINY, "parameter_sharing": "separate"}),
}


def make(name: str, **overrides):
    return algorithms.get(name).make(jaxrl.make_config(name, "SimpleSpread-MPE", **overrides))


# The default tier resumes one case (PQN-VDN with shared parameters: the cheapest
# compile); the others, the shared PPO with separate parameters, GRU actors and a
# centralised critic among them, run with -m slow (each compile of the recurrent,
# separate-parameter MAPPO takes tens of seconds on a 2-core CPU).
DEFAULT_CASES = ("pqn-vdn",)


@pytest.mark.parametrize(
    "case",
    [c if c in DEFAULT_CASES else pytest.param(c, marks=pytest.mark.slow) for c in CASES],
)
def test_resumed_run_matches_an_uninterrupted_one(case, tmp_path):
    """Two seeds, four updates; stopped after two and resumed: the same state bit for bit.
    (Schedules that follow `total_steps` are fixed, so the shorter first run is a prefix.)"""
    name, overrides = CASES[case]
    fixed = {"anneal_lr": False} | ({"eps_fraction": 0.0} if name == "pqn-vdn" else {})
    overrides = {**overrides, **fixed}
    run = dict(num_seeds=2, progress=False, log_every=128)
    whole = train(make(name, **overrides), RunConfig(**run))
    run_dir = tmp_path / "run"
    train(make(name, **{**overrides, "total_steps": 128}), RunConfig(**run, run_dir=str(run_dir)))
    resumed = train(make(name, **overrides), RunConfig(**run, run_dir=str(run_dir), resume=True))
    assert tree_fingerprint(resumed.state) == tree_fingerprint(whole.state)
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]
    last = whole.metrics[-1]
    assert np.isfinite(last["loss"]).all() and last["loss"][0] != last["loss"][1]
    # SimpleSpread's episodes last 25 steps: a chunk of two 16-step rollouts ends some.
    assert (np.asarray(last["episodes"]) > 0).all()
    assert np.all(np.asarray(last["episode_return"]) < 0)  # distances are penalised


def test_a_sweep_is_one_vmapped_run_over_hyperparameters():
    result = jaxrl.train(
        "mappo",
        env="SimpleSpread-MPE",
        sweep={"lr": [1e-3, 1e-4]},
        progress=False,
        anneal_lr=False,
        **PPO_TINY,
    )
    lrs = np.asarray(result.metrics[0]["lr"])
    np.testing.assert_allclose(lrs, [1e-3, 1e-4], rtol=1e-6)


def test_cli_trains_and_evaluates_a_multi_agent_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["train", "ippo", "--env", "SimpleSpread-MPE", "--total-steps", "512"]
    assert cli.main([*args, "--num-seeds", "2", "--num-envs", "4", "--no-progress"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("ippo-SimpleSpread-MPE-")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_return_agents"] == 2 and summary["final_return_mean"] < 0
    assert cli.main(["eval", str(run_dir), "--episodes", "3"]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["env"] == "SimpleSpread-MPE" and len(report["return_per_agent"]) == 2
    assert np.isfinite(report["return_mean"]) and report["return_mean"] < 0  # distances cost


@pytest.mark.parametrize(
    ("name", "overrides", "pattern"),
    [
        ("ippo", {"parameter_sharing": "bogus"}, r"invalid parameter_sharing='bogus': must be "),
        ("mappo", {"num_minibatches": 3}, r"invalid num_minibatches=3: must be a divisor"),
        (
            "ippo",
            {"recurrent": True, "num_envs": 4, "num_minibatches": 8},
            r"must be a divisor of num_envs=4 \(recurrent",
        ),
        ("pqn-vdn", {"eps_end": 0.5, "eps_start": 0.1}, r"invalid eps_end=0\.5"),
        ("pqn-vdn", {"norm": "batch"}, r"invalid norm='batch'"),
    ],
)
def test_bad_configs_fail_naming_the_field(name, overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        jaxrl.make_config(name, "SimpleSpread-MPE", **overrides)


def test_a_single_agent_environment_object_is_refused_before_compiling():
    from jaxrl import envs

    env, params = envs.make("CartPole-v1")
    config = jaxrl.make_config("ippo", "SimpleSpread-MPE")
    with pytest.raises(ConfigError, match=r"invalid env='SimpleSpread-MPE': must be a multi-agent"):
        algorithms.get("ippo").algorithm(config, env, params)


@pytest.mark.optional
def test_mappo_trains_on_jaxmarl_smax_through_the_adapter():
    """Dead units are masked out of the loss; the critic reads SMAX's world state."""
    pytest.importorskip("jaxmarl")
    result = jaxrl.train(
        "mappo", env="jaxmarl:HeuristicEnemySMAX", num_seeds=2, progress=False, **PPO_TINY
    )
    last = result.metrics[-1]
    assert np.isfinite(last["loss"]).all() and (np.asarray(last["episodes"]) > 0).all()


@pytest.mark.optional
@pytest.mark.parametrize("name", ["ippo", "mappo"])
def test_smax_scenario_from_the_cli_acts_within_its_action_masks(name, tmp_path, monkeypatch):
    """`jaxrl train NAME --env jaxmarl:SMAX-3m` trains (the scenario chosen by id); the
    rollouts' actions are all legal under SMAX's `get_avail_actions` (shooting only units
    in range); an unknown scenario fails before anything is built, listing the others."""
    pytest.importorskip("jaxmarl")
    monkeypatch.chdir(tmp_path)
    args = ["train", name, "--env", "jaxmarl:SMAX-3m", "--total-steps", "256", "--num-envs", "4"]
    assert cli.main([*args, "--num-steps", "32", "--num-minibatches", "2", "--no-progress"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run_dir.name.startswith(f"{name}-jaxmarl-SMAX-3m-")
    assert np.isfinite(summary["final_return_mean"])
    algo = make_smax(name)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    _, samples, *_ = jax.jit(algo._rollout)(state)
    mask, action = np.asarray(samples.action_mask), np.asarray(samples.action)
    assert mask.shape == (16, 4, 3, 8)  # 3 allies: 5 moves (stop included), 3 enemies to shoot
    assert not mask.all() and np.take_along_axis(mask, action[..., None], -1).all()
    with pytest.raises(ValueError, match=r"Unknown SMAX scenario 'SMAX-4m'.*'SMAX-3m'"):
        envs.make("jaxmarl:SMAX-4m")


def make_smax(name: str):
    config = jaxrl.make_config(name, "jaxmarl:SMAX-3m", **PPO_TINY)
    return algorithms.get(name).make(config)


@pytest.mark.optional
def test_pqn_vdn_trains_on_a_smax_scenario_within_its_action_masks():
    pytest.importorskip("jaxmarl")
    result = jaxrl.train(
        "pqn-vdn", env="jaxmarl:SMAX-3m", num_seeds=1, progress=False, eps_end=1.0, **VDN_TINY
    )
    assert np.isfinite(result.metrics[-1]["loss"]).all()
    algo, state = result.algorithm, jax.tree.map(lambda x: x[0], result.state)
    env, params = algo.env, algo.env_params
    obs, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(1), 32), params)
    chosen, _ = algo.act(state, obs, None, jnp.ones((32,), bool), jax.random.key(2), False)
    mask = np.asarray(obs["action_mask"])
    assert not mask.all() and np.take_along_axis(mask, np.asarray(chosen)[..., None], -1).all()
