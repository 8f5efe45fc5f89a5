"""benchmarks/locomotion_side_by_side.py: Brax's trainer gets our preset's batch, networks
and hyperparameters; the budget splits into Brax's epochs exactly; the comparison's
arithmetic. The optional tier reads Playground's own PPO config and runs both libraries at
a tiny budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jaxrl.algorithms.ppo.config import PRESETS, default_config

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path[:0] = [str(BENCHMARKS)]
import locomotion_side_by_side as side  # noqa: E402

OURS = PRESETS[side.ENV_ID]


def test_brax_collects_our_batch_in_our_minibatches_and_epochs():
    brax = side.BRAX_SIZING
    sequences = brax["batch_size"] * brax["num_minibatches"]
    assert sequences % brax["num_envs"] == 0  # Brax's own assertion
    brax_steps_per_update = sequences * brax["unroll_length"]
    assert brax["num_envs"] == OURS["num_envs"]
    assert brax_steps_per_update == OURS["num_envs"] * OURS["num_steps"]
    assert brax["num_minibatches"] == OURS["num_minibatches"]
    assert brax["num_updates_per_batch"] == OURS["update_epochs"]
    assert brax["max_grad_norm"] == OURS["max_grad_norm"]
    assert OURS["total_steps"] == side.DEFAULT_TOTAL_STEPS
    config = default_config(side.ENV_ID)
    assert config.validate() is config and config.tanh_squash and config.init_log_std == 0.0


def test_the_budget_splits_into_brax_epochs_or_is_refused():
    per_update = OURS["num_envs"] * OURS["num_steps"]
    epochs = 4 * side.BRAX_RESETS_PER_EVAL  # 4 evaluation intervals of 10 reset epochs
    assert side.brax_num_evals(side.DEFAULT_TOTAL_STEPS, per_update) == 5
    assert side.brax_num_evals(epochs * per_update, per_update) == 5
    assert side.brax_num_evals(20 * per_update, per_update, evaluations=2) == 3
    for bad in (epochs * per_update + 1, 4 * per_update, 60 * per_update):
        with pytest.raises(ValueError, match="--total-steps"):
            side.brax_num_evals(bad, per_update)


def test_summary_and_comparison_by_hand():
    def cell(steps, rate, final):
        return {"env_steps": steps, "steps_per_second": rate, "final_return": final}

    ours = side.summarise([cell(100, 10.0, 30.0), cell(100, 20.0, 50.0)])
    # 200 steps in 10 + 5 seconds; returns 30 and 50: mean 40, population std 10.
    assert ours["steps_per_second"] == pytest.approx(200 / 15)
    assert (ours["final_return_mean"], ours["final_return_std"]) == (40.0, 10.0)
    theirs = side.summarise([cell(100, 10.0, 20.0), cell(100, 10.0, 40.0)])
    comparison = side.compare(ours, theirs)
    assert comparison["steps_per_second_ratio"] == pytest.approx((200 / 15) / 10.0)
    assert comparison["final_return_gap"] == 10.0
    assert comparison["final_return_gap_in_brax_std"] == 1.0
    level = side.summarise([cell(100, 10.0, 40.0)])
    assert side.compare(ours, level)["final_return_gap_in_brax_std"] is None


@pytest.mark.optional
def test_brax_side_keeps_playgrounds_own_hyperparameters():
    pytest.importorskip("brax")
    params = pytest.importorskip("mujoco_playground.config.dm_control_suite_params")
    theirs = params.brax_ppo_config(side.TASK)
    pairs = {
        "lr": "learning_rate",
        "gamma": "discounting",
        "ent_coef": "entropy_cost",
        "normalize_obs": "normalize_observations",
    }
    for our_name, their_name in pairs.items():
        assert OURS[our_name] == theirs[their_name], our_name
    assert theirs["num_resets_per_eval"] == side.BRAX_RESETS_PER_EVAL
    # Fields Playground leaves at Brax's defaults.
    import inspect

    from brax.training.agents.ppo import train

    defaults = inspect.signature(train.train).parameters
    assert OURS["clip_eps"] == defaults["clipping_epsilon"].default
    assert OURS["gae_lambda"] == defaults["gae_lambda"].default
    assert OURS["vf_coef"] == defaults["vf_loss_coefficient"].default
    assert defaults["clipping_epsilon_value"].default is None and not OURS["clip_value"]


@pytest.mark.optional
def test_both_libraries_run_a_tiny_budget(tmp_path):
    pytest.importorskip("brax")
    pytest.importorskip("mujoco_playground")
    out = tmp_path / "loco.json"
    per_update = OURS["num_envs"] * OURS["num_steps"]
    budget = 2 * side.BRAX_RESETS_PER_EVAL * per_update  # Brax's smallest exact budget
    cmd = [
        sys.executable,
        str(BENCHMARKS / "locomotion_side_by_side.py"),
        "--total-steps",
        str(budget),
        "--seeds",
        "1",
        "--eval-episodes",
        "2",
        "--brax-evaluations",
        "2",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=1800)
    result = json.loads(out.read_text())
    for library in ("brax", "jaxrl"):
        (cell,) = result["cells"][library]
        assert cell["env_steps"] == budget and cell["steps_per_second"] > 0
        assert len(cell["return_curve"]) >= 2
        assert cell["final_return"] >= 0.0  # CheetahRun's reward lies in [0, 1] per step
    assert result["comparison"]["steps_per_second_ratio"] > 0
