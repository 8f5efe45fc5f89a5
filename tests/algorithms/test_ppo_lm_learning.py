"""PPO-LM learns, and a resumed run ends exactly where the uninterrupted one does.

pass@1 is `summary.json`'s `pass@1_before` / `pass@1_after`: the unbiased estimator from
8 completions per held-out prompt (256 prompts never seen in training), temperature 1.

* `-m full`: the same warm start as GRPO's learning test (the default SFT run on 3-digit
  addition, stopped at 0.3 running training accuracy) and 800 PPO-LM updates with the
  defaults, asserting +0.15 (GRPO gains +0.26 to +0.33 in 800 updates from such warm
  starts). From the earlier 40,000-sample warm start, 200 updates gave 0.215 -> 0.451,
  as GRPO's 0.215 -> 0.441 (benchmarks/notes/2026-11-27-lm-learning.md, "PPO-LM learning"); the new
  warm
  start learns slower at first (GRPO: about +0.05 in 200 updates), hence 800.
  Measured quietly (AVX-512 CPU): 0.176 -> 0.454 (+0.28) in 196 s.
* `-m slow` (CI), a cheaper proxy, since that warm start alone takes most of the slow
  tier's budget: 2-digit addition from the SFT warm start GRPO's slow test shares
  (`two_digit_warm_start`, tests/algorithms/conftest.py), then 300 PPO-LM updates with
  the defaults, asserting a gain of 7 points. Measured on 2 AVX-512 cores: pass@1
  0.633 -> 0.775 (+0.142) in 68 s from that warm start; from seed 1's warm start
  (0.312 before) +0.081 at 150 updates and +0.091 at 300, the critic learning slowly
  there. The same run checks resume: a copy stopped after its checkpoint at update 256
  and resumed ends with the same policy, critic and metrics.
"""

from __future__ import annotations

import shutil

import pytest

from benchmarks.registry import get as published
from jaxrl import config as cfg
from jaxrl.algorithms import ppo_lm
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train

COMPLETIONS_PER_UPDATE = 16 * 8  # the default num_prompts x group_size (GRPO's)
TIMING = {"seconds", "steps_per_second", "sample_seconds", "learn_seconds"}
TIMING |= {"sample_tokens_per_second", "learn_tokens_per_second", "tokens_per_second"}


def _learned(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.mark.slow
def test_300_updates_raise_held_out_pass_at_1_and_resume_exactly(tmp_path, two_digit_warm_start):
    config = cfg.replace(
        ppo_lm.default_config(),
        digits=2,
        model=str(two_digit_warm_start),
        total_steps=300 * COMPLETIONS_PER_UPDATE,
    )
    every = 8 * COMPLETIONS_PER_UPDATE
    run = dict(seed=0, progress=False, log_every=every, checkpoint_every=32 * every)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(ppo_lm.make(config), RunConfig(run_dir=str(full_dir), **run))
    summary = full.summary
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}")
    assert summary["pass@1_after"] - summary["pass@1_before"] >= 0.07, summary
    rows = full.metrics
    assert rows[-1]["value_mean"][0] > 0.3  # the critic left V = 0 for the reward's level
    assert rows[-1]["accuracy"][0] > rows[0]["accuracy"][0]

    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after update 256
    steps = sorted(int(p.name) for p in (full_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps[-2:] == [256, 300]
    shutil.rmtree(stopped_dir / "checkpoints" / "300")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(ppo_lm.make(config), RunConfig(run_dir=str(stopped_dir), resume=True, **run))
    assert resumed.summary["params_fingerprint"] == summary["params_fingerprint"]
    assert tree_fingerprint(resumed.state.critic_params) == tree_fingerprint(
        full.state.critic_params
    )
    assert _learned(resumed.metrics) == _learned(full.metrics)


@pytest.mark.full
def test_800_updates_from_grpos_warm_start_raise_held_out_pass_at_1(default_warm_start):
    warm = default_warm_start  # GRPO's learning target's warm start
    budget = published("ppo_lm_addition").overrides  # 800 updates
    assert budget == {"total_steps": 800 * COMPLETIONS_PER_UPDATE}
    config = cfg.replace(ppo_lm.default_config(), model=str(warm), **budget)
    summary = train(ppo_lm.make(config), RunConfig(seed=0, progress=False)).summary
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}")
    assert summary["pass@1_after"] - summary["pass@1_before"] >= 0.15, summary
