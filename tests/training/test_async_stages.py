"""Asynchronous sampler and learner (`jaxrl/training/async_stages.py`): the schedule, the
staleness bound, checkpoints of the rows in flight, and the errors of bad input.

The runs need 2 devices (sampler 1, learner 1): they run in a subprocess started with
`--xla_force_host_platform_device_count=2` (`_scenarios/async_runs.py`, tiny GRPO and
PPO-LM on 2-digit addition, 3-4 updates each). The default tier shares one subprocess
(the schedule, the guard, the plan); the slow tier another (a slow reward and a stalled
sampler, resume, PPO-LM and re-scoring on the learner: more runs, each compiled).
"""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

import jaxrl
from jaxrl import algorithms, cli
from jaxrl.config import ConfigError
from jaxrl.training.async_stages import (
    QueuedBatch,
    decode_arrays,
    encode_arrays,
    sampling_version,
    within_bound,
)

from ._scenarios.harness import scenario_env

SCRIPT = __import__("pathlib").Path(__file__).with_name("_scenarios") / "async_runs.py"
TINY = dict(digits=2, num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=1, mlp_size=64)


# ---------------------------------------------------------------------------- pure pieces
def test_each_batch_is_sampled_exactly_k_versions_behind_after_the_first_k():
    assert [sampling_version(b, 1) for b in range(5)] == [0, 0, 1, 2, 3]
    assert [sampling_version(b, 2) for b in range(5)] == [0, 0, 0, 1, 2]
    assert [b - sampling_version(b, 3) for b in range(6)] == [0, 1, 2, 3, 3, 3]


def test_the_bound_admits_rows_at_most_k_versions_old_and_none_from_the_future():
    assert within_bound(3, 5, 2) and within_bound(5, 5, 2)
    assert not within_bound(2, 5, 2)
    assert not within_bound(6, 5, 2)


def test_queued_rows_survive_the_json_of_a_checkpoint_bit_for_bit():
    rng = np.random.default_rng(0)
    rows = {
        "sampler_logp": rng.normal(size=(2, 3, 5)).astype(np.float32),
        "tokens": rng.integers(0, 50, size=(2, 3, 7)).astype(np.int32),
        "mask": rng.random((2, 3, 7)) > 0.5,
    }
    decoded = decode_arrays(json.loads(json.dumps(encode_arrays(rows))))
    for name, value in rows.items():
        assert decoded[name].dtype == value.dtype
        np.testing.assert_array_equal(decoded[name], value)
    queued = QueuedBatch(batch=7, version=5, rows=rows, metrics={"accuracy": [0.25, 0.5]})
    back = QueuedBatch.from_json(json.loads(json.dumps(queued.to_json())))
    assert (back.batch, back.version, back.metrics) == (7, 5, {"accuracy": [0.25, 0.5]})
    assert back.rows["sampler_logp"].tobytes() == rows["sampler_logp"].tobytes()


# ---------------------------------------------------------------------------- bad input
def _grpo(**over):
    return algorithms.get("grpo").make(jaxrl.make_config("grpo", None, **TINY, **over))


def test_a_negative_staleness_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"async_staleness=-1.*>= 0"):
        _grpo(async_staleness=-1)


def test_zero_sampler_devices_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"sampler_devices=0.*>= 1"):
        _grpo(async_staleness=1, sampler_devices=0)


def test_async_mode_on_one_device_is_refused_before_compilation():
    algo = _grpo(async_staleness=1)
    with pytest.raises(ConfigError, match=r"async_staleness=1.*at least 2 devices"):
        algo.make_mesh(1)


def test_async_mode_across_processes_is_refused_for_now(monkeypatch):
    algo = _grpo(async_staleness=1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"async_staleness=1: .*one process for now"):
        algo.make_mesh(None)


def test_async_mode_on_a_multi_turn_task_is_refused():
    with pytest.raises(ConfigError, match=r"async_staleness=1: 0 on the multi-turn task"):
        algorithms.get("grpo").make(
            jaxrl.make_config("grpo", None, task="guess", async_staleness=1)
        )


@pytest.mark.parametrize("algorithm", ["sft", "dpo"])
def test_async_flags_for_an_algorithm_without_a_sampler_say_so(algorithm, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", algorithm, "--async-staleness", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid async_staleness: {algorithm} has no asynchronous mode" in err
    assert "grpo, ppo-lm" in err


# ---------------------------------------------------------------------------- runs
def _scenarios(tmp_path_factory, *scenarios: str) -> dict:
    out = tmp_path_factory.mktemp("async") / "runs.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *scenarios],
        env=scenario_env(2),
        check=True,
        timeout=900,
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The schedule at K = 1 and 2, the bound's guard and the plan (default tier)."""
    return _scenarios(tmp_path_factory, "schedule", "guard", "plan")


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory) -> dict:
    """Delays, resume and PPO-LM / re-scoring variants: more runs (the slow tier)."""
    return _scenarios(tmp_path_factory, "schedule", "delays", "resume", "sigterm", "variants")


def test_the_learner_learns_from_batches_exactly_k_versions_old(runs):
    assert runs["k1"]["staleness"] == [0, 1, 1, 1]
    assert runs["k2"]["staleness"] == [0, 1, 2, 2]
    assert runs["k1"]["dropped"] == [0, 0, 0, 0]
    assert all(np.isfinite(runs["k1"]["loss"]))
    assert runs["k1"]["fingerprint"] != runs["k2"]["fingerprint"]  # stale data differs
    # The sampler-learner mismatch is measured (staleness is real mismatch).
    assert {"rollout_ratio", "rollout_kl"} <= set(runs["k1"]["keys"])


@pytest.mark.slow
def test_a_slow_reward_and_a_stalled_sampler_change_nothing_learned(slow_runs):
    assert slow_runs["delayed"]["staleness"] == slow_runs["k1"]["staleness"]
    assert slow_runs["delayed"]["fingerprint"] == slow_runs["k1"]["fingerprint"]


@pytest.mark.slow
def test_a_resumed_run_learns_from_the_checkpointed_rows_and_ends_bit_exact(slow_runs):
    assert slow_runs["first"]["staleness"] == [0, 1]
    assert slow_runs["resumed"]["staleness"] == [0, 1, 2, 2]  # history + the resumed ones
    assert slow_runs["resumed"]["fingerprint"] == slow_runs["whole"]["fingerprint"]


@pytest.mark.slow
def test_a_sigterm_stops_at_a_checkpoint_and_the_resumed_run_ends_bit_exact(slow_runs):
    assert slow_runs["stopped"].startswith("SIGTERM received: stopped at update "), slow_runs
    assert slow_runs["after_signal"]["staleness"] == [0, 1, 2, 2]
    assert slow_runs["after_signal"]["fingerprint"] == slow_runs["uninterrupted"]["fingerprint"]


def test_a_batch_older_than_the_bound_is_never_learned_from(runs):
    guarded = runs["guarded"]
    assert guarded["dropped"] == [1, 0, 0, 0]
    assert guarded["staleness"] == [0, 1, 1, 1]  # its replacement: the current version's
    assert max(guarded["staleness"]) <= 1


@pytest.mark.slow
def test_ppo_lm_and_grpo_rescoring_on_the_learner_run_asynchronously(slow_runs):
    for name in ("ppo_lm", "grpo_kl_epochs"):
        assert slow_runs[name]["staleness"] == [0, 1, 1], name
        assert all(np.isfinite(slow_runs[name]["loss"])), name
    assert "kl" in slow_runs["grpo_kl_epochs"]["keys"]


def test_plan_compiles_the_sampler_and_the_learner_on_disjoint_sub_meshes(runs):
    plan = runs["plan"]
    assert plan["steps"] == ["async_collect", "async_learn"]
    assert plan["sampler_mesh"] == {"data": 1, "fsdp": 1, "tensor": 1}
    assert plan["mesh"] == {"data": 1, "fsdp": 1, "tensor": 1}
    # One weight update moves the trained parameters (plus a key and counters).
    assert plan["param_bytes"] <= plan["weight_update_bytes"] <= plan["param_bytes"] + 256
    assert all(total > plan["param_bytes"] for total in plan["totals"].values())
    assert "sampler mesh: data=1 x fsdp=1 x tensor=1 (the first 1 devices" in plan["report"]
    assert "weight update (learner -> sampler, every update)" in plan["report"]
