"""GRPO and DPO across 2 processes (a 2-host run on one machine) train as one process does,
and finish: held-out evaluation on every process, the model exported by process 0.

As tests/training/test_multihost.py: two `_scenarios/run_training.py` processes with 2
emulated CPU devices each join one JAX distributed runtime (gloo), so the `data` mesh
spans 4 devices on 2 processes, while a single process with 4 devices trains the same
runs as the reference. Each device computes the gradient of its rows and the sum is one
flat all-reduce across the processes (`LMAlgorithm.accumulated_gradient`); gloo's ring
all-reduce sums in another order than the in-process one, so the parameters agree to
the last bits, not bit for bit. The held-out evaluation after training decodes on each
process's own copy of the agent (`lm_common.agent`); before that, `finish` failed on
arrays that spanned the other process's devices.
"""

from __future__ import annotations

import pytest

from ._scenarios.harness import (
    METRICS_TOL,
    PARAMS_TOL,
    TINY_LM,
    load_params,
    metrics_max_diff,
    params_max_diff,
    run_group,
    scenario_env,
    two_process_jobs,
)

# Compiles GRPO's sampling and learning phases and DPO's step in three processes: about a
# minute on 2 cores. In the slow tier, which CI also runs.
pytestmark = pytest.mark.slow

LOCAL_DEVICES = 2
NUM_PROCESSES = 2
GLOBAL_DEVICES = LOCAL_DEVICES * NUM_PROCESSES
TINY = {**TINY_LM, "num_eval": 8}
RUNS = {
    # 4 updates of 4 prompts x 4 completions, 2 micro-batches per device.
    "grpo": {
        **TINY,
        "algorithm": "grpo",
        "num_prompts": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "micro_batches": 2,
        "total_steps": 64,
        "eval_samples": 2,
    },
    # 4 updates of 8 pairs from the task's answers.
    "dpo": {**TINY, "algorithm": "dpo", "batch_size": 8, "total_steps": 32},
}
NUM_UPDATES = {"grpo": 4, "dpo": 4}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("multihost_lm")
    multi, single = root / "multi", root / "single"
    multi.mkdir()
    single.mkdir()

    def spec(out_dir):
        runs = [
            {"name": name, "kwargs": {**kwargs, "run_dir": str(out_dir / name)}}
            for name, kwargs in RUNS.items()
        ]
        return {"out_dir": str(out_dir), "devices": GLOBAL_DEVICES, "runs": runs}

    jobs = two_process_jobs(spec(multi), LOCAL_DEVICES)
    jobs.append((spec(single), scenario_env(GLOBAL_DEVICES)))
    p0, p1, ref = run_group(jobs, root)
    return {"multi": multi, "single": single, "p0": p0, "p1": p1, "ref": ref}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_two_processes_train_and_finish_as_one(scenario, name):
    p0, p1, ref = (scenario[k]["runs"][name] for k in ("p0", "p1", "ref"))
    assert len(p0["metrics"]) == NUM_UPDATES[name]
    assert p0["metrics"] == p1["metrics"]  # every process logs the same global values
    metrics_max_diff(p0["metrics"], ref["metrics"], **METRICS_TOL)
    params = load_params(scenario["multi"], name, 0)
    params_max_diff(params, load_params(scenario["multi"], name, 1), rtol=0, atol=0)
    params_max_diff(params, load_params(scenario["single"], name), **PARAMS_TOL)
    # `finish` ran on both processes: the same held-out numbers; process 0 exported.
    summary, summary1 = p0["summary"], p1["summary"]
    held_out = [k for k in summary if k.startswith(("pass@", "eval_"))]
    assert held_out, summary
    assert {k: summary[k] for k in held_out} == {k: summary1[k] for k in held_out}
    assert {k: summary[k] for k in held_out} == {k: ref["summary"][k] for k in held_out}
    assert summary["model_dir"].endswith("model") and "model_dir" not in summary1
