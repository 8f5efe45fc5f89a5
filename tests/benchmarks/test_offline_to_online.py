"""The offline-to-online result (`rlpd_from_rebrac_pendulum`, benchmarks/reproduce.py's
`run_offline_to_online`): steps-to-threshold by hand, and (slow) the whole chain at a
tiny budget: an offline ReBRAC run per seed, RLPD from it with the dataset mixed in,
the value and details of a results file."""

from __future__ import annotations

import jax
import pytest

from benchmarks import offline_datasets, registry, reproduce
from jaxrl import datasets, envs
from jaxrl.datasets import collect


def test_steps_to_threshold_by_hand():
    rows = [
        {"env_steps": 200, "episodes": [1, 1], "episode_return": [-500.0, -100.0]},
        {"env_steps": 400, "episodes": [1, 0], "episode_return": [-300.0, None]},
        {"env_steps": 600, "episodes": [1, 1], "episode_return": [-100.0, -400.0]},
        {"env_steps": 800, "episodes": [1, 1], "episode_return": [-100.0, -90.0]},
    ]
    # Window 400: at 400 agent 0's last episodes average (-500 - 300) / 2, agent 1's only
    # one is -100; at 600 agent 0's are (-300 - 100) / 2 = -200. The first row (200 steps)
    # is inside the first window, where agent 1's -100 alone does not count.
    assert reproduce.steps_to_threshold(rows, -200.0, 400) == [600, 400]
    assert reproduce.steps_to_threshold(rows, -50.0, 400) == [None, None]
    # Each episode weighs the same: two episodes of -100 and one of -400 in one row.
    heavy = [
        {"env_steps": 100, "episodes": [2], "episode_return": [-100.0]},
        {"env_steps": 200, "episodes": [1], "episode_return": [-400.0]},
    ]
    assert reproduce.steps_to_threshold(heavy, -200.0, 200) == [200]
    assert reproduce.steps_to_threshold(heavy, -199.0, 200) == [None]


def test_the_entry_chains_rebrac_and_rlpd_against_sac():
    entry = registry.get("rlpd_from_rebrac_pendulum")
    assert entry.runner == "offline_to_online" and entry.algorithm == "rlpd"
    assert entry.overrides["offline"]["algorithm"] == "rebrac"
    reference = registry.get(entry.overrides["reference"])
    assert reference.name == "sac_pendulum" and reference.env == entry.env
    assert entry.canary == "rlpd-from-rebrac"


def tiny_recipe(directory, expert=True):
    """Random Pendulum episodes with fixed reference returns (the recipe's signature)."""
    env, params = envs.make("Pendulum-v1")
    policy, carry = collect.random_policy(env, params)
    data = collect.rollout(env, params, policy, carry, jax.random.key(0), 400)
    data = data.with_metadata(env="Pendulum-v1", random_return=-1200.0, expert_return=-150.0)
    return datasets.save(data, directory / "tiny.npz")


@pytest.mark.slow  # two seeds of two tiny runs (~1 min, mostly compilation)
def test_the_chain_at_a_tiny_budget(monkeypatch):
    import dataclasses
    from pathlib import Path

    monkeypatch.setattr(
        offline_datasets, "tiny", lambda d, expert: tiny_recipe(Path(d)), raising=False
    )
    net = {"hidden_sizes": (16, 16)}
    entry = dataclasses.replace(
        registry.get("rlpd_from_rebrac_pendulum"),
        seeds=2,
        overrides={
            **registry.get("rlpd_from_rebrac_pendulum").overrides,
            "dataset": "tiny",
            "offline": {"algorithm": "rebrac", "total_steps": 40, "eval_interval": 20,
                        "eval_episodes": 1, "batch_size": 16, **net},
            "total_steps": 400,
            "buffer_size": 400,
            "batch_size": 32,
            "gradient_steps": 1,
            **net,
        },
    )  # fmt: skip
    measured = reproduce.run_offline_to_online(entry)
    details = measured["details"]
    assert details["reference"] == "sac_pendulum" and details["window_steps"] == 1_200
    # 400 steps never fill SAC's 1,200-step window: each seed counts as the whole budget.
    assert measured["per_seed"] == [400.0, 400.0]
    assert [s["reached"] for s in details["seeds"]] == [False, False]
    for seed in details["seeds"]:
        assert seed["final_return"] is not None and seed["offline_final_eval_return"] < 0
