"""Every registered environment honours the `Environment` contract (core.py).

Parametrised over `envs.registered()`, so environments are covered as they
land; an id whose module does not exist yet is skipped with the reason.
Properties are checked with hypothesis over the PRNG seed (few examples,
derandomized). To keep compile time in check each environment compiles two
functions once per module (module-scoped fixture): a `lax.scan` rollout with
random actions, and its `vmap`; params are arguments, so the small-time-limit
params reuse the same compilation.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrl import envs
from jaxrl.envs import spaces

ROLLOUT_STEPS = 24
SMALL_LIMIT = 4
BATCH = 3
SETTINGS = settings(max_examples=3, deadline=None, derandomize=True, database=None)
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


def make_or_skip(env_id: str, **overrides: Any) -> tuple[envs.Environment, envs.EnvParams]:
    """`envs.make`, skipping (not failing) ids whose module has not been written yet."""
    entry_point = envs.spec(env_id).entry_point
    if isinstance(entry_point, str):
        module = entry_point.partition(":")[0]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is not None and module.startswith(err.name):
                pytest.skip(f"{env_id}: module {module} does not exist yet ({err})")
            raise
    return envs.make(env_id, **overrides)


class Harness:
    """One environment with its spaces and jitted rollouts (built once per module)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.env, self.params = make_or_skip(env_id)
        _, self.small_params = make_or_skip(env_id, max_steps_in_episode=SMALL_LIMIT)
        self.obs_space = self.env.observation_space(self.params)
        self.action_space = self.env.action_space(self.params)
        self.rollout = jax.jit(self._rollout)
        self.batched_rollout = jax.jit(jax.vmap(self._rollout, in_axes=(0, None)))

    def rollout_keys(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`(reset_key, per-step keys)`; each step key splits into (action, step)."""
        k_reset, k_steps = jax.random.split(key)
        return k_reset, jax.random.split(k_steps, ROLLOUT_STEPS)

    def _rollout(self, key: jax.Array, params: envs.EnvParams) -> tuple[Any, dict[str, Any]]:
        """Reset, then `ROLLOUT_STEPS` uniformly random actions; records every step."""
        k_reset, step_keys = self.rollout_keys(key)
        obs0, state0 = self.env.reset(k_reset, params)
        first = {"obs": obs0, "state": state0, "obs_ok": self.obs_space.contains(obs0)}

        def body(state: Any, k: jax.Array) -> tuple[Any, dict[str, Any]]:
            k_action, k_step = jax.random.split(k)
            action = self.action_space.sample(k_action)
            obs, next_state, reward, terminated, truncated, info = self.env.step(
                k_step, state, action, params
            )
            final = info["final_observation"]
            return next_state, {
                "action": action,
                "action_ok": self.action_space.contains(action),
                "obs": obs,
                "obs_ok": self.obs_space.contains(obs),
                "final_obs": final,
                "final_ok": self.obs_space.contains(final),
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "time_before": state.time,
                "time_after": next_state.time,
            }

        _, traj = jax.lax.scan(body, state0, step_keys)
        return first, traj


@pytest.fixture(scope="module", params=envs.registered())
def harness(request: pytest.FixtureRequest) -> Harness:
    return Harness(request.param)


def assert_trees_equal(a: Any, b: Any, exact: bool, what: str) -> None:
    """Leaf-wise equality; floats within 1e-5 unless `exact`."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b, f"{what}: structures differ: {tree_a} vs {tree_b}"
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype, f"{what}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}"
        if exact or not np.issubdtype(x.dtype, np.floating):
            np.testing.assert_array_equal(x, y, err_msg=what)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=what)


def leaf_dtype(tree: Any) -> list[Any]:
    return [(np.shape(x), np.asarray(x).dtype) for x in jax.tree.leaves(tree)]


# --------------------------------------------------------------------------- tests
@SETTINGS
@given(seed=SEEDS)
def test_rollout_satisfies_contract(harness: Harness, seed: int) -> None:
    first, traj = harness.rollout(jax.random.key(seed), harness.params)
    traj = jax.tree.map(np.asarray, traj)
    space = harness.obs_space
    # Observations (reset, every step, final) lie in the observation space with its dtype.
    assert bool(first["obs_ok"]), f"reset obs {first['obs']} outside {space}"
    assert traj["obs_ok"].all(), f"step obs outside {space} at steps {np.flatnonzero(~traj['obs_ok'])}"
    assert traj["final_ok"].all(), "info['final_observation'] outside the observation space"
    if isinstance(space, spaces.Box):
        assert first["obs"].shape == space.shape and first["obs"].dtype == space.dtype
    assert leaf_dtype(jax.tree.map(lambda x: x[0], traj["obs"])) == leaf_dtype(first["obs"])
    assert leaf_dtype(traj["final_obs"]) == leaf_dtype(traj["obs"])
    # Sampled actions are valid.
    assert traj["action_ok"].all(), "action_space.sample produced an action outside the space"
    # Rewards: finite float32 scalars; flags: boolean scalars.
    assert traj["reward"].shape == (ROLLOUT_STEPS,) and traj["reward"].dtype == np.float32
    assert np.isfinite(traj["reward"]).all()
    for flag in ("terminated", "truncated"):
        assert traj[flag].shape == (ROLLOUT_STEPS,) and traj[flag].dtype == np.bool_
    # Time counts steps in the episode; an ended episode auto-resets to time 0.
    done = traj["terminated"] | traj["truncated"]
    assert int(first["state"].time) == 0
    np.testing.assert_array_equal(
        traj["time_after"], np.where(done, 0, traj["time_before"] + 1)
    )
    # final_observation equals obs unless the episode just ended.
    for final, obs in zip(jax.tree.leaves(traj["final_obs"]), jax.tree.leaves(traj["obs"]), strict=True):
        np.testing.assert_array_equal(final[~done], obs[~done])


@SETTINGS
@given(seed=SEEDS)
def test_same_key_same_result_jit_matches_eager(harness: Harness, seed: int) -> None:
    key = jax.random.key(seed)
    result = harness.rollout(key, harness.params)
    assert_trees_equal(result, harness.rollout(key, harness.params), True, "rerun with same key")
    # Un-jitted reset and first step (same keys) agree with the jitted rollout.
    k_reset, step_keys = harness.rollout_keys(key)
    env, params = harness.env, harness.params
    obs, state = env.reset(k_reset, params)
    assert_trees_equal((obs, state), (result[0]["obs"], result[0]["state"]), False, "eager reset")
    k_action, k_step = jax.random.split(step_keys[0])
    action = harness.action_space.sample(k_action)
    obs, _, reward, terminated, truncated, info = env.step(k_step, state, action, params)
    first_step = jax.tree.map(lambda x: x[0], result[1])
    expected = (
        first_step["obs"],
        first_step["reward"],
        first_step["terminated"],
        first_step["truncated"],
        first_step["final_obs"],
    )
    got = (obs, reward, terminated, truncated, info["final_observation"])
    assert_trees_equal(got, expected, False, "eager step")


@SETTINGS
@given(seed=SEEDS)
def test_vmap_matches_unbatched(harness: Harness, seed: int) -> None:
    key_a, key_b = jax.random.split(jax.random.key(seed))
    keys = jnp.stack([key_a, key_a, key_b])  # a repeated key must give identical rows
    assert BATCH == len(keys)
    batched = harness.batched_rollout(keys, harness.params)
    for i in range(BATCH):
        row = jax.tree.map(lambda x, i=i: x[i], batched)
        assert_trees_equal(row, harness.rollout(keys[i], harness.params), False, f"vmap row {i}")
    assert_trees_equal(
        jax.tree.map(lambda x: x[0], batched), jax.tree.map(lambda x: x[1], batched), True, "same key"
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_truncation_exactly_at_time_limit(harness: Harness, seed: int) -> None:
    assert harness.small_params.max_steps_in_episode == SMALL_LIMIT
    first, traj = harness.rollout(jax.random.key(seed), harness.small_params)
    traj = jax.tree.map(np.asarray, traj)
    # Truncated iff this step is the SMALL_LIMIT-th of the episode.
    np.testing.assert_array_equal(traj["truncated"], traj["time_before"] + 1 == SMALL_LIMIT)
    assert traj["truncated"].any(), "no episode reached the time limit"
    assert (traj["time_before"] < SMALL_LIMIT).all()
    # Auto-reset: the state after an ended episode starts a new one at time 0.
    assert (traj["time_after"][traj["truncated"]] == 0).all()


def test_action_space_sample_is_valid_and_covers_space(harness: Harness) -> None:
    space = harness.action_space
    samples = jax.vmap(space.sample)(jax.random.split(jax.random.key(0), 256))
    assert bool(jax.vmap(space.contains)(samples).all())
    if isinstance(space, spaces.Discrete):
        assert set(np.unique(np.asarray(samples)).tolist()) == set(range(space.n))
    elif isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        assert samples.dtype == space.dtype and samples.shape == (256, *space.shape)
        assert (np.asarray(samples).std(axis=0) > 0).all(), "Box.sample is degenerate"


def test_name_is_registered_id(harness: Harness) -> None:
    assert harness.env.name == harness.env_id
