"""GRPO learns: after the default SFT warm start (`jaxrl train sft --task addition`),
GRPO with its defaults raises held-out pass@1 on 3-digit addition.

pass@1 is `summary.json`'s `pass@1_before` / `pass@1_after`: the unbiased estimator from
8 completions per held-out prompt (256 prompts never seen in training), sampled at
temperature 1. The SFT warm start runs once per module (~70 s on 2 cores, 0.28 greedy
held-out exact match at seed 0). Two tiers: `-m slow` (CI) runs 200 GRPO updates and
asserts a clear gain; `-m full` is the issue's target, +30 points within 5 minutes of
GRPO (measured: 0.215 -> 0.539 in 800 updates, 191 s; benchmarks/README.md).
"""

from __future__ import annotations

import pathlib

import pytest

from jaxrl.algorithms import grpo, sft
from jaxrl.config import replace
from jaxrl.training.driver import RunConfig, train

COMPLETIONS_PER_UPDATE = 16 * 8  # GRPO's default num_prompts x group_size


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory) -> pathlib.Path:
    run_dir = tmp_path_factory.mktemp("sft")
    train(sft.make(sft.default_config()), RunConfig(run_dir=str(run_dir), progress=False))
    return run_dir


def _grpo(warm_start: pathlib.Path, updates: int) -> dict:
    config = replace(
        grpo.default_config(), model=str(warm_start), total_steps=updates * COMPLETIONS_PER_UPDATE
    )
    return train(grpo.make(config), RunConfig(seed=0, progress=False)).summary


@pytest.mark.slow
def test_200_updates_raise_held_out_pass_at_1(warm_start):
    summary = _grpo(warm_start, updates=200)
    gain = summary["pass@1_after"] - summary["pass@1_before"]
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}")
    assert gain >= 0.15, summary


@pytest.mark.full
def test_five_minutes_of_grpo_raise_held_out_pass_at_1_by_30_points(warm_start):
    summary = _grpo(warm_start, updates=800)
    gain = summary["pass@1_after"] - summary["pass@1_before"]
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}")
    assert summary["train_seconds"] <= 300, summary
    assert gain >= 0.30, summary
