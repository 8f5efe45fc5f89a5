"""The driver's chunking (how many updates each compiled program runs) and the phases
of an update (`Algorithm.phases`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxrl
from jaxrl import algorithms
from jaxrl.training.contract import Algorithm
from jaxrl.training.driver import RunConfig, chunk_length

SPU = 512  # steps per update of PureJaxRL's CartPole config (4 envs x 128 steps)


@pytest.mark.parametrize(
    ("num_updates", "run", "expected"),
    [
        # Default log interval: target num_updates // 50 = 19, snapped to 16, which
        # divides 976, so the whole run is one program.
        (976, RunConfig(), 16),
        # 977 is prime: no divisor near 19, so chunks of 19 and a tail program.
        (977, RunConfig(), 19),
        # Checkpoints every 8 updates: the chunk must divide 8 (and 976).
        (976, RunConfig(checkpoint_every=8 * SPU, run_dir="x"), 8),
        # Checkpoints every 7 updates, 976 has no divisor in (3, 7]: largest divisor of 7.
        (976, RunConfig(checkpoint_every=7 * SPU, run_dir="x"), 7),
        # Short runs log every update.
        (32, RunConfig(), 1),
        (3, RunConfig(), 1),
        # An explicit log interval is honoured, reduced to a divisor of the checkpoint one.
        (976, RunConfig(log_every=10 * SPU), 10),
        (976, RunConfig(log_every=10 * SPU, checkpoint_every=4 * SPU, run_dir="x"), 2),
        (5, RunConfig(log_every=100 * SPU), 5),
    ],
)
def testchunk_length(num_updates, run, expected):
    assert chunk_length(run, SPU, num_updates) == expected


def test_every_chunk_boundary_is_a_checkpoint_boundary():
    for ckpt in range(1, 40):
        for num_updates in (97, 976, 1000):
            run = RunConfig(checkpoint_every=ckpt * SPU, run_dir="x")
            assert ckpt % chunk_length(run, SPU, num_updates) == 0


def test_run_with_a_tail_chunk_does_every_update_once():
    """5 updates logged every 2: programs of 2, 2 and a compiled tail of 1 update."""
    tiny = dict(env="CartPole-v1", num_envs=2, num_steps=8, update_epochs=1, num_minibatches=1)
    tail = jaxrl.train("ppo", total_steps=80, log_every=32, progress=False, **tiny)
    assert [row["update"] for row in tail.metrics] == [2, 4, 5]
    assert tail.summary["env_steps_per_agent"] == 80
    assert int(np.asarray(tail.state.update_step).reshape(-1)[0]) == 5
    # The same five updates, one per program, give the same parameters.
    single = jaxrl.train("ppo", total_steps=80, log_every=16, progress=False, **tiny)
    assert [row["update"] for row in single.metrics] == [1, 2, 3, 4, 5]
    for a, b in zip(
        jax.tree.leaves(tail.state.params), jax.tree.leaves(single.state.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- phases
class _Fused(Algorithm):
    def update(self, state):
        return state, {}


class _Learner(Algorithm):
    def learn(self, state, batch):
        return state, {}


class _Sampler(_Learner):
    def prepare(self, host_state):
        return None, host_state

    def collect(self, state, inputs):
        return state, inputs


class _MultiTurn(_Sampler):
    def respond(self, collected, host_state):
        return None, host_state


class _Both(_Fused, _Learner):
    pass


def test_phases_are_the_implemented_ones_in_run_order():
    """`Algorithm.phases`: the one answer the contract, the steppers and `jaxrl plan` read."""
    assert _Fused().phases == ("update",) and not _Fused().staged
    assert _Learner().phases == ("process", "learn") and _Learner().staged
    assert _Sampler().phases == ("prepare", "collect", "process", "learn")
    assert _MultiTurn().phases == ("prepare", "collect", "respond", "process", "learn")
    for neither_or_both in (Algorithm(), _Both()):
        with pytest.raises(TypeError, match="must implement exactly one of update"):
            neither_or_both.phases  # noqa: B018


def test_phases_of_the_registered_algorithms():
    phases = {name: algorithms.get(name).make(algorithms.get(name).default_config()).phases
              for name in ("ppo", "sft", "grpo")}  # fmt: skip
    assert phases == {
        "ppo": ("update",),
        "sft": ("process", "learn"),
        "grpo": ("prepare", "collect", "process", "learn"),
    }
