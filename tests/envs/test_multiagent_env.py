"""The multi-agent contract (`envs/multiagent/core.py`) and SimpleSpread-MPE.

Default tier: SimpleSpread's transitions against hand-computed values (moves, damping,
the contact force, collisions and coverage in the reward, the observation layout), the
contract's properties on every registered multi-agent id (spaces, shapes, the time
limit as truncation, auto-reset, `final_observation`, vmap), the dict views, and the
registry's split into single- and multi-agent ids. Optional tier (`-m optional`, needs
`jaxmarl`): SimpleSpread step for step against JaxMARL's `MPE_simple_spread_v3`; the
adapter's contract on MPE and SMAX, and SMAX scenarios by id with their action masks
step for step against JaxMARL's own `HeuristicEnemySMAX`.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import envs
from jaxrl.config import ConfigError
from jaxrl.envs.multiagent import (
    SimpleSpread,
    SimpleSpreadState,
    agent_left,
    from_dict,
    to_dict,
)

MULTI_AGENT_IDS = envs.registered(multi_agent=True)


def assert_close(got, expected) -> None:
    got, expected = np.asarray(got), np.asarray(expected)
    if np.issubdtype(got.dtype, np.floating):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)


def spread_state(pos, vel, landmarks) -> SimpleSpreadState:
    return SimpleSpreadState(
        agent_pos=jnp.asarray(pos, jnp.float32),
        agent_vel=jnp.asarray(vel, jnp.float32),
        landmark_pos=jnp.asarray(landmarks, jnp.float32),
        time=jnp.asarray(0, jnp.int32),
    )


# ----------------------------------------------------------------------------- SimpleSpread
def test_moves_damping_coverage_and_observation_by_hand():
    env, params = envs.make("SimpleSpread-MPE")
    state = spread_state(
        pos=[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]],
        vel=[[0.1, 0.0], [0.0, 0.0], [0.0, 0.0]],
        landmarks=[[0.0, 0.0], [1.0, 1.0], [-1.0, 0.0]],
    )
    action = jnp.array([2, 0, 3], jnp.int32)  # agent 0: +x, agent 1: stay, agent 2: -y
    obs, nxt, reward, terminated, truncated, info = env.step(
        jax.random.key(0), state, action, params
    )
    # p += v dt (the old velocity); v = 0.75 v + 5 * 0.1 * direction.
    np.testing.assert_allclose(nxt.agent_pos, [[0.01, 0.0], [1.0, 0.0], [0.0, 1.0]], atol=1e-6)
    np.testing.assert_allclose(nxt.agent_vel, [[0.575, 0.0], [0.0, 0.0], [0.0, -0.5]], atol=1e-6)
    # No collisions (all agents >= 0.99 apart); coverage: 0.01 + 1 + 1.01 for the three
    # landmarks' nearest agents, so every agent gets 0.5 * -2.02.
    np.testing.assert_allclose(reward, [-1.01, -1.01, -1.01], atol=1e-6)
    assert reward.dtype == jnp.float32 and not bool(terminated) and not bool(truncated)
    # Agent 0: velocity, position, landmarks relative to it, agents 1 and 2 relative to it,
    # four zeros of silent communication.
    expected0 = [0.575, 0, 0.01, 0, -0.01, 0, 0.99, 1, -1.01, 0, 0.99, 0, -0.01, 1, 0, 0, 0, 0]
    np.testing.assert_allclose(obs["agents"][0], expected0, atol=1e-6)
    expected1_others = [-0.99, 0.0, -1.0, 1.0]  # agents 0 and 2 relative to agent 1
    np.testing.assert_allclose(obs["agents"][1][10:14], expected1_others, atol=1e-6)
    np.testing.assert_allclose(
        obs["state"],
        [0.01, 0, 1, 0, 0, 1, 0.575, 0, 0, 0, 0, -0.5, 0, 0, 1, 1, -1, 0],
        atol=1e-6,
    )
    assert obs["alive"].tolist() == [True, True, True]
    np.testing.assert_allclose(info["final_observation"]["agents"], obs["agents"])


def test_contact_force_and_collision_penalty_by_hand():
    env, params = envs.make("SimpleSpread-MPE")
    state = spread_state(
        pos=[[0.0, 0.0], [0.2, 0.0], [5.0, 5.0]],
        vel=np.zeros((3, 2)),
        landmarks=[[0.0, 0.0], [0.2, 0.0], [5.0, 5.0]],
    )
    _, nxt, reward, *_ = env.step(jax.random.key(0), state, jnp.zeros(3, jnp.int32), params)
    # 0.2 apart, radii 0.15 + 0.15: penetration k log(1 + exp(0.1 / k)) = 0.1 (k = 1e-3),
    # force 100 * 0.1 = 10 pushing them apart, so v = 10 * dt = 1 after one step.
    np.testing.assert_allclose(nxt.agent_vel, [[-1.0, 0.0], [1.0, 0.0], [0.0, 0.0]], atol=1e-5)
    # Agents 0 and 1 collide (-1 each, weight 0.5); every landmark is covered exactly.
    np.testing.assert_allclose(reward, [-0.5, -0.5, 0.0], atol=1e-6)


def test_constructor_arguments_change_the_agent_count_and_bad_values_fail():
    env, params = envs.make("SimpleSpread-MPE", num_agents=2, num_landmarks=4)
    obs, _ = env.reset(jax.random.key(0), params)
    assert obs["agents"].shape == (2, 4 + 2 * 4 + 4 * 1)
    assert obs["state"].shape == (4 * 2 + 2 * 4,)
    with pytest.raises(ValueError, match="num_agents=0"):
        SimpleSpread(num_agents=0)
    with pytest.raises(ValueError, match=r"local_ratio = 2\.0 is invalid: must be in \[0, 1\]"):
        envs.make("SimpleSpread-MPE", local_ratio=2.0)


# ----------------------------------------------------------------------------- the contract
def rollout(env, params, key, steps):
    """Reset, then `steps` random joint actions; every step's outputs stacked."""
    action_space = env.action_space(params)
    obs_space = env.observation_space(params)
    k_reset, k_run = jax.random.split(key)
    obs0, state = env.reset(k_reset, params)

    def body(state, key):
        k_act, k_step = jax.random.split(key)
        action = action_space.sample(k_act)
        obs, nxt, reward, term, trunc, info = env.step(k_step, state, action, params)
        final = info["final_observation"]
        return nxt, {
            "obs": obs,
            "final": final,
            "ok": obs_space.contains(obs) & obs_space.contains(final),
            "action_ok": action_space.contains(action),
            "reward": reward,
            "terminated": term,
            "truncated": trunc,
            "time_before": state.time,
            "time_after": nxt.time,
        }

    _, traj = jax.lax.scan(body, state, jax.random.split(k_run, steps))
    return obs0, obs_space.contains(obs0), traj


@pytest.mark.parametrize("env_id", MULTI_AGENT_IDS)
def test_registered_multi_agent_environments_follow_the_contract(env_id):
    check_contract(env_id)


def check_contract(env_id: str) -> None:
    """Spaces, shapes, the time limit, auto-reset, `final_observation`, determinism and
    vmap of one multi-agent environment, over 30 random steps with a 7-step limit."""
    env, params = envs.make(env_id, max_steps_in_episode=7)
    n = env.num_agents
    assert env.name == env_id and env.multi_agent and len(env.agent_names) == n
    run = jax.jit(lambda key: rollout(env, params, key, 30))
    obs0, ok0, traj = run(jax.random.key(3))
    assert bool(ok0) and bool(traj["ok"].all()) and bool(traj["action_ok"].all())
    agent_space = env.agent_observation_space(params)
    assert obs0["agents"].shape == (n, *agent_space.shape)
    assert obs0["state"].shape == env.state_space(params).shape
    assert obs0["alive"].shape == (n,) and obs0["alive"].dtype == jnp.bool_
    assert ("action_mask" in obs0) == env.has_action_mask
    if env.has_action_mask:  # (N, A) bool, and every agent always has a legal action
        mask = traj["obs"]["action_mask"]
        assert mask.shape == (30, n, env.num_actions) and mask.dtype == jnp.bool_
        assert bool(mask.any(-1).all()) and bool(obs0["action_mask"].any(-1).all())
    assert traj["reward"].shape == (30, n) and traj["reward"].dtype == jnp.float32
    for flag in ("terminated", "truncated"):
        assert traj[flag].shape == (30,) and traj[flag].dtype == jnp.bool_
    # Truncated exactly at the time limit; the episode then restarts at time 0.
    done = np.asarray(traj["terminated"] | traj["truncated"])
    np.testing.assert_array_equal(traj["truncated"], np.asarray(traj["time_before"]) + 1 == 7)
    np.testing.assert_array_equal(
        traj["time_after"], np.where(done, 0, np.asarray(traj["time_before"]) + 1)
    )
    assert done.sum() >= 4
    # final_observation equals the observation unless the episode just ended.
    for final, obs in zip(
        jax.tree.leaves(traj["final"]), jax.tree.leaves(traj["obs"]), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(final)[~done], np.asarray(obs)[~done])
    # Same key, same result; vmap over keys equals the unbatched runs.
    again = run(jax.random.key(3))
    jax.tree.map(np.testing.assert_array_equal, (obs0, ok0, traj), again)
    keys = jax.random.split(jax.random.key(4), 2)
    batched = jax.jit(jax.vmap(lambda k: rollout(env, params, k, 30)))(keys)
    for i in range(2):
        single = run(keys[i])
        jax.tree.map(lambda b, s, i=i: assert_close(b[i], s), batched, single)


def test_bad_joint_actions_fail_at_trace_time():
    env, params = envs.make("SimpleSpread-MPE")
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"action has shape \(\), expected \(3,\)"):
        env.step(jax.random.key(1), state, jnp.asarray(0, jnp.int32), params)


def test_dict_views_round_trip_and_name_missing_agents():
    stacked = {"x": jnp.arange(6.0).reshape(3, 2), "y": jnp.array([1, 2, 3])}
    names = ("a", "b", "c")
    per_agent = to_dict(stacked, names)
    assert set(per_agent) == set(names)
    np.testing.assert_array_equal(per_agent["b"]["x"], [2.0, 3.0])
    back = from_dict({**per_agent, "__all__": True}, names)  # JaxMARL's extra key is ignored
    jax.tree.map(np.testing.assert_array_equal, back, stacked)
    with pytest.raises(ValueError, match=r"missing agents \['c'\]"):
        from_dict({"a": 1, "b": 2}, names)


def test_agent_left_marks_agents_gone_after_the_step():
    alive = jnp.array([True, True, False])
    final_alive = jnp.array([True, False, False])
    assert agent_left(alive, final_alive).tolist() == [False, True, False]


# ----------------------------------------------------------------------------- registry
def test_the_registry_keeps_single_and_multi_agent_ids_apart():
    assert "SimpleSpread-MPE" in MULTI_AGENT_IDS
    assert "SimpleSpread-MPE" not in envs.registered()
    assert envs.is_multi_agent("SimpleSpread-MPE") and not envs.is_multi_agent("CartPole-v1")
    assert envs.is_multi_agent("jaxmarl:MPE_simple_spread_v3")
    with pytest.raises(ValueError, match="SimpleSpread-MPE"):  # listed among the ids
        envs.make("SimpleSpread")


def test_algorithms_refuse_the_other_kind_of_environment_before_building():
    with pytest.raises(ConfigError, match=r"invalid env='SimpleSpread-MPE': ppo is a single"):
        jaxrl.make_config("ppo", env="SimpleSpread-MPE")
    with pytest.raises(ConfigError, match=r"invalid env='CartPole-v1': ippo is a multi-agent"):
        jaxrl.make_config("ippo", env="CartPole-v1")
    with pytest.raises(ConfigError, match=r"invalid env='gymnax:CartPole-v1': mappo"):
        jaxrl.make_config("mappo", env="gymnax:CartPole-v1")


# ----------------------------------------------------------------------------- reference
@pytest.mark.optional
def test_simple_spread_matches_jaxmarl_step_for_step():
    """Same keys, same random actions: resets, observations, rewards and the global
    positions agree with JaxMARL's `MPE_simple_spread_v3` for 3 episodes' worth of steps
    (its `step_env`, so that its 26-step episodes do not shift the comparison)."""
    jaxmarl = pytest.importorskip("jaxmarl")
    ref = jaxmarl.make("MPE_simple_spread_v3")
    env, params = envs.make("SimpleSpread-MPE", max_steps_in_episode=1000)
    key = jax.random.PRNGKey(7)
    for episode in range(3):
        key, k_reset = jax.random.split(key)
        ref_obs, ref_state = ref.reset(k_reset)
        obs, state = env.reset(k_reset, params)
        for step in range(25):
            ref_stack = np.stack([ref_obs[a] for a in ref.agents])
            np.testing.assert_allclose(
                obs["agents"], ref_stack, atol=1e-5, err_msg=f"{episode}/{step}"
            )
            np.testing.assert_allclose(
                state.agent_pos, ref_state.p_pos[: ref.num_agents], atol=1e-5
            )
            key, k_act, k_step = jax.random.split(key, 3)
            action = jax.random.randint(k_act, (3,), 0, 5)
            ref_obs, ref_state, ref_reward, _, _ = ref.step_env(
                k_step, ref_state, {a: action[i] for i, a in enumerate(ref.agents)}
            )
            obs, state, reward, _, _ = env.step_env(k_step, state, action, params)
            np.testing.assert_allclose(
                reward, [ref_reward[a] for a in ref.agents], atol=1e-5, err_msg=f"{episode}/{step}"
            )


# ----------------------------------------------------------------------------- JaxMARL
def test_jaxmarl_ids_without_jaxmarl_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)  # as if not installed
    with pytest.raises(ImportError, match=r"need JaxMARL.*pip install 'jaxrl\[jaxmarl\]'"):
        envs.make("jaxmarl:MPE_simple_spread_v3")


@pytest.mark.optional
def test_jaxmarl_adapter_follows_the_contract_and_lists_ids():
    pytest.importorskip("jaxmarl")
    check_contract("jaxmarl:MPE_simple_spread_v3")
    with pytest.raises(ValueError, match=r"Unknown JaxMARL environment id 'MPE_nope'.*MPE_simple"):
        envs.make("jaxmarl:MPE_nope")


@pytest.mark.optional
def test_jaxmarl_adapter_steps_like_the_built_in_port():
    """The adapter around JaxMARL's simple_spread and our port: the same observations and
    rewards from the same keys and actions (JaxMARL ends its episodes a step later)."""
    pytest.importorskip("jaxmarl")
    ours, params = envs.make("SimpleSpread-MPE")
    theirs, their_params = envs.make("jaxmarl:MPE_simple_spread_v3")
    assert their_params.max_steps_in_episode == 26 and theirs.agent_names[0] == "agent_0"
    key = jax.random.key(5)
    obs_a, state_a = ours.reset(key, params)
    obs_b, state_b = theirs.reset(key, their_params)
    for _ in range(20):
        key, k_act, k_step = jax.random.split(key, 3)
        action = jax.random.randint(k_act, (3,), 0, 5)
        np.testing.assert_allclose(obs_a["agents"], obs_b["agents"], atol=1e-5)
        obs_a, state_a, reward_a, *_ = ours.step(k_step, state_a, action, params)
        obs_b, state_b, reward_b, *_ = theirs.step(k_step, state_b, action, their_params)
        np.testing.assert_allclose(reward_a, reward_b, atol=1e-5)


@pytest.mark.optional
def test_jaxmarl_smax_with_units_that_die_follows_the_contract():
    """SMAX (units die: `alive` turns False mid-episode; a world state for the critic)."""
    pytest.importorskip("jaxmarl")
    check_contract("jaxmarl:HeuristicEnemySMAX")


@pytest.mark.optional
def test_jaxmarl_smax_scenarios_by_id_pass_on_the_legal_actions():
    """`jaxmarl:SMAX-3m` is JaxMARL's HeuristicEnemySMAX on the 3m map with its baselines'
    keywords: the same observations, alive units and legal actions (`get_avail_actions`)
    step for step from the same keys and legal random actions; MPE has no mask; an
    unknown map lists the scenarios."""
    pytest.importorskip("jaxmarl")
    import jaxmarl
    from jaxmarl.environments.smax import map_name_to_scenario

    check_contract("jaxmarl:SMAX-3m")
    env, params = envs.make("jaxmarl:SMAX-3m")
    ref = jaxmarl.make(
        "HeuristicEnemySMAX",
        scenario=map_name_to_scenario("3m"),
        see_enemy_actions=True,
        walls_cause_death=True,
        attack_mode="closest",
    )
    assert env.has_action_mask and env.num_agents == 3 and env.num_actions == 8
    assert not envs.make("jaxmarl:MPE_simple_spread_v3")[0].has_action_mask
    key = jax.random.key(7)
    obs, state = jax.jit(env.reset_env)(key, params)
    ref_obs, ref_state = ref.reset(key)
    step = jax.jit(env.step_env)
    for t in range(40):
        legal = np.stack([np.asarray(ref.get_avail_actions(ref_state)[a]) for a in ref.agents])
        np.testing.assert_array_equal(obs["action_mask"], legal != 0, err_msg=f"step {t}")
        np.testing.assert_allclose(
            obs["agents"], np.stack([ref_obs[a] for a in ref.agents]), atol=1e-6
        )
        key, k_act, k_step = jax.random.split(key, 3)
        action = jax.random.categorical(k_act, jnp.where(obs["action_mask"], 0.0, -jnp.inf))
        was_alive = np.asarray(obs["alive"])
        obs, state, reward, terminated, _ = step(k_step, state, action, params)
        ref_obs, ref_state, ref_reward, ref_done, _ = ref.step_env(
            k_step, ref_state, to_dict(action, ref.agents)
        )
        np.testing.assert_array_equal(obs["alive"], [not ref_done[a] for a in ref.agents])
        # JaxMARL rewards every ally with the team's reward; ours stop once a unit is dead.
        expected = np.where(was_alive, [ref_reward[a] for a in ref.agents], 0.0)
        np.testing.assert_allclose(reward, expected, atol=1e-6)
        if bool(terminated):
            break
    with pytest.raises(ValueError, match=r"Unknown SMAX scenario 'SMAX-4m'; available: .*SMAX-3m"):
        envs.make("jaxmarl:SMAX-4m")
