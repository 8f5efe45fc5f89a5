"""A run that cannot fit is refused in seconds, with an estimate (issue 36, item 8): the
state from its abstract shapes before it is allocated, each compiled step from XLA's
memory analysis before it first runs (`jaxrl.training.memory`)."""

from __future__ import annotations

import re

import jax
import pytest

import jaxrl
from jaxrl import cli
from jaxrl import config as cfg
from jaxrl.training import memory


def _error_line(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_step_larger_than_the_machine_is_refused_before_it_runs(tmp_path, capsys):
    """The issue's case, 4x larger: PPO's state is small (150 MB) but its update holds
    the whole rollout and its minibatches (66 GiB on CartPole), beyond any CI machine."""
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "--num-envs", "4000000", "--num-steps", "16"]
    argv += ["--total-steps", "64000000", "--no-progress", "--run-dir", str(run_dir)]
    line = _error_line(argv, capsys)
    assert re.match(
        r"jaxrl: error: invalid run: the compiled update program needs about [\d.]+ GiB "
        r"\(temporaries [\d.]+ GiB.*\) but the host has [\d.]+ GiB available; make it "
        r"smaller .* or pass --no-memory-check",
        line,
    ), line
    assert not any((run_dir / "checkpoints").iterdir())  # nothing ran, nothing saved


def test_a_state_larger_than_the_machine_is_refused_before_it_is_allocated(capsys):
    """DQN's replay buffer of 4e9 CartPole transitions: ~150 GB of state, refused from
    its abstract shapes (allocating it would fail or swap)."""
    argv = ["train", "dqn", "--env", "CartPole-v1", "--buffer-size", "4000000000"]
    argv += ["--total-steps", "4000000000", "--no-progress"]
    line = _error_line(argv, capsys)
    assert re.match(
        r"jaxrl: error: invalid run: the training state needs about [\d.]+ GiB \(state ", line
    ), line


def test_check_fits_compares_the_estimate_with_the_available_memory(monkeypatch):
    cpu = jax.devices("cpu")
    mib = 2**20
    monkeypatch.setattr(memory, "available_bytes", lambda devices: 100 * mib)
    memory.check_fits("x", {"state": 90 * mib}, cpu[:1])  # exactly HEADROOM: fits
    with pytest.raises(cfg.ConfigError, match=r"x needs about 91 MiB \(state 91 MiB\) but "):
        memory.check_fits("x", {"state": 91 * mib}, cpu[:1])
    # CPU devices share the host: two of them need twice one device's share.
    if len(cpu) > 1:
        with pytest.raises(cfg.ConfigError, match=r"needs about 100 MiB"):
            memory.check_fits("x", {"temporaries": 50 * mib}, cpu[:2])
    assert memory.tree_bytes({"a": jax.ShapeDtypeStruct((3, 4), "float32")}) == 48


def test_no_memory_check_runs_what_the_check_would_refuse(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda devices: 1)
    small = {"env": "CartPole-v1", "num_envs": 4, "num_steps": 16, "total_steps": 256}
    with pytest.raises(cfg.ConfigError, match="the training state needs about"):
        jaxrl.train("ppo", **small, progress=False)
    result = jaxrl.train("ppo", **small, progress=False, check_memory=False)
    assert result.summary["env_steps_per_agent"] == 256
