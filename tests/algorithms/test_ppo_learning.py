"""Learning targets of PPO on CPU with fixed seeds (the issue's thresholds).

Each run uses the environment's preset (jaxrl/algorithms/ppo/config.py);
CartPole-v1 is in tests/algorithms/test_ppo.py (default suite); the continuous and
recurrent variants against a random or memoryless baseline are in
test_ppo_variants_learning.py. These are slow (minutes each) and run with
`pytest -m slow`.
"""

from pathlib import Path

import pytest

import jaxrl
from benchmarks.registry import get as published

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


def _train(env: str, **overrides):
    return jaxrl.train("ppo", env=env, num_seeds=2, seed=0, progress=False, **overrides).summary


def test_acrobot_reaches_minus_100():
    summary = _train("Acrobot-v1")
    assert summary["final_return_mean"] >= -100, summary


def test_pendulum_reaches_minus_250():
    # The README's config-file example: the Pendulum preset with total_steps = 500k.
    summary = _train(
        "Pendulum-v1", config_file=EXAMPLES.parent / published("ppo_pendulum").config_file
    )
    assert summary["final_return_mean"] >= -250, summary


def test_recurrent_ppo_solves_cartpole_without_velocities():
    summary = _train("CartPole-POMDP-v1")
    assert summary["final_return_mean"] >= 400, summary


def test_minatar_breakout_clearly_above_random():
    # A uniformly random policy scores about 0.5 per episode on Breakout-MinAtar.
    summary = _train("Breakout-MinAtar", **published("ppo_breakout").overrides)  # 1M steps
    assert summary["final_return_mean"] >= 5.0, summary
