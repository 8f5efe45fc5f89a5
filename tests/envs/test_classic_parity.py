"""Step-for-step parity of the classic control environments with gymnasium.

For each environment, 5 episodes (seeds 0-4) are played in gymnasium
(`gymnasium.make`, so its `TimeLimit` is included) with a fixed action
sequence: seeds 0-1 act uniformly at random, seeds 2-4 follow a simple
controller with 25% random actions. Continuous actions are drawn from 1.5x
the action range to exercise the clipping. Scripted episodes (`SCRIPTED`)
start from a constructed state, written into gymnasium's environment after
its reset, to reach the branches random play misses: each of CartPole's four
limits, termination on the time-limit step, the mountain cars' left wall,
Pendulum's speed clip. `REQUIRED_BRANCHES` lists every termination and
truncation condition (and those clamps) of every environment; the one-step
test counts how often each is reached and fails if one never is. Before every
step gymnasium's internal state (and elapsed-step count) is recorded.

Two comparisons, both within 1e-4 (this is what "step-for-step equal to
gymnasium" means in the docs):

* one-step (every step of every episode, including the truncation step): our
  `step` is applied to gymnasium's recorded state *re-synced before each step*
  (converted to float32), and observation, reward, terminated, truncated and
  the next physical state are compared. Re-syncing is needed because CartPole
  under control, Acrobot and Pendulum are chaotic: float32 and float64
  trajectories drift apart after ~100 steps.
* free-running: our environment is rolled out alone from the synced reset
  state with the same actions, and compared with gymnasium's trajectory for
  `FREE_RUN_HORIZON` steps (whole episodes for the non-chaotic mountain cars).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrl import envs
from jaxrl.envs import spaces
from jaxrl.envs.classic import (
    AcrobotState,
    CartPoleState,
    ContinuousMountainCarState,
    MountainCarState,
    PendulumState,
)

gym = pytest.importorskip("gymnasium")

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
SEEDS = range(5)
ATOL = 1e-4
# Steps compared in the free-running rollout (None = whole episode); measured
# float32/float64 divergence passes 1e-4 after ~120 (CartPole), ~140 (Acrobot)
# and ~150 (Pendulum) steps, never for the mountain cars.
FREE_RUN_HORIZON = {
    "CartPole-v1": 60,
    "Acrobot-v1": 60,
    "MountainCar-v0": None,
    "MountainCarContinuous-v0": None,
    "Pendulum-v1": 60,
}

# Our state class and its physical fields, in the order of gymnasium's `state`.
STATE_LAYOUT: dict[str, tuple[type, tuple[str, ...]]] = {
    "CartPole-v1": (CartPoleState, ("x", "x_dot", "theta", "theta_dot")),
    "Acrobot-v1": (AcrobotState, ("joint_angle1", "joint_angle2", "velocity_1", "velocity_2")),
    "MountainCar-v0": (MountainCarState, ("position", "velocity")),
    "MountainCarContinuous-v0": (ContinuousMountainCarState, ("position", "velocity")),
    "Pendulum-v1": (PendulumState, ("theta", "theta_dot")),
}

# gymnasium's reset distribution: each state variable ~ U(low, high).
RESET_BOUNDS = {
    "CartPole-v1": [(-0.05, 0.05)] * 4,
    "Acrobot-v1": [(-0.1, 0.1)] * 4,
    "MountainCar-v0": [(-0.6, -0.4), (0.0, 0.0)],
    "MountainCarContinuous-v0": [(-0.6, -0.4), (0.0, 0.0)],
    "Pendulum-v1": [(-np.pi, np.pi), (-1.0, 1.0)],
}


@dataclasses.dataclass(frozen=True)
class Scripted:
    """An episode from a constructed start: `state` (gymnasium's physical state vector)
    and elapsed steps are written into gymnasium after its reset; `action` is played
    every step (None: the controller)."""

    branch: str
    state: tuple[float, ...]
    elapsed: int = 0
    action: Any = None


# Episodes that reach the branches random and controlled play do not.
SCRIPTED: dict[str, tuple[Scripted, ...]] = {
    "CartPole-v1": (
        Scripted("x > x_threshold", (2.2, 1.5, 0.0, 0.0)),  # balanced, drifting right
        Scripted("x < -x_threshold", (-2.2, -1.5, 0.0, 0.0)),
        Scripted("theta > theta_threshold", (0.0, 0.0, 0.15, 0.5), action=0),
        # Falls on the 500th step: terminated and truncated together, as gymnasium's TimeLimit.
        Scripted("terminated on the time-limit step", (0.0, 0.0, 0.2, 0.5), 499, action=0),
    ),
    "Acrobot-v1": (),
    "MountainCar-v0": (Scripted("left wall", (-1.15, -0.05)),),  # controller pushes left first
    "MountainCarContinuous-v0": (Scripted("left wall", (-1.15, -0.05)),),
    "Pendulum-v1": (Scripted("max speed", (0.0, 7.9), action=np.array([2.0], np.float32)),),
}

# Every termination and truncation condition (and clamp) that the parity tests must reach.
REQUIRED_BRANCHES = {
    "CartPole-v1": {
        "x > x_threshold",
        "x < -x_threshold",
        "theta > theta_threshold",
        "theta < -theta_threshold",
        "time limit",
        "terminated on the time-limit step",
    },
    "Acrobot-v1": {"goal", "time limit"},
    "MountainCar-v0": {"goal", "time limit", "left wall"},
    "MountainCarContinuous-v0": {"goal", "time limit", "left wall"},
    "Pendulum-v1": {"time limit", "max speed"},
}


def episodes(env_id: str) -> list[int]:
    """Episode indices: 0-4 are seeds 0-4, then one per `SCRIPTED` entry."""
    return list(range(len(SEEDS) + len(SCRIPTED[env_id])))


def branches_reached(env_id: str, ep: dict[str, Any]) -> list[str]:
    """The end condition of a recorded episode, and each clamp hit on the way.

    Read from gymnasium's outputs and states (not ours), so a branch counts only if
    the reference implementation took it.
    """
    reached = []
    final = ep["next"][-1]
    if ep["trunc"][-1]:
        reached.append("time limit")
    if ep["term"][-1]:
        if ep["trunc"][-1]:
            reached.append("terminated on the time-limit step")
        if env_id == "CartPole-v1":
            x, theta, limit = final[0], final[2], 12 * 2 * np.pi / 360
            reached += [name for name, hit in (
                ("x > x_threshold", x > 2.4), ("x < -x_threshold", x < -2.4),
                ("theta > theta_threshold", theta > limit),
                ("theta < -theta_threshold", theta < -limit),
            ) if hit]  # fmt: skip
        else:
            reached.append("goal")
    if env_id in ("MountainCar-v0", "MountainCarContinuous-v0"):
        # The continuous version keeps a float32 state: its wall is float32(-1.2).
        at_wall = np.isclose(ep["next"][:, 0], -1.2, rtol=0, atol=1e-6) & (ep["next"][:, 1] == 0)
        reached += ["left wall"] * int(at_wall.sum())
    if env_id == "Pendulum-v1":
        reached += ["max speed"] * int((np.abs(ep["next"][:, 1]) == 8.0).sum())
    return reached


# ------------------------------------------------------------------ converters
def gym_state_vector(env_id: str, gym_env: Any) -> np.ndarray:
    """gymnasium's internal physical state as a float64 vector."""
    return np.asarray(gym_env.unwrapped.state, np.float64).reshape(-1)


def gym_observation(env_id: str, gym_env: Any) -> np.ndarray:
    """gymnasium's observation of its current internal state."""
    inner = gym_env.unwrapped
    if env_id == "Acrobot-v1":
        return inner._get_ob()
    if env_id == "Pendulum-v1":
        return inner._get_obs()
    return np.asarray(inner.state, np.float32)


def to_our_state(env_id: str, gym_env: Any) -> Any:
    """Converts gymnasium's internal state (and elapsed steps) into our state."""
    cls, fields = STATE_LAYOUT[env_id]
    vector = gym_state_vector(env_id, gym_env)
    values = {f: np.float32(v) for f, v in zip(fields, vector, strict=True)}
    if env_id == "Pendulum-v1":
        last_u = gym_env.unwrapped.last_u
        values["last_u"] = np.float32(0.0 if last_u is None else last_u)
    return cls(**values, time=np.int32(gym_env._elapsed_steps))


def our_state_vector(env_id: str, state: Any) -> np.ndarray:
    """Our state's physical fields, stacked on the last axis (batched or not)."""
    return np.stack([np.asarray(getattr(state, f)) for f in STATE_LAYOUT[env_id][1]], axis=-1)


# ------------------------------------------------------------------ recording
def controller(env_id: str, obs: np.ndarray) -> Any:
    """A simple policy that reaches the goal (or balances), to exercise termination."""
    if env_id == "CartPole-v1":
        return int(obs[2] + 0.5 * obs[3] > 0)
    if env_id == "Acrobot-v1":
        return 2 if obs[5] > 0 else 0  # torque along the elbow's velocity pumps energy
    if env_id == "MountainCar-v0":
        return 2 if obs[1] >= 0 else 0
    if env_id == "MountainCarContinuous-v0":
        return np.array([1.0 if obs[1] >= 0 else -1.0], np.float32)
    return np.zeros((1,), np.float32)


def random_action(space: spaces.Space, rng: np.random.Generator) -> Any:
    if isinstance(space, spaces.Discrete):
        return int(rng.integers(space.n))
    return rng.uniform(1.5 * space.low, 1.5 * space.high).astype(np.float32)


@functools.cache
def record_episode(env_id: str, index: int) -> dict[str, Any]:
    """Plays one gymnasium episode (see `episodes`); returns per-step states, actions
    and outputs."""
    env, params = envs.make(env_id)
    scripted = SCRIPTED[env_id][index - len(SEEDS)] if index >= len(SEEDS) else None
    rng = np.random.default_rng(index)
    epsilon = 0.0 if scripted else 1.0 if index < 2 else 0.25
    gym_env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns about out-of-range actions
        obs, _ = gym_env.reset(seed=index)
        if scripted:
            gym_env.unwrapped.state = np.asarray(scripted.state, np.float64)
            gym_env._elapsed_steps = scripted.elapsed
            obs = gym_observation(env_id, gym_env)
        rec: dict[str, list] = {
            k: [] for k in ("state", "action", "obs", "reward", "term", "trunc", "next")
        }
        reset_obs, initial_state = obs, to_our_state(env_id, gym_env)
        done = False
        while not done:
            rec["state"].append(to_our_state(env_id, gym_env))
            if rng.random() < epsilon:
                action = random_action(env.action_space(params), rng)
            elif scripted and scripted.action is not None:
                action = scripted.action
            else:
                action = controller(env_id, obs)
            obs, reward, terminated, truncated, _ = gym_env.step(action)
            done = terminated or truncated
            rec["action"].append(np.asarray(action))
            rec["obs"].append(obs)
            rec["reward"].append(reward)
            rec["term"].append(terminated)
            rec["trunc"].append(truncated)
            rec["next"].append(gym_state_vector(env_id, gym_env))
    out = {k: np.stack(v) for k, v in rec.items() if k != "state"}
    out["state"] = rec["state"]
    out["reset_obs"], out["initial_state"], out["length"] = (
        reset_obs,
        initial_state,
        len(rec["obs"]),
    )
    return out


def pad_to(x: np.ndarray, n: int) -> np.ndarray:
    """Pads the leading axis to `n` by repeating the last entry (keeps shapes static)."""
    return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)]) if len(x) < n else x


# ------------------------------------------------------------------ our side
@functools.cache
def compiled(env_id: str) -> tuple[Any, Any, Any, Any]:
    """`(env, params, batched_step, rollout)`, jitted once per environment."""
    env, params = envs.make(env_id)
    key = jax.random.key(0)

    @jax.jit
    def batched_step(states: Any, actions: jax.Array) -> Any:
        """`step` from each state, and the observation of each state before the step."""

        def one(state: Any, action: jax.Array) -> Any:
            return env.get_obs(state), env.step(key, state, action, params)

        return jax.vmap(one)(states, actions)

    @jax.jit
    def rollout(state: Any, actions: jax.Array) -> Any:
        def body(s: Any, a: jax.Array) -> tuple[Any, Any]:
            _, s, reward, terminated, truncated, info = env.step(key, s, a, params)
            return s, (info["final_observation"], reward, terminated, truncated)

        return jax.lax.scan(body, state, actions)[1]

    return env, params, batched_step, rollout


def assert_close(name: str, ours: Any, theirs: Any, where: str) -> None:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if not np.allclose(ours, theirs, rtol=0.0, atol=ATOL):
        err = np.abs(ours - theirs).reshape(len(ours), -1).max(axis=1)
        step = int(np.argmax(err > ATOL))
        raise AssertionError(
            f"{where}: {name} differs first at step {step} (|diff| = {err[step]:.3g}): "
            f"ours {ours[step]}, gymnasium {theirs[step]}"
        )


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_one_step_parity_from_synced_state(env_id: str) -> None:
    _, params, batched_step, _ = compiled(env_id)
    horizon = params.max_steps_in_episode
    reached: collections.Counter[str] = collections.Counter()
    for index in episodes(env_id):
        ep = record_episode(env_id, index)
        n, where = ep["length"], f"{env_id} episode {index}"
        states = jax.tree.map(lambda *xs: pad_to(np.stack(xs), horizon), *ep["state"])
        actions = jnp.asarray(pad_to(ep["action"], horizon))
        obs_before, (_, next_state, reward, terminated, truncated, info) = batched_step(
            states, actions
        )
        # Our observation of gymnasium's synced state: its reset obs, then each step's obs.
        gym_obs_before = np.concatenate([ep["reset_obs"][None], ep["obs"][:-1]])
        assert_close("observation of synced state", obs_before[:n], gym_obs_before, where)
        assert_close("observation", info["final_observation"][:n], ep["obs"], where)
        assert_close("reward", reward[:n], ep["reward"], where)
        np.testing.assert_array_equal(terminated[:n], ep["term"], err_msg=f"{where}: terminated")
        np.testing.assert_array_equal(truncated[:n], ep["trunc"], err_msg=f"{where}: truncated")
        # Physical state after every step that did not end the episode (ours auto-resets).
        live = ~(ep["term"] | ep["trunc"])
        ours = our_state_vector(env_id, next_state)[:n][live]
        assert_close("next state", ours, ep["next"][live], where)
        times = np.asarray([int(s.time) for s in ep["state"]])
        np.testing.assert_array_equal(np.asarray(next_state.time)[:n][live], times[live] + 1)
        reached.update(branches_reached(env_id, ep))
        if ep["trunc"][-1]:
            assert int(ep["state"][-1].time) + 1 == horizon, f"{where}: truncated off the limit"
    # A branch that no episode reaches is not tested: every one must be reached.
    missing = REQUIRED_BRANCHES[env_id] - set(reached)
    assert not missing, f"{env_id}: no episode reached {sorted(missing)} (reached {dict(reached)})"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_free_running_parity(env_id: str) -> None:
    _, params, _, rollout = compiled(env_id)
    horizon = params.max_steps_in_episode
    for index in episodes(env_id):
        ep = record_episode(env_id, index)
        n = (
            ep["length"]
            if FREE_RUN_HORIZON[env_id] is None
            else min(ep["length"], FREE_RUN_HORIZON[env_id])
        )
        where = f"{env_id} episode {index} (free-running, {n} steps)"
        obs, reward, terminated, truncated = rollout(
            ep["initial_state"], jnp.asarray(pad_to(ep["action"], horizon))
        )
        assert_close("observation", obs[:n], ep["obs"][:n], where)
        assert_close("reward", reward[:n], ep["reward"][:n], where)
        np.testing.assert_array_equal(terminated[:n], ep["term"][:n], err_msg=where)
        np.testing.assert_array_equal(truncated[:n], ep["trunc"][:n], err_msg=where)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_distribution(env_id: str) -> None:
    """Both resets are uniform on gymnasium's documented box (bounds + KS test)."""
    env, params, _, _ = compiled(env_id)
    _, states = jax.jit(jax.vmap(lambda k: env.reset(k, params)))(
        jax.random.split(jax.random.key(123), 2000)
    )
    ours = our_state_vector(env_id, states)
    gym_env = gym.make(env_id)
    theirs = []
    for seed in range(1000):
        gym_env.reset(seed=seed)
        theirs.append(gym_state_vector(env_id, gym_env))
    theirs = np.stack(theirs)
    assert np.all(np.asarray(states.time) == 0)
    for i, (low, high) in enumerate(RESET_BOUNDS[env_id]):
        name = STATE_LAYOUT[env_id][1][i]
        for label, x in (("ours", ours[:, i]), ("gymnasium", theirs[:, i])):
            assert low - 1e-6 <= x.min() and x.max() <= high + 1e-6, f"{label} {name} out of bounds"
        if low == high:
            np.testing.assert_array_equal(ours[:, i], low)
            continue
        width = high - low
        assert ours[:, i].min() < low + 0.01 * width and ours[:, i].max() > high - 0.01 * width
        p_value = stats.ks_2samp(ours[:, i], theirs[:, i]).pvalue
        assert p_value > 1e-3, f"{env_id} {name}: reset distributions differ (KS p = {p_value:.2g})"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_match_gymnasium(env_id: str) -> None:
    env, params, _, _ = compiled(env_id)
    gym_env = gym.make(env_id)
    obs_space = env.observation_space(params)
    np.testing.assert_array_equal(obs_space.low, gym_env.observation_space.low)
    np.testing.assert_array_equal(obs_space.high, gym_env.observation_space.high)
    assert obs_space.dtype == gym_env.observation_space.dtype
    # Sampling the observation space gives valid observations (as in gymnasium).
    samples = jax.jit(jax.vmap(obs_space.sample))(jax.random.split(jax.random.key(0), 64))
    assert np.isfinite(samples).all() and bool(jax.vmap(obs_space.contains)(samples).all())
    action_space = env.action_space(params)
    if isinstance(action_space, spaces.Discrete):
        assert action_space.n == gym_env.action_space.n
    else:
        np.testing.assert_array_equal(action_space.low, gym_env.action_space.low)
        np.testing.assert_array_equal(action_space.high, gym_env.action_space.high)
        assert action_space.shape == gym_env.action_space.shape
    assert params.max_steps_in_episode == gym_env.spec.max_episode_steps


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_state_fields_match_gymnax(env_id: str) -> None:
    """Our states use gymnax's field names, so states convert field by field."""
    gymnax = pytest.importorskip("gymnax")
    gymnax_env, _ = gymnax.make(env_id)
    gymnax_state_cls = sys.modules[type(gymnax_env).__module__].EnvState
    state_cls = STATE_LAYOUT[env_id][0]
    names = [f.name for f in dataclasses.fields(state_cls)]
    assert set(names) == {f.name for f in dataclasses.fields(gymnax_state_cls)}
    state = state_cls(**{name: np.float32(i) for i, name in enumerate(names)})
    converted = gymnax_state_cls(**{name: getattr(state, name) for name in names})
    back = state_cls(**{name: getattr(converted, name) for name in names})
    assert [getattr(back, n) for n in names] == [getattr(state, n) for n in names]
