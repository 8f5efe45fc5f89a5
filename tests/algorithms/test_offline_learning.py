"""Learning of the offline learners on a Pendulum medium-replay dataset (slow tier).

The dataset is benchmarks/offline_datasets.py's recipe without its expert (fixed seeds:
SAC with its Pendulum preset, stopped at `MEDIUM_STEPS`; its replay buffer is the
dataset). Each learner trains `SEEDS` seeds in one program with the registered
configuration (benchmarks/registry.py: the preset) at half its budget, and must beat
both the dataset's mean return and behaviour cloning (TD3+BC with alpha = 0: the
deterministic actor regressed on the dataset's actions, same budget) by `MARGIN`, on
the mean of the seeds' final evaluations (10 episodes each). docs/offline.md says
where the thresholds come from.
"""

from __future__ import annotations

import numpy as np
import pytest

import jaxrl
from benchmarks import offline_datasets, registry

SEEDS = 4
# Returns on Pendulum are negative (0 is best): "beats x by MARGIN" is >= x + MARGIN * |x|.
MARGIN = 0.3

ENTRIES = {
    "iql": "iql_pendulum_medium_replay",
    "td3-bc": "td3_bc_pendulum_medium_replay",
    "cql": "cql_pendulum_medium_replay",
    "sac-n": "sac_n_pendulum_medium_replay",
    "rebrac": "rebrac_pendulum_medium_replay",
}


@pytest.fixture(scope="module")
def medium_replay(tmp_path_factory) -> str:
    return str(offline_datasets.pendulum_medium_replay(tmp_path_factory.mktemp("data"), False))


def final_returns(algorithm: str, dataset: str, **overrides) -> tuple[np.ndarray, dict]:
    entry = registry.get(ENTRIES[algorithm])
    config = {k: v for k, v in entry.overrides.items() if k != "dataset"}
    preset = jaxrl.make_config(algorithm, entry.env, dataset=dataset, **config)
    summary = jaxrl.train(
        algorithm,
        env=entry.env,
        dataset=dataset,
        num_seeds=SEEDS,
        seed=0,
        progress=False,
        **{**config, "total_steps": preset.total_steps // 2, **overrides},
    ).summary
    return np.asarray(summary["final_eval_returns_per_agent"]), summary


@pytest.fixture(scope="module")
def behaviour_cloning(medium_replay) -> np.ndarray:
    return final_returns("td3-bc", medium_replay, alpha=0.0)[0]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(ENTRIES))
def test_beats_the_datasets_mean_and_behaviour_cloning(medium_replay, behaviour_cloning, algorithm):
    returns, summary = final_returns(algorithm, medium_replay)
    behaviour = summary["dataset_behaviour_return_mean"]
    bc = behaviour_cloning.mean()
    print(algorithm, returns.tolist(), "bc", behaviour_cloning.tolist(), "dataset", behaviour)
    assert returns.mean() >= behaviour + MARGIN * abs(behaviour), (returns, behaviour)
    assert returns.mean() >= bc + MARGIN * abs(bc), (returns, behaviour_cloning)
