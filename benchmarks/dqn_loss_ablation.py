"""Which of the off-policy benchmark's matched-work changes moves DQN's return?

    python benchmarks/dqn_loss_ablation.py '{"loss": "mse"}'
    python benchmarks/dqn_loss_ablation.py '{"bootstrap_truncation": false}'

Trains jaxrl's DQN on the benchmark's CartPole configuration (`DQN_CONFIG` in
offpolicy_throughput.py, 50k steps) with the given fields changed, 16 seeds in one
program, and prints `final_return_mean` (training episodes of the last 10% of updates)
and its std over seeds. The default row of offpolicy_throughput.py is `'{}'`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "workers")]

import jaxrl_offpolicy as worker  # noqa: E402
from offpolicy_throughput import DQN_CONFIG  # noqa: E402

from jaxrl.training import driver  # noqa: E402


def main(changes: dict, seeds: int = 16) -> dict:
    hparams = {**worker.overrides("dqn", DQN_CONFIG, "default", 50_000), **changes}
    result = driver.train(
        worker.make_algorithm("dqn", hparams), driver.RunConfig(num_seeds=seeds, progress=False)
    )
    return {
        "changes": changes,
        "seeds": seeds,
        "final_return_mean": result.summary["final_return_mean"],
        "final_return_std": result.summary["final_return_std"],
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))))
