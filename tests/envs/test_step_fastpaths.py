"""The shortcuts `Environment.step` takes for speed change nothing but the key streams.

* `stochastic_step` / `stochastic_reset` (and Acrobot's `step_is_stochastic`):
  an environment that claims its `step_env` (or `reset_env`) ignores the key must
  really ignore it, since `step` then hands the same key to the other one.
* `obs_from_state`: `reset_env` / `step_env` observations equal `get_obs(state)`,
  and `step` (auto-reset observation built from the selected state) equals the
  textbook auto-reset that selects between the reset and the step observation.
* MinAtar's `paint` (a scatter) equals the broadcast-compare-reduce it replaced.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.envs.minatar.common import GRID, paint, paint_point

STEPS = 40
SMALL_LIMIT = 7  # forces auto-resets inside the rollout (if nothing terminates)


def _assert_equal(a: Any, b: Any, what: str) -> None:
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b, what
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=what)


def reference_step(env: Any, key: jax.Array, state: Any, action: Any, params: Any) -> tuple:
    """Auto-reset written out the plain way: both observations, selected leaf-wise."""
    if env.step_is_stochastic(params) and env.stochastic_reset:
        key_step, key_reset = jax.random.split(key)
    else:
        key_step = key_reset = key
    obs_s, state_s, reward, terminated, _ = env.step_env(key_step, state, action, params)
    truncated = env.is_truncated(state_s, params)
    done = terminated | truncated
    obs_r, state_r = env.reset_env(key_reset, params)
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(done, x, y), a, b)  # noqa: E731
    return pick(obs_r, obs_s), pick(state_r, state_s), reward, terminated, truncated, obs_s


def _other_key(key: jax.Array) -> jax.Array:
    return jax.random.fold_in(key, 12345)


@pytest.mark.parametrize("env_id", envs.registered())
def test_step_shortcuts_match_plain_auto_reset(env_id: str) -> None:
    env, params = envs.make(env_id, max_steps_in_episode=SMALL_LIMIT)
    sample = env.action_space(params).sample

    def rollout(key: jax.Array) -> dict[str, Any]:
        _, state0 = env.reset(key, params)

        def body(state: Any, key: jax.Array) -> tuple[Any, dict[str, Any]]:
            k_act, k_step = jax.random.split(key)
            action = sample(k_act)
            obs, nxt, reward, term, trunc, info = env.step(k_step, state, action, params)
            ref = reference_step(env, k_step, state, action, params)
            out = {
                "ours": (obs, nxt, reward, term, trunc, info["final_observation"]),
                "ref": ref,
            }
            # Keys the flags say are unused must not matter.
            k_other = _other_key(k_step)
            if not env.step_is_stochastic(params):
                out["step_key_a"] = env.step_env(k_step, state, action, params)
                out["step_key_b"] = env.step_env(k_other, state, action, params)
            if not env.stochastic_reset:
                out["reset_key_a"] = env.reset_env(k_step, params)
                out["reset_key_b"] = env.reset_env(k_other, params)
            if env.obs_from_state:
                step_obs, step_state, *_ = env.step_env(k_step, state, action, params)
                reset_obs, reset_state = env.reset_env(k_step, params)
                out["obs_pairs"] = (
                    (step_obs, env.get_obs(step_state, params)),
                    (reset_obs, env.get_obs(reset_state, params)),
                )
            return nxt, out

        _, out = jax.lax.scan(body, state0, jax.random.split(key, STEPS))
        return out

    out = jax.jit(rollout)(jax.random.key(3))
    _assert_equal(out["ours"], out["ref"], f"{env_id}: step vs plain auto-reset")
    done = np.asarray(out["ours"][3]) | np.asarray(out["ours"][4])
    assert done.any(), "the rollout should auto-reset at least once"
    if "step_key_a" in out:
        _assert_equal(out["step_key_a"], out["step_key_b"], f"{env_id}: step_env uses its key")
    if "reset_key_a" in out:
        _assert_equal(out["reset_key_a"], out["reset_key_b"], f"{env_id}: reset_env uses its key")
    for a, b in out.get("obs_pairs", ()):
        _assert_equal(a, b, f"{env_id}: observation is not get_obs(state)")


def test_deterministic_envs_skip_the_split() -> None:
    """The point of the flags: classic control steps hand the key to reset unsplit."""
    env, params = envs.make("CartPole-v1")
    key = jax.random.key(0)
    state = env.reset(key, params)[1].replace(time=jnp.int32(params.max_steps_in_episode))
    obs, *_ = env.step(key, state, 0, params)  # truncates: obs is the reset one
    np.testing.assert_array_equal(obs, env.reset(key, params)[0])


def test_acrobot_torque_noise_is_drawn_only_when_nonzero() -> None:
    env, params = envs.make("Acrobot-v1")
    assert not env.step_is_stochastic(params)
    noisy = params.replace(torque_noise_max=0.5)
    assert env.step_is_stochastic(noisy)
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step_env)
    keys = [jax.random.key(1), jax.random.key(2)]
    quiet = [step(k, state, 1, params)[1] for k in keys]
    _assert_equal(quiet[0], quiet[1], "noise-free Acrobot step depends on the key")
    loud = [step(k, state, 1, noisy)[1] for k in keys]
    assert not np.array_equal(loud[0].velocity_2, loud[1].velocity_2)
    # The noise is uniform in [-max, max] added to the torque: the noisy step lies
    # between the steps with torque 1 -+ 0.5 (the dynamics are monotone in torque).
    lo, hi = step(keys[0], state, 0, params)[1], step(keys[0], state, 2, params)[1]
    assert lo.velocity_2 < loud[0].velocity_2 < hi.velocity_2


def _paint_reference(ys: jax.Array, xs: jax.Array, mask: jax.Array) -> jax.Array:
    """The broadcast-compare-reduce `paint` replaced by a scatter."""
    rows = jnp.arange(GRID)[None, :, None] == ys[:, None, None]
    cols = jnp.arange(GRID)[None, None, :] == xs[:, None, None]
    return jnp.any(rows & cols & mask[:, None, None], axis=0)


@pytest.mark.parametrize("n", [1, 3, 8, 17])
def test_paint_matches_broadcast_reference(n: int) -> None:
    rng = np.random.default_rng(n)
    # Coordinates include off-grid values (-2..11), duplicates and masked-out points.
    ys = jnp.asarray(rng.integers(-2, GRID + 2, (500, n)), jnp.int32)
    xs = jnp.asarray(rng.integers(-2, GRID + 2, (500, n)), jnp.int32)
    mask = jnp.asarray(rng.random((500, n)) < 0.7)
    ours = jax.jit(jax.vmap(paint))(ys, xs, mask)
    ref = jax.jit(jax.vmap(_paint_reference))(ys, xs, mask)
    np.testing.assert_array_equal(ours, ref)
    # Unbatched as well (a different lowering of the scatter).
    np.testing.assert_array_equal(jax.jit(paint)(ys[0], xs[0], mask[0]), ref[0])


def test_paint_point_matches_broadcast_reference() -> None:
    coords = jnp.arange(-2, GRID + 2, dtype=jnp.int32)
    ys, xs = (a.ravel() for a in jnp.meshgrid(coords, coords, indexing="ij"))
    ours = jax.jit(jax.vmap(paint_point))(ys, xs)
    ref = jax.vmap(lambda y, x: _paint_reference(y[None], x[None], jnp.ones((1,), bool)))(ys, xs)
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(jax.jit(paint_point)(ys[30], xs[30]), ref[30])
