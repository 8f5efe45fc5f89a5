"""The uniform ring buffer: only written slots are sampled (also after wrap-around),
sequences are contiguous and never cross the write head, vmap equals separate buffers,
and a checkpoint round trip continues with the same samples."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

# pytest puts this folder on sys.path (no __init__.py), so the sibling module imports.
from test_sum_tree import chi_square_bound

from jaxrl.config import ConfigError
from jaxrl.replay import buffer, prioritised
from jaxrl.training.checkpoint import Checkpointer

WIDTH = 3  # parallel environments: items per add


def example():
    return {"t": jnp.int32(0), "env": jnp.int32(0), "obs": jnp.zeros(2, jnp.float32)}


def step_items(t):
    """The items of time step `t`: each records its step and environment."""
    env = jnp.arange(WIDTH, dtype=jnp.int32)
    obs = jnp.stack([jnp.full(WIDTH, t, jnp.float32), env.astype(jnp.float32)], axis=1)
    return {"t": jnp.full(WIDTH, t, jnp.int32), "env": env, "obs": obs}


@functools.partial(jax.jit, static_argnums=(1, 2))
def filled(start, steps, capacity):
    """A buffer after adding steps start, start + 1, ..., start + steps - 1."""
    state = buffer.init(example(), capacity, WIDTH)
    return jax.lax.fori_loop(0, steps, lambda i, s: buffer.add(s, step_items(start + i)), state)


sample = jax.jit(buffer.sample, static_argnums=2)
sample_sequences = jax.jit(buffer.sample_sequences, static_argnums=(2, 3))


def test_init_layout_and_can_sample():
    state = buffer.init(example(), 13, WIDTH)  # 13 // 3 = 4 rows of 3
    assert state.items["obs"].shape == (4, WIDTH, 2) and state.items["t"].dtype == jnp.int32
    assert buffer.capacity(state) == 12
    state = filled(0, 2, 12)
    assert int(buffer.num_items(state)) == 6
    assert bool(buffer.can_sample(state, 6)) and not bool(buffer.can_sample(state, 7))
    assert not bool(buffer.can_sample(state, 1, length=3))
    state = filled(0, 9, 12)
    assert int(buffer.num_items(state)) == 12 and int(state.head) == 9 % 4


@pytest.mark.parametrize("steps", [2, 6, 9], ids=["partial", "wrapped", "wrapped-twice"])
def test_uniform_samples_only_written_slots_uniformly(steps):
    state = filled(0, steps, 12)  # 4 rows: steps >= 4 have overwritten the oldest rows
    written = list(range(max(0, steps - 4), steps))
    keys = jax.random.split(jax.random.key(0), 500)
    samples = jax.lax.map(lambda k: sample(state, k, 12), keys)
    t, env = np.asarray(samples.items["t"]).ravel(), np.asarray(samples.items["env"]).ravel()
    assert set(np.unique(t)) == set(written)
    np.testing.assert_array_equal(np.asarray(samples.items["obs"]).reshape(-1, 2), np.c_[t, env])
    # The returned slot indices point at the returned items.
    again = buffer.gather(state, samples.indices)
    np.testing.assert_array_equal(again["t"], samples.items["t"])
    cells = (t - written[0]) * WIDTH + env
    counts = np.bincount(cells, minlength=len(written) * WIDTH)
    chi_square_bound(counts, np.full(len(written) * WIDTH, 1 / (len(written) * WIDTH)))


def test_sequences_are_contiguous_and_never_cross_the_write_head():
    state = filled(0, 13, 30)  # 10 rows; steps 3..12 kept, head between 12 and 3
    keys = jax.random.split(jax.random.key(1), 100)
    samples = jax.lax.map(lambda k: sample_sequences(state, k, 30, 4), keys)
    t = np.asarray(samples.items["t"]).reshape(-1, 4)
    env = np.asarray(samples.items["env"]).reshape(-1, 4)
    np.testing.assert_array_equal(np.diff(t, axis=1), 1)  # contiguous in time: no jump 12 -> 3
    assert np.all(env == env[:, :1])  # one environment per window
    assert t.min() == 3 and t.max() == 12
    # Every window of written steps (starts 3..9, 3 envs) is equally likely.
    counts = np.bincount((t[:, 0] - 3) * WIDTH + env[:, 0], minlength=7 * WIDTH)
    chi_square_bound(counts, np.full(7 * WIDTH, 1 / (7 * WIDTH)))


def test_gather_windows_marks_steps_past_the_head_invalid():
    state = filled(0, 6, 30)  # steps 0..5 written in rows 0..5 of 10
    start = jnp.array([4 * WIDTH + 1, 0])  # step 4 of env 1, step 0 of env 0
    items, valid = buffer.gather_windows(state, start, 3)
    np.testing.assert_array_equal(valid, [[True, True, False], [True, True, True]])
    np.testing.assert_array_equal(items["t"][:, :2], [[4, 5], [0, 1]])


def test_bad_arguments_name_the_field():
    state = buffer.init(example(), 12, WIDTH)
    with pytest.raises(ConfigError, match="capacity"):
        buffer.init(example(), 2, WIDTH)
    with pytest.raises(ConfigError, match="add_batch_size"):
        buffer.init(example(), 12, 0)
    with pytest.raises(ConfigError, match="batch_size"):
        buffer.sample(state, jax.random.key(0), 13)  # a buffer smaller than a batch
    with pytest.raises(ConfigError, match="length"):
        buffer.sample_sequences(state, jax.random.key(0), 2, 5)  # only 4 steps per env
    with pytest.raises(ConfigError, match="items"):
        buffer.add(state, {**step_items(0), "obs": jnp.zeros((WIDTH, 3))})


def test_vmap_over_three_buffers_equals_three_buffers():
    def run(offset, key):
        state = prioritised.init(example(), 12, WIDTH)
        state = jax.lax.fori_loop(
            0, 6, lambda i, s: prioritised.add(s, step_items(offset + i)), state
        )
        first = prioritised.sample(state, key, 8, 0.4)
        state = prioritised.set_priorities(state, first.indices, first.indices * 0.5 + 0.1, 0.6)
        uniform = buffer.sample_sequences(state.buffer, key, 5, 2)
        return state, prioritised.sample(state, key, 8, 0.4), uniform

    offsets, keys = jnp.array([0, 100, 200]), jax.random.split(jax.random.key(2), 3)
    stacked = jax.jit(jax.vmap(run))(offsets, keys)
    single = jax.jit(run)
    for i in range(3):
        one = single(offsets[i], keys[i])
        jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x, i=i: x[i], stacked), one)


def test_checkpoint_round_trip_continues_with_the_same_samples(tmp_path):
    @jax.jit
    def continue_run(state, key):
        state = prioritised.add(state, step_items(50))
        drawn = prioritised.sample(state, key, 12, 0.5)
        state = prioritised.set_priorities(state, drawn.indices, jnp.arange(12.0) + 1, 0.7)
        return prioritised.sample(state, key, 12, 0.5)

    state = prioritised.init(example(), 12, WIDTH)
    state = jax.jit(lambda s: prioritised.add(prioritised.add(s, step_items(1)), step_items(2)))(
        state
    )
    state = jax.jit(prioritised.set_priorities)(
        state, jnp.array([0, 4]), jnp.array([3.0, 0.2]), 1.0
    )
    checkpointer = Checkpointer(tmp_path / "ckpt")
    checkpointer.save(1, state, {})
    step, restored, _ = checkpointer.restore_latest(prioritised.init(example(), 12, WIDTH))
    checkpointer.close()
    assert step == 1
    jax.tree.map(np.testing.assert_array_equal, restored, state)
    key = jax.random.key(3)
    jax.tree.map(
        np.testing.assert_array_equal, continue_run(restored, key), continue_run(state, key)
    )
