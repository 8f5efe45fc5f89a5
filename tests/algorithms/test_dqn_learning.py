"""Learning targets of DQN and C51 on CPU with fixed seeds (the issue's thresholds).

Each run uses the environment's preset (`jaxrl/algorithms/dqn/config.py`,
`jaxrl/algorithms/c51/config.py`) at its default budget unless said otherwise, with
several seeds trained in one program. `final_return_mean` is the mean return of the
training episodes (epsilon-greedy with eps_end) ending in the last 10% of updates.
CartPole runs are `-m slow` (CI); MinAtar Breakout, minutes on 2 cores, is `-m full`
(measured results in benchmarks/README.md).
"""

from __future__ import annotations

import pytest

from benchmarks.registry import get as published
from jaxrl import config as cfg
from jaxrl.algorithms import c51, dqn
from jaxrl.training.driver import RunConfig, train


def _train(module, env: str, num_seeds: int, **overrides) -> dict:
    config = cfg.replace(module.default_config(env), **overrides)
    run = RunConfig(num_seeds=num_seeds, seed=0, progress=False)
    return train(module.make(config), run).summary


@pytest.mark.slow
def test_dqn_solves_cartpole_over_four_seeds():
    summary = _train(dqn, "CartPole-v1", num_seeds=4)
    assert summary["final_return_agents"] == 4, summary
    assert summary["final_return_mean"] >= 400, summary


@pytest.mark.slow
def test_c51_learns_cartpole():
    summary = _train(c51, "CartPole-v1", num_seeds=2)
    assert summary["final_return_mean"] >= 300, summary


@pytest.mark.full
def test_dqn_on_minatar_breakout_clearly_above_random():
    # A uniformly random policy scores about 0.5 per episode on Breakout-MinAtar.
    summary = _train(dqn, "Breakout-MinAtar", num_seeds=2, **published("dqn_breakout").overrides)
    print(f"final returns {summary['final_return_per_agent']}")
    assert summary["final_return_mean"] >= 3.0, summary
