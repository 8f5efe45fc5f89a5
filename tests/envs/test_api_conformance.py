"""Every registered environment honours the `Environment` contract (core.py).

Parametrised over `envs.registered()`, so environments are covered as they
land; an id whose module does not exist yet is skipped with the reason.
Properties are checked with hypothesis over the PRNG seed: `MAX_EXAMPLES`
seeds per environment and property (derandomized, so CI is reproducible), each
a `ROLLOUT_STEPS`-step random rollout. After the one-off compile an example
costs a few milliseconds, so the count is set by what it buys: 25 independent
rollouts per environment cross many episode boundaries (auto-reset,
`final_observation`) even in environments whose episodes last ~20 steps.

Compile time is the cost of this file, so each environment compiles exactly
three functions, once per module (module-scoped fixture): a batch of
`action_space.sample`, a `lax.scan` rollout (reset, then those actions
through `step`), and the same rollout under `vmap`. Params are arguments, so
the small-time-limit params reuse the compiled rollout; results are compared
in NumPy.
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

ROLLOUT_STEPS = 64
SMALL_LIMIT = 4
NUM_SAMPLES = 256
MAX_EXAMPLES = 25
SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None)
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
# The batched rollout runs keys [k0, k0, k1]: rows 0 and 1 must be identical.
BATCH_ROWS = (0, 0, 1)
assert ROLLOUT_STEPS * len(BATCH_ROWS) <= NUM_SAMPLES


def make_or_skip(env_id: str, **overrides: Any) -> tuple[envs.Environment, envs.EnvParams]:
    """`envs.make`, skipping (not failing) ids whose module has not been written yet.

    Only a missing entry-point module skips; any other import error fails. A
    prefixed id (`craftax:...`) goes straight to its adapter: the suite adapters'
    tests skip on a missing suite themselves.
    """
    if ":" in env_id:
        return envs.make(env_id, **overrides)
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


def to_numpy(tree: Any) -> Any:
    """Host copies of every leaf (PRNG keys as their raw data)."""

    def leaf(x: Any) -> np.ndarray:
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return jax.tree.map(leaf, tree)


@jax.jit
def derive_keys(key: jax.Array) -> dict[str, jax.Array]:
    """Keys for `BATCH_ROWS` rollouts. Environment-independent: compiled once per module."""
    keys = jax.random.split(key, 2)[jnp.array(BATCH_ROWS)]
    split = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    return {
        "reset": split[:, 0],
        "steps": jax.vmap(lambda k: jax.random.split(k, ROLLOUT_STEPS))(split[:, 1]),
        "actions": split[:, 2],
    }


class Harness:
    """One environment, its spaces and its three jitted functions.

    Random numbers are drawn outside the rollouts (keys by `derive_keys`,
    actions by `action_space.sample` in `_samples`): each `threefry` call in a
    traced function costs ~0.2 s of compile time.
    """

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.env, self.params = make_or_skip(env_id)
        _, self.small_params = make_or_skip(env_id, max_steps_in_episode=SMALL_LIMIT)
        self.obs_space = self.env.observation_space(self.params)
        self.action_space = self.env.action_space(self.params)
        self._rollout_jit = jax.jit(self._rollout)
        self._batched_jit = jax.jit(jax.vmap(self._rollout, in_axes=(0, 0, 0, None)))
        self._samples_jit = jax.jit(self._samples)

    # -------------------------------------------------------------- traced functions
    def _rollout(
        self, k_reset: jax.Array, step_keys: jax.Array, actions: Any, params: envs.EnvParams
    ) -> dict[str, Any]:
        """Reset, then one `step` per action; records every step."""
        obs0, state0 = self.env.reset(k_reset, params)

        def body(state: Any, key_action: tuple[jax.Array, Any]) -> tuple[Any, dict[str, Any]]:
            key, action = key_action
            obs, next_state, reward, terminated, truncated, info = self.env.step(
                key, state, action, params
            )
            final = info["final_observation"]
            return next_state, {
                "obs": obs,
                "obs_ok": self.obs_space.contains(obs),
                "final_obs": final,
                "final_ok": self.obs_space.contains(final),
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "time_before": state.time,
                "time_after": next_state.time,
                "state": next_state,
            }

        _, traj = jax.lax.scan(body, state0, (step_keys, actions))
        first = {"obs": obs0, "state": state0, "obs_ok": self.obs_space.contains(obs0)}
        return {"first": first, "traj": traj}

    def _samples(self, key: jax.Array) -> tuple[Any, jax.Array]:
        samples = jax.vmap(self.action_space.sample)(jax.random.split(key, NUM_SAMPLES))
        return samples, jax.vmap(self.action_space.contains)(samples)

    # -------------------------------------------------------------- host wrappers
    def samples(self, key: jax.Array) -> tuple[Any, np.ndarray]:
        """`NUM_SAMPLES` actions from `action_space.sample` and whether each is valid."""
        samples, ok = to_numpy(self._samples_jit(key))
        assert ok.all(), "action_space.sample produced an action outside the space"
        return samples, ok

    def rollout(self, seed: int, small_limit: bool = False) -> dict[str, Any]:
        """Reset, then `ROLLOUT_STEPS` uniformly random actions."""
        params = self.small_params if small_limit else self.params
        keys = derive_keys(jax.random.key(seed))
        actions, _ = self.samples(keys["actions"][0])
        actions = jax.tree.map(lambda a: a[:ROLLOUT_STEPS], actions)
        return to_numpy(self._rollout_jit(keys["reset"][0], keys["steps"][0], actions, params))

    def batched_rollout(self, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """`vmap` rollout of the `BATCH_ROWS` keys, and the unbatched rollout of each row."""
        keys = derive_keys(jax.random.key(seed))
        actions, _ = self.samples(keys["actions"][0])
        # Row r takes block BATCH_ROWS[r] of the samples: rows with the same key take
        # the same actions.
        actions = jax.tree.map(
            lambda a: np.stack(
                [a[k * ROLLOUT_STEPS : (k + 1) * ROLLOUT_STEPS] for k in BATCH_ROWS]
            ),
            actions,
        )
        batched = to_numpy(self._batched_jit(keys["reset"], keys["steps"], actions, self.params))
        single = [
            to_numpy(
                self._rollout_jit(
                    keys["reset"][r],
                    keys["steps"][r],
                    jax.tree.map(lambda a, r=r: a[r], actions),
                    self.params,
                )
            )
            for r in range(len(BATCH_ROWS))
        ]
        return batched, single


@pytest.fixture(scope="module", params=envs.registered())
def harness(request: pytest.FixtureRequest) -> Harness:
    return Harness(request.param)


def assert_trees_equal(a: Any, b: Any, exact: bool, what: str) -> None:
    """Leaf-wise equality of NumPy trees; floats within 1e-5 unless `exact`."""
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b, f"{what}: structures differ: {tree_a} vs {tree_b}"
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert (x.shape, x.dtype) == (y.shape, y.dtype), (
            f"{what}: {x.shape}/{x.dtype} vs {y.shape}/{y.dtype}"
        )
        if exact or not np.issubdtype(x.dtype, np.floating):
            np.testing.assert_array_equal(x, y, err_msg=what)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=what)


def shapes_and_dtypes(tree: Any, drop_leading: bool = False) -> list[tuple[Any, Any]]:
    return [(x.shape[1:] if drop_leading else x.shape, x.dtype) for x in jax.tree.leaves(tree)]


# --------------------------------------------------------------------------- checks
# One function per property, shared with the suite adapters' conformance
# (tests/envs/test_suite_adapters.py), which runs them on fewer seeds.


def check_rollout_satisfies_contract(harness: Harness, seed: int) -> None:
    out = harness.rollout(seed)
    first, traj = out["first"], out["traj"]
    space = harness.obs_space
    # Observations (reset, every step, final) lie in the observation space.
    assert bool(first["obs_ok"]), f"reset obs {first['obs']} outside {space}"
    bad = np.flatnonzero(~traj["obs_ok"])
    assert bad.size == 0, f"step obs outside {space} at steps {bad}"
    assert traj["final_ok"].all(), "info['final_observation'] outside the observation space"
    if isinstance(space, spaces.Box):
        assert (first["obs"].shape, first["obs"].dtype) == (space.shape, space.dtype)
    # final_observation has the observation's structure, shapes and dtypes.
    assert shapes_and_dtypes(traj["obs"], True) == shapes_and_dtypes(first["obs"])
    assert shapes_and_dtypes(traj["final_obs"]) == shapes_and_dtypes(traj["obs"])
    # Rewards: finite float32 scalars; flags: boolean scalars.
    assert traj["reward"].shape == (ROLLOUT_STEPS,) and traj["reward"].dtype == np.float32
    assert np.isfinite(traj["reward"]).all()
    for flag in ("terminated", "truncated"):
        assert traj[flag].shape == (ROLLOUT_STEPS,) and traj[flag].dtype == np.bool_
    # time counts steps in the episode; an ended episode auto-resets to time 0.
    done = traj["terminated"] | traj["truncated"]
    assert int(first["state"].time) == 0
    np.testing.assert_array_equal(traj["time_after"], np.where(done, 0, traj["time_before"] + 1))
    # final_observation equals obs unless the episode just ended.
    for final, obs in zip(
        jax.tree.leaves(traj["final_obs"]), jax.tree.leaves(traj["obs"]), strict=True
    ):
        np.testing.assert_array_equal(final[~done], obs[~done])


def check_same_key_gives_same_result(harness: Harness, seed: int) -> None:
    assert_trees_equal(harness.rollout(seed), harness.rollout(seed), True, "rerun, same key")


def check_vmap_matches_unbatched(harness: Harness, seed: int) -> None:
    batched, single = harness.batched_rollout(seed)
    rows = [jax.tree.map(lambda x, r=r: x[r], batched) for r in range(len(BATCH_ROWS))]
    for r, (got, expected) in enumerate(zip(rows, single, strict=True)):
        assert_trees_equal(got, expected, False, f"vmap row {r} vs unbatched")
    assert_trees_equal(rows[0], rows[1], True, "vmap rows with the same key")


# --------------------------------------------------------------------------- tests
@SETTINGS
@given(seed=SEEDS)
def test_rollout_satisfies_contract(harness: Harness, seed: int) -> None:
    check_rollout_satisfies_contract(harness, seed)


@SETTINGS
@given(seed=SEEDS)
def test_same_key_gives_same_result(harness: Harness, seed: int) -> None:
    check_same_key_gives_same_result(harness, seed)


@SETTINGS
@given(seed=SEEDS)
def test_vmap_matches_unbatched(harness: Harness, seed: int) -> None:
    check_vmap_matches_unbatched(harness, seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_truncation_exactly_at_time_limit(harness: Harness, seed: int) -> None:
    assert harness.small_params.max_steps_in_episode == SMALL_LIMIT
    traj = harness.rollout(seed, small_limit=True)["traj"]
    # Truncated iff this step is the SMALL_LIMIT-th of the episode.
    np.testing.assert_array_equal(traj["truncated"], traj["time_before"] + 1 == SMALL_LIMIT)
    assert traj["truncated"].any(), "no episode reached the time limit"
    assert (traj["time_before"] < SMALL_LIMIT).all()
    # Auto-reset: the state after an ended episode starts a new one at time 0.
    assert (traj["time_after"][traj["truncated"]] == 0).all()
    assert (np.asarray(traj["state"].time)[traj["truncated"]] == 0).all()


def test_action_space_sample_is_valid_and_covers_space(harness: Harness) -> None:
    space = harness.action_space
    samples, _ = harness.samples(jax.random.key(0))  # asserts every sample is valid
    if isinstance(space, spaces.Discrete):
        assert samples.dtype == space.dtype and samples.shape == (NUM_SAMPLES,)
        assert set(np.unique(samples).tolist()) == set(range(space.n))
    elif isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        assert samples.dtype == space.dtype and samples.shape == (NUM_SAMPLES, *space.shape)
        assert (samples.std(axis=0) > 0).all(), "Box.sample is degenerate"


def test_name_is_registered_id(harness: Harness) -> None:
    assert harness.env.name == harness.env_id
