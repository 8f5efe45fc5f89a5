"""n-step targets against a hand-written loop, with terminations, truncations and the
write head mixed in, and a few by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.replay import buffer, nstep

ENVS, GAMMA = 2, 0.9


def reference(reward, terminated, truncated, start, n, gamma):
    """Plain-Python n-step target inputs of one environment's steps from `start`.

    `reward` etc. hold only the written steps, oldest first: the window stops at
    their end (the write head), after a termination (no bootstrap) or after a
    truncation (bootstrap from that step's final observation)."""
    ret, discount = 0.0, 1.0
    for t in range(start, min(start + n, len(reward))):
        ret += discount * reward[t]
        discount *= gamma
        if terminated[t]:
            return ret, 0.0, t
        if truncated[t]:
            return ret, discount, t
    return ret, discount, t


def fill(steps, capacity, seed):
    rng = np.random.default_rng(seed)
    reward = rng.normal(size=(steps, ENVS)).astype(np.float32)
    terminated = rng.random((steps, ENVS)) < 0.15
    truncated = rng.random((steps, ENVS)) < 0.15  # sometimes both: termination wins
    example = nstep.Transition(
        observation=jnp.float32(0),
        action=jnp.int32(0),
        reward=jnp.float32(0),
        terminated=jnp.bool_(False),
        truncated=jnp.bool_(False),
        next_observation=jnp.float32(0),
    )
    state = buffer.init(example, capacity, ENVS)
    for t in range(steps):
        # Observations name their step and environment; next observations likewise + 0.5.
        obs = t * 10.0 + np.arange(ENVS)
        item = nstep.Transition(
            obs, np.arange(ENVS), reward[t], terminated[t], truncated[t], obs + 0.5
        )
        state = buffer.add(state, jax.tree.map(jnp.asarray, item))
    return state, reward, terminated, truncated


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("steps", [12, 20], ids=["partial", "wrapped"])
def test_nstep_batch_matches_a_python_loop(n, steps):
    capacity = 16 * ENVS  # 16 steps per environment: 20 steps overwrite the first 4
    state, reward, terminated, truncated = fill(steps, capacity, seed=n)
    kept = range(max(0, steps - 16), steps)
    slots = jnp.arange(buffer.num_items(state), dtype=jnp.int32)
    batch = jax.jit(nstep.nstep_batch, static_argnums=2)(state, slots, n, GAMMA)
    first = buffer.gather(state, slots)
    for i, (obs, env) in enumerate(zip(np.asarray(first.observation), first.action, strict=True)):
        t = int(obs // 10)
        start = t - kept[0]
        rows = slice(kept[0], steps)
        ret, discount, last = reference(
            reward[rows, env], terminated[rows, env], truncated[rows, env], start, n, GAMMA
        )
        np.testing.assert_allclose(batch.reward[i], ret, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(batch.discount[i], discount, rtol=1e-5)
        assert batch.next_observation[i] == (kept[0] + last) * 10.0 + env + 0.5
        assert batch.observation[i] == obs and batch.action[i] == env


def test_nstep_return_by_hand():
    reward = jnp.array([1.0, 2.0, 4.0, 8.0])
    no, yes = False, True
    valid = jnp.ones(4, bool)

    def run(terminated, truncated, valid=valid):
        out = nstep.nstep_return(reward, jnp.array(terminated), jnp.array(truncated), valid, 0.5)
        return [float(x) for x in out]

    # 1 + 0.5 * 2 + 0.25 * 4 + 0.125 * 8 = 4, bootstrap 0.5^4 from step 3.
    assert run([no] * 4, [no] * 4) == [4.0, 0.0625, 3.0]
    # Truncated at step 1: 1 + 0.5 * 2 = 2, bootstrap 0.5^2 from step 1's final observation.
    assert run([no] * 4, [no, yes, no, no]) == [2.0, 0.25, 1.0]
    # Terminated at step 1 (also when truncated too): no bootstrap.
    assert run([no, yes, no, no], [no, yes, no, no]) == [2.0, 0.0, 1.0]
    # The write head after step 2: 1 + 1 + 1 = 3, bootstrap 0.5^3 from step 2.
    assert run([no] * 4, [no] * 4, jnp.array([yes, yes, yes, no])) == [3.0, 0.125, 2.0]


def test_n_out_of_range_names_n():
    state, *_ = fill(4, 8 * ENVS, seed=0)
    with pytest.raises(ConfigError, match="n="):
        nstep.nstep_batch(state, jnp.array([0]), 0, GAMMA)
    with pytest.raises(ConfigError, match="n="):
        nstep.nstep_batch(state, jnp.array([0]), 9, GAMMA)  # only 8 steps per environment
    with pytest.raises(ConfigError, match="gamma"):
        nstep.nstep_batch(state, jnp.array([0]), 2, 1.5)
