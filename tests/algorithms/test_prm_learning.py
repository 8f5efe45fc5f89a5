"""A process reward model learns to verify steps, and GRPO learns from its step rewards,
on step-by-step addition (`addition_steps`).

* `-m slow` (CI; the shared SFT and PRM runs and each test take about a minute on 2
  cores): a PRM on 2-digit steps, from a 2-digit SFT warm start, reaches a held-out step
  accuracy well above the all-correct guess (about 0.67 of the labels are "correct" with
  `corrupt_fraction` 0.5 and 3 steps); 50 GRPO updates with that PRM's step rewards
  raise held-out pass@1. Thresholds: the lowest of seeds 0-2 minus a margin (the values
  are beside the thresholds at the end of this file).
* `-m full`, the issue's targets: the PRM with its defaults (3-digit) reaches 0.9
  held-out step accuracy on every seed (the `prm_addition_steps` result), and GRPO with
  PRM step rewards reaches the outcome-only run's final pass@1 in at most half the
  updates (`grpo_prm_addition_steps`, run through benchmarks/reproduce.py's pipeline).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

import jaxrl
from benchmarks import registry

SFT_2_DIGIT = dict(task="addition_steps", digits=2, total_steps=25_600, stop_at_train_accuracy=None)
# The learning rate the slow tier's thresholds were measured with (the default is lower
# since: the 3-digit runs of benchmarks/notes/2026-11-28-process-rewards.md).
PRM_2_DIGIT = dict(task="addition_steps", digits=2, total_steps=32_000, lr=1e-3)
GRPO_2_DIGIT = dict(task="addition_steps", digits=2, total_steps=50 * 128)
# benchmarks/reproduce.py's pipeline at a tiny budget: a 1-layer model, 4 outcome-only
# GRPO updates against 2 with step rewards, trained in 2 segments.
TINY_MODEL = dict(num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=2, mlp_size=64)
TINY_PIPELINE = {
    "sft": dict(
        task="addition_steps",
        digits=2,
        **TINY_MODEL,
        total_steps=640,
        stop_at_train_accuracy=None,
        num_eval=16,
        eval_batch_size=16,
    ),
    "prm": dict(task="addition_steps", digits=2, total_steps=320, batch_size=32, num_eval=16),
    "grpo": dict(
        task="addition_steps",
        digits=2,
        num_prompts=4,
        group_size=4,
        num_eval=16,
        eval_samples=2,
        eval_batch_size=32,
    ),
    "updates": 4,
    "segments": 2,
}


@pytest.fixture(scope="module")
def step_runs(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """An SFT warm start on 2-digit steps (seed 0) and a PRM trained from it."""
    root = tmp_path_factory.mktemp("prm-learning")
    jaxrl.train("sft", seed=0, progress=False, run_dir=str(root / "sft"), **SFT_2_DIGIT)
    jaxrl.train(
        "prm",
        model=str(root / "sft"),
        seed=0,
        progress=False,
        run_dir=str(root / "prm"),
        **PRM_2_DIGIT,
    )
    return root / "sft", root / "prm"


@pytest.mark.slow
def test_a_prm_learns_to_verify_2_digit_steps(step_runs):
    """Held-out step accuracy of the PRM from the seed-0 SFT warm start (threshold: see
    PRM_STEP_ACCURACY)."""
    _, prm_dir = step_runs
    summary = json.loads((prm_dir / "summary.json").read_text())
    print(f"held-out step accuracy {summary['eval_step_accuracy']:.3f}")
    assert summary["eval_step_accuracy"] >= PRM_STEP_ACCURACY, summary


@pytest.mark.slow
def test_grpo_learns_from_prm_step_rewards(step_runs):
    sft_dir, prm_dir = step_runs
    summary = jaxrl.train(
        "grpo",
        model=str(sft_dir),
        seed=0,
        progress=False,
        process_reward=str(prm_dir),
        **GRPO_2_DIGIT,
    ).summary
    gain = summary["pass@1_after"] - summary["pass@1_before"]
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}")
    assert gain >= GRPO_PRM_GAIN, summary


@pytest.mark.slow
def test_the_pipeline_records_the_step_rewarded_runs_curve():
    """SFT -> PRM -> outcome-only GRPO and step-rewarded GRPO in segments (resumed), as
    `grpo_prm_addition_steps` runs them: the value is the last segment's pass@1 minus
    the outcome-only run's, the curve has one point per segment."""
    from benchmarks import reproduce

    entry = dataclasses.replace(
        registry.get("grpo_prm_addition_steps"), seeds=1, overrides=TINY_PIPELINE
    )
    measured = reproduce.run_prm_pipeline(entry)
    print(measured)
    (detail,) = measured["details"]
    curve = detail["process_pass@1_curve"]
    outcome = detail["outcome_pass@1_after"]
    assert [updates for updates, _ in curve] == [1, 2]
    assert all(0.0 <= value <= 1.0 for _, value in curve)
    assert detail["process_pass@1_after_half"] == curve[-1][1]
    assert measured["per_seed"] == [pytest.approx(curve[-1][1] - outcome)]
    assert detail["updates_to_threshold"] == reproduce.updates_to_threshold(curve, outcome)
    assert 0.0 <= detail["prm_eval_step_accuracy"] <= 1.0


@pytest.mark.full
def test_the_default_prm_reaches_0_9_held_out_step_accuracy():
    from benchmarks import reproduce

    measured = reproduce.run_prm_pipeline(registry.get("prm_addition_steps"))
    print(measured)
    assert min(measured["per_seed"]) >= 0.9, measured


@pytest.mark.full
def test_grpo_with_prm_step_rewards_reaches_outcome_pass_at_1_in_half_the_updates():
    from benchmarks import reproduce

    measured = reproduce.run_prm_pipeline(registry.get("grpo_prm_addition_steps"))
    print(measured)
    assert min(measured["per_seed"]) >= 0.0, measured


# Thresholds of the slow tier, the lowest of seeds 0 / 1 / 2 minus a margin (pipeline as
# in `step_runs` with each seed; benchmarks/notes/2026-11-28-process-rewards.md):
# held-out step accuracy 0.949 / 0.945 / 0.857; pass@1 gain of 50 GRPO updates with the
# PRM's step rewards at the default weight 0.2: +0.126 / +0.125 / +0.131.
PRM_STEP_ACCURACY = 0.80
GRPO_PRM_GAIN = 0.07
