"""Training on 8 (emulated CPU) devices gives the results of training on one.

Each scenario runs `_scenarios/run_training.py` in a subprocess started with
`XLA_FLAGS=--xla_force_host_platform_device_count=8` (the flag must be set
before JAX initialises; this test session keeps its single device). The
1-device references run in the same subprocess with `num_devices=1`, a
one-device mesh.

Tolerances (measured on CPU, jax 0.10.2; see docs/distributed.md):

* agent-axis sharding: each device runs the same program on fewer agents
  (vmap batch 1 instead of 8). Nothing is communicated, but XLA vectorises
  the batched matmuls differently, so results differ in the last float32
  bits: max |param diff| ~1e-7 after 32 updates; every sampled action and
  so every episode statistic is identical.
* env-axis sharding: the rollout batch is split over devices and the
  gradient (and loss statistics) are all-reduced by XLA, which sums in a
  different order than one device does; same order of magnitude.

The asserted tolerances (params rtol 1e-5 / atol 1e-6, metrics rtol 1e-4 /
atol 1e-5) leave about 10x headroom over the measured differences while
still failing on any real sharding bug (wrong shard, missing all-reduce,
mixed-up agents), which changes parameters at the 1e-3 level or more.
"""

from __future__ import annotations

import pytest

from jaxrl.algorithms.ppo import PPO

from ._scenarios.harness import (
    concat_metrics,
    concat_params,
    load_params,
    metrics_max_diff,
    params_max_diff,
    run_group,
    scenario_env,
)

DEVICES = 8
# 8192 steps / (8 envs x 32 steps) = 32 updates.
BASE = {
    "algorithm": "ppo",
    "env": "CartPole-v1",
    "total_steps": 8192,
    "num_envs": 8,
    "num_steps": 32,
    "update_epochs": 2,
    "num_minibatches": 2,
    "progress": False,
}
# A replay-based agent: 32 gradient steps, as many updates as the PPO scenarios.
SAC = {
    "algorithm": "sac",
    "env": "Pendulum-v1",
    "total_steps": 192,
    "learning_starts": 160,
    "batch_size": 32,
    "buffer_size": 192,
    "hidden_sizes": [64, 64],  # 16-16 critics did not deadlock at initialisation; 64-64 did
    "log_every": 16,
    "progress": False,
}
PARAMS_TOL = {"rtol": 1e-5, "atol": 1e-6}
METRICS_TOL = {"rtol": 1e-4, "atol": 1e-5}
ENV_FIELDS = PPO.ENV_FIELDS  # the fields the driver shards along the env axis


def run(tmp_path, runs):
    spec = {"out_dir": str(tmp_path), "devices": DEVICES, "runs": runs}
    (report,) = run_group([(spec, scenario_env(DEVICES))], tmp_path)
    assert report["device_count"] == DEVICES and report["process_count"] == 1
    return report["runs"]


def on_8_and_1_device(tmp_path, kwargs):
    """`kwargs` trained on 8 devices ("d8") and on one ("d1"): `(runs, max |param diff|,
    max metric diffs)`, both within PARAMS_TOL / METRICS_TOL."""
    runs = run(
        tmp_path,
        [
            {"name": "d8", "kwargs": kwargs},
            {"name": "d1", "kwargs": {**kwargs, "num_devices": 1}},
        ],
    )
    assert_single_device(runs["d1"]["shardings"])
    diff = params_max_diff(load_params(tmp_path, "d8"), load_params(tmp_path, "d1"), **PARAMS_TOL)
    metrics = metrics_max_diff(runs["d8"]["metrics"], runs["d1"]["metrics"], **METRICS_TOL)
    return runs, diff, metrics


def assert_agent_sharded(shardings, devices):
    for field, leaves in shardings.items():
        for leaf in leaves:
            assert leaf["mesh_devices"] == devices, field
            assert leaf["spec"] == ["data"], (field, leaf)
            agents_local, agents = leaf["shard_shape_vs_global"][0]
            assert agents_local * devices == agents, (field, leaf)


def assert_env_sharded(shardings, devices):
    for field, leaves in shardings.items():
        for leaf in leaves:
            assert leaf["mesh_devices"] == devices, field
            if field in ENV_FIELDS:
                assert leaf["spec"] == [None, "data"], (field, leaf)
                envs_local, envs = leaf["shard_shape_vs_global"][1]
                assert envs_local * devices == envs, (field, leaf)
            else:
                assert leaf["fully_replicated"], (field, leaf)


def assert_single_device(shardings):
    for field, leaves in shardings.items():
        for leaf in leaves:
            assert leaf["mesh_devices"] == 1 and leaf["fully_replicated"], (field, leaf)


def test_agent_axis_sharding_matches_one_device(tmp_path):
    """8 seeds on 8 devices (one agent per device) == the same 8 seeds on 1 device."""
    runs, diff, metrics = on_8_and_1_device(tmp_path, {**BASE, "num_seeds": 8})
    assert_agent_sharded(runs["d8"]["shardings"], DEVICES)
    assert runs["d8"]["summary"]["num_devices"] == 8 and runs["d1"]["summary"]["num_devices"] == 1
    assert len(runs["d8"]["metrics"]) == 32
    print(f"agent axis: max |param diff| {diff:.3g}; max metric diffs {metrics}")
    s8, s1 = runs["d8"]["summary"], runs["d1"]["summary"]
    assert s8["final_return_per_agent"] == pytest.approx(s1["final_return_per_agent"], rel=1e-6)


def test_sac_on_the_agent_axis_matches_one_device(tmp_path):
    """A replay-based agent: 8 SAC seeds on 8 devices == on 1. Its initialisation (the
    twin critics' orthogonal initialisers, LAPACK QRs) deadlocked jaxlib's CPU thread
    pool when several devices ran it at once; the driver now initialises on one CPU
    device and then places the state (`agents._init_on_one_device`)."""
    runs, diff, metrics = on_8_and_1_device(tmp_path, {**SAC, "num_seeds": 8})
    assert_agent_sharded(runs["d8"]["shardings"], DEVICES)
    assert len(runs["d8"]["metrics"]) == 12
    print(f"sac, agent axis: max |param diff| {diff:.3g}; max metric diffs {metrics}")


def test_mapped_agents_on_8_devices_equal_one_device_bit_for_bit(tmp_path):
    """`agent_execution="map"`: each device maps over its own agents (`shard_map`, 2
    of 16 per device), so every agent runs its one-agent program on either mesh and
    the results are identical, not merely close."""
    kwargs = {**SAC, "num_seeds": 16, "agent_execution": "map"}
    runs, diff, metrics = on_8_and_1_device(tmp_path, kwargs)
    assert_agent_sharded(runs["d8"]["shardings"], DEVICES)
    assert diff == 0.0 and all(d == 0.0 for d in metrics.values()), (diff, metrics)
    fingerprints = {name: runs[name]["summary"]["params_fingerprint"] for name in ("d8", "d1")}
    assert fingerprints["d8"] == fingerprints["d1"], fingerprints


def test_env_axis_sharding_matches_one_device(tmp_path):
    """1 seed, 8 envs on 8 devices (gradients all-reduced by XLA) == 1 device."""
    runs, diff, metrics = on_8_and_1_device(tmp_path, {**BASE, "num_seeds": 1})
    assert_env_sharded(runs["d8"]["shardings"], DEVICES)
    print(f"env axis: max |param diff| {diff:.3g}; max metric diffs {metrics}")
    s8, s1 = runs["d8"]["summary"], runs["d1"]["summary"]
    assert s8["final_return_per_agent"] == pytest.approx(s1["final_return_per_agent"], rel=1e-6)


def test_sweep_on_8_devices_matches_separate_runs(tmp_path):
    """A 2-point lr sweep x 4 seeds (8 agents, one per device) == each lr trained alone.

    Agent i of every sweep point uses seed i, so sweep point g's agents are
    the 4 agents of the separate run with that lr (run on 4 devices, again
    one agent per device).
    """
    lrs = [1e-3, 3e-4]
    runs = run(
        tmp_path,
        [
            {"name": "sweep", "kwargs": {**BASE, "num_seeds": 4, "sweep": {"lr": lrs}}},
            *[
                {"name": f"lr{i}", "kwargs": {**BASE, "num_seeds": 4, "lr": lr, "num_devices": 4}}
                for i, lr in enumerate(lrs)
            ],
        ],
    )
    assert_agent_sharded(runs["sweep"]["shardings"], DEVICES)
    assert_agent_sharded(runs["lr0"]["shardings"], 4)

    separate = concat_params([load_params(tmp_path, f"lr{i}") for i in range(len(lrs))])
    diff = params_max_diff(load_params(tmp_path, "sweep"), separate, **PARAMS_TOL)
    metrics = metrics_max_diff(
        runs["sweep"]["metrics"],
        concat_metrics([runs[f"lr{i}"]["metrics"] for i in range(len(lrs))]),
        **METRICS_TOL,
    )
    print(f"sweep: max |param diff| {diff:.3g}; max metric diffs {metrics}")
    sweep_summary = runs["sweep"]["summary"]
    assert sweep_summary["num_agents"] == 8
    for i, point in enumerate(sweep_summary["sweep"]):
        assert point["lr"] == lrs[i]
        alone = runs[f"lr{i}"]["summary"]
        assert point["final_return_mean"] == pytest.approx(alone["final_return_mean"], rel=1e-6)
    # The lr really differs between the sweep's halves (logged per agent).
    assert runs["sweep"]["metrics"][0]["lr"] == pytest.approx([1e-3] * 4 + [3e-4] * 4)
