"""`jaxrl.minibatches`: the epochs x minibatches loop reproduces the loops PPO, PQN and
GRPO wrote out (same PRNG splits, same permutations, same minibatch order)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import prng
from jaxrl.minibatches import (
    batch_rows,
    contiguous_split,
    epoch_permutations,
    run_epochs,
    shuffled_minibatches,
)

NUM_EPOCHS, NUM_MINIBATCHES = 3, 4


def record_step(carry, minibatch):
    """A step that counts its calls and returns the minibatch it saw (as metrics)."""
    return carry + 1, minibatch


def _batch(rows=8):
    return {
        "x": jnp.arange(rows * 3, dtype=jnp.float32).reshape(rows, 3),
        "y": jnp.arange(rows, dtype=jnp.int32),
    }


def old_pqn_loop(step, carry, data, key, num_epochs, num_minibatches, rows):
    """PQN's loop before `run_epochs`, verbatim but for names."""

    def epoch(carry, perm):
        split = (
            lambda x: jnp.take(x, perm, axis=0).reshape(  # noqa: E731
                (num_minibatches, -1) + x.shape[1:]
            )
        )
        return jax.lax.scan(step, carry, jax.tree.map(split, data))

    perms = jax.vmap(jax.random.permutation, in_axes=(0, None))(prng.split(key, num_epochs), rows)
    return jax.lax.scan(epoch, carry, perms)


def old_grpo_loop(step, carry, data, key, num_epochs, num_minibatches, rows):
    """GRPO's loop: one `jax.random.permutation` per epoch inside the scan, strided split."""

    def split_rows(x, pieces):
        return jnp.swapaxes(x.reshape(-1, pieces, *x.shape[1:]), 0, 1)

    def epoch(carry, key):
        order = jax.random.permutation(key, rows)
        shuffled = jax.tree.map(lambda x: x[order], data)
        minibatches = jax.tree.map(lambda x: split_rows(x, num_minibatches), shuffled)
        return jax.lax.scan(step, carry, minibatches)

    return jax.lax.scan(epoch, carry, prng.split(key, num_epochs))


def old_ppo_recurrent_minibatches(perm, data, m):
    """PPO's recurrent split before `run_epochs`: permute and split the env axis (1)."""

    def split_env_axis(x, axis):
        x = jnp.take(x, perm, axis=axis)
        x = x.reshape(x.shape[:axis] + (m, -1) + x.shape[axis + 1 :])
        return jnp.moveaxis(x, axis, 0)

    return jax.tree.map(lambda x: split_env_axis(x, 1), data)


def test_run_epochs_reproduces_pqns_loop():
    data, key = _batch(), jax.random.key(3)
    new = run_epochs(
        record_step,
        jnp.int32(0),
        data,
        key,
        num_epochs=NUM_EPOCHS,
        num_minibatches=NUM_MINIBATCHES,
    )
    old = old_pqn_loop(record_step, jnp.int32(0), data, key, NUM_EPOCHS, NUM_MINIBATCHES, 8)
    assert int(new[0]) == NUM_EPOCHS * NUM_MINIBATCHES
    jax.tree.map(np.testing.assert_array_equal, new, old)
    assert new[1]["x"].shape == (NUM_EPOCHS, NUM_MINIBATCHES, 2, 3)


def test_run_epochs_reproduces_grpos_loop_with_a_strided_split():
    def strided(x, pieces):
        return jnp.swapaxes(x.reshape(-1, pieces, *x.shape[1:]), 0, 1)

    data, key = _batch(), jax.random.key(5)
    new = jax.jit(
        lambda d, k: run_epochs(
            record_step,
            jnp.int32(0),
            d,
            k,
            num_epochs=NUM_EPOCHS,
            num_minibatches=NUM_MINIBATCHES,
            split=strided,
        )
    )(data, key)
    old = old_grpo_loop(record_step, jnp.int32(0), data, key, NUM_EPOCHS, NUM_MINIBATCHES, 8)
    jax.tree.map(np.testing.assert_array_equal, new, old)


def test_env_major_rows_give_ppos_recurrent_minibatches():
    # PPO's recurrent rollout (T, B, ...) shuffled as B rows of whole sequences and
    # swapped back to time-major equals the old split along the environment axis.
    t, b, m = 5, 8, 4
    traj = jnp.arange(t * b * 2, dtype=jnp.float32).reshape(t, b, 2)
    perm = jax.random.permutation(jax.random.key(0), b)
    old = old_ppo_recurrent_minibatches(perm, traj, m)
    new = shuffled_minibatches(jnp.swapaxes(traj, 0, 1), perm, m)
    np.testing.assert_array_equal(jnp.swapaxes(new, 1, 2), old)


def test_epoch_permutations_are_each_epochs_own_permutation():
    key = jax.random.key(11)
    perms = epoch_permutations(key, NUM_EPOCHS, 10)
    for perm, epoch_key in zip(perms, prng.split(key, NUM_EPOCHS), strict=True):
        np.testing.assert_array_equal(perm, jax.random.permutation(epoch_key, 10))
        assert sorted(np.asarray(perm).tolist()) == list(range(10))


def test_contiguous_split_and_shuffle_by_hand():
    x = jnp.arange(6)
    np.testing.assert_array_equal(contiguous_split(x, 3), [[0, 1], [2, 3], [4, 5]])
    shuffled = shuffled_minibatches({"x": x}, jnp.array([5, 0, 4, 1, 3, 2]), 2)
    np.testing.assert_array_equal(shuffled["x"], [[5, 0, 4], [1, 3, 2]])


def test_bad_batches_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="num_minibatches=3 must be a positive divisor"):
        batch_rows(_batch(8), 3)
    with pytest.raises(ValueError, match=r"same leading \(row\) axis, got sizes \[4, 8\]"):
        batch_rows({"a": jnp.zeros(8), "b": jnp.zeros(4)}, 2)
    assert batch_rows((_batch(8), None), 2) == 8
