"""benchmarks/marl_throughput.py's pieces that run without JaxMARL: the target's two numbers
by hand, the one-line refusals without a JaxMARL checkout, and that jaxrl's worker trains
IPPO with JaxMARL's episode length and terminal time limits (its config and environment).
The side-by-side itself needs JaxMARL's repository and venv (the lead runs it quiet:
`python -m benchmarks.reproduce --only marl_throughput` with JAXMARL_REPO set)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import jaxrl

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "workers")]
import jaxmarl_ippo  # noqa: E402
import jaxrl_ippo  # noqa: E402
import marl_throughput  # noqa: E402


def cell(library, returns, steps_per_second):
    runs = [{"library": library, "seeds": len(returns), "total_steps": 2048,
             "steps_per_second": steps_per_second, "compile_seconds": 1.0,
             "final_return_per_seed": returns}]  # fmt: skip
    return marl_throughput.summarise(runs)


def test_the_return_gap_in_jaxmarl_stds_and_the_speed_ratio_by_hand():
    theirs = cell("jaxmarl", [-20.0, -22.0], 1000.0)  # mean -21, population std 1
    ours = cell("jaxrl", [-21.0, -22.0], 1500.0)  # mean -21.5
    assert theirs["final_return_std"] == 1.0
    cmp = marl_throughput.compare(ours, theirs)
    assert cmp["return_gap_in_jaxmarl_std"] == -0.5
    assert cmp["speed_ratio_jaxrl_over_jaxmarl"] == 1.5


def test_without_a_jaxmarl_checkout_both_refuse_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"no JaxMARL checkout at .*git clone"):
        jaxmarl_ippo.load_baseline(tmp_path)
    monkeypatch.delenv("JAXMARL_REPO", raising=False)
    with pytest.raises(SystemExit, match=r"needs a checkout of JaxMARL's repository"):
        marl_throughput.main(["--out", str(tmp_path / "out.json")])


def test_jaxrls_worker_matches_jaxmarls_episodes_and_hyperparameters():
    config = jaxrl.make_config("ippo", "SimpleSpread-MPE", **jaxrl_ippo.MATCHED)
    assert (
        not config.bootstrap_truncation and jaxrl_ippo.ENV_OVERRIDES["max_steps_in_episode"] == 26
    )
    # JaxMARL's ippo_ff_mpe.yaml, as jaxrl's IPPO defaults.
    assert (config.num_envs, config.num_steps, config.update_epochs) == (16, 128, 4)
    assert (config.num_minibatches, config.lr, config.clip_eps) == (4, 2.5e-4, 0.2)
    assert (config.ent_coef, config.max_grad_norm, config.activation) == (0.01, 0.5, "tanh")
    assert config.batch_size == marl_throughput.BATCH
