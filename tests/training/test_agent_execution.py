"""`RunConfig.agent_execution`: a device's agents batched (`vmap`) or one by one (`map`).

Both run the same updates. `map` gives every agent exactly the program of a one-agent
run, so an agent's numbers do not depend on how many agents ran beside it (bit for
bit); `vmap` batches the products, which rounds differently in the last bits.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

import jaxrl
from jaxrl import cli
from jaxrl.config import ConfigError
from jaxrl.training.driver import RunConfig
from jaxrl.training.driver import train as driver_train

from .test_contract import FusedToy, StagedToy, ToyConfig

# A short DQN run: 60 warm-up steps, then 40 gradient steps, so both sides of the
# learning phase's `lax.cond` run (under `map` it stays a branch).
DQN = {
    "env": "CartPole-v1",
    "total_steps": 100,
    "num_envs": 1,
    "learning_starts": 60,
    "batch_size": 16,
    "buffer_size": 100,
    "hidden_sizes": (16, 16),
    "progress": False,
    "log_every": 20,
}


def leaves(result, agents=slice(None)):
    return [np.asarray(x)[agents] for x in jax.tree.leaves(result.state.params)]


def drop_checkpoints_after(run_dir, update: int) -> None:
    """Deletes the checkpoints after `update` (they are named by update): a run killed there."""
    for step in (run_dir / "checkpoints").iterdir():
        if step.name.isdigit() and int(step.name) > update:
            shutil.rmtree(step)


def test_a_mapped_agent_is_bit_identical_to_its_run_alone():
    """Agent 0 of 3 equals a one-seed run; agents 0-1 of 3 equal agents 0-1 of 2."""
    one = jaxrl.train("dqn", num_seeds=1, **DQN)
    two = jaxrl.train("dqn", num_seeds=2, agent_execution="map", **DQN)
    three = jaxrl.train("dqn", num_seeds=3, agent_execution="map", **DQN)
    for a, b in zip(leaves(one), leaves(three, slice(0, 1)), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(leaves(two), leaves(three, slice(0, 2)), strict=True):
        np.testing.assert_array_equal(a, b)
    for row_2, row_3 in zip(two.metrics, three.metrics, strict=True):
        for key in ("episodes", "episode_return", "loss", "q_mean"):
            np.testing.assert_array_equal(row_2[key], np.asarray(row_3[key])[:2], err_msg=key)


@pytest.mark.parametrize(
    ("algorithm", "kwargs"),
    [
        ("dqn", DQN),
        (
            "ppo",
            {"env": "CartPole-v1", "total_steps": 1024, "num_envs": 4, "num_steps": 64},
        ),
    ],
)
def test_map_and_vmap_compute_the_same_updates(algorithm, kwargs):
    """Same agents, same updates: parameters agree to float32 rounding, and so do the
    logged metrics, row for row."""
    kwargs = {**kwargs, "progress": False, "num_seeds": 3}
    mapped = jaxrl.train(algorithm, agent_execution="map", **kwargs)
    vmapped = jaxrl.train(algorithm, agent_execution="vmap", **kwargs)
    for a, b in zip(leaves(mapped), leaves(vmapped), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(mapped.metrics) == len(vmapped.metrics)
    for row_m, row_v in zip(mapped.metrics, vmapped.metrics, strict=True):
        assert row_m.keys() == row_v.keys()
        for key in row_m.keys() - {"steps_per_second", "seconds"}:
            m, v = (np.asarray(row[key], dtype=float) for row in (row_m, row_v))  # None: NaN
            np.testing.assert_allclose(m, v, rtol=1e-4, atol=1e-5, err_msg=key)


def test_map_trains_a_sweep_and_a_fused_toy():
    """Any fused algorithm, sweep points included: the toy fits y = 3x - 1 either way."""
    algo = FusedToy(ToyConfig(total_steps=64 * 40, batch_size=64))
    run = RunConfig(num_seeds=2, sweep={"lr": [0.3, 0.5]}, progress=False)
    mapped = driver_train(algo, RunConfig(**{**run.__dict__, "agent_execution": "map"}))
    vmapped = driver_train(algo, run)
    w = np.asarray(mapped.state.params["w"])
    assert w.shape == (4,) and np.allclose(w, 3.0, atol=0.05)
    np.testing.assert_allclose(w, np.asarray(vmapped.state.params["w"]), rtol=1e-5)


def test_bad_agent_execution_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"invalid agent_execution='pmap': must be one of"):
        RunConfig(agent_execution="pmap").validate(())
    staged = StagedToy(ToyConfig(total_steps=64, batch_size=32))
    with pytest.raises(ConfigError, match=r"invalid agent_execution='map': must be 'vmap' for"):
        driver_train(staged, RunConfig(num_seeds=2, agent_execution="map", progress=False))


def test_a_resumed_mapped_run_matches_an_uninterrupted_one(tmp_path):
    """Checkpoints every 20 steps (2 updates of 10); the ones after update 4 deleted (a
    run killed there), then resumed: the same parameters, bit for bit."""
    kwargs = {**DQN, "num_seeds": 2, "agent_execution": "map", "run_dir": str(tmp_path)}
    kwargs["keep_checkpoints"] = 10
    whole = jaxrl.train("dqn", checkpoint_every=20, **kwargs)
    drop_checkpoints_after(tmp_path, 4)
    checkpoints = tmp_path / "checkpoints"
    assert sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())[-1] == 4
    resumed = jaxrl.train("dqn", checkpoint_every=20, resume=True, **kwargs)
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]


def test_cli_resume_keeps_the_runs_agent_execution(tmp_path):
    """`jaxrl train --run-dir D --resume` continues a mapped run mapped (the saved
    config's choice), so it ends where the uninterrupted run did."""
    run_dir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--total-steps", "100", "--num-envs", "1"]
    flags += ["--learning-starts", "60", "--batch-size", "16", "--buffer-size", "100"]
    flags += ["--num-seeds", "2", "--checkpoint-every", "20", "--keep-checkpoints", "10"]
    common = ["--run-dir", str(run_dir), "--no-progress"]
    assert cli.main(["train", "dqn", *flags, "--agent-execution", "map", *common]) == 0
    whole = json.loads((run_dir / "summary.json").read_text())["params_fingerprint"]
    drop_checkpoints_after(run_dir, 4)
    assert cli.main(["train", "dqn", "--resume", *common]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["params_fingerprint"] == whole
    assert json.loads((run_dir / "config.json").read_text())["run"]["agent_execution"] == "map"
