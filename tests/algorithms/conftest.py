"""Fixtures shared by the algorithm tests."""

from __future__ import annotations

import pathlib
import sys

import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import sft
from jaxrl.training.driver import RunConfig, train

# The learning tests read their budgets from benchmarks/registry.py (the published results'
# configurations), so the repository root must be importable.
ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _sft_run(tmp_path_factory, name: str, **overrides) -> pathlib.Path:
    """The run directory of an SFT run on addition, seed 0, `overrides` on the defaults."""
    run_dir = tmp_path_factory.mktemp(name)
    config = cfg.replace(sft.default_config(), **overrides)
    train(sft.make(config), RunConfig(run_dir=str(run_dir), seed=0, progress=False))
    return run_dir


@pytest.fixture(scope="session")
def default_warm_start(tmp_path_factory) -> pathlib.Path:
    """The default SFT run (`jaxrl train sft --task addition`: 3-digit, stopped when its
    running training accuracy reaches 0.3; where it stops and how long it takes: the
    `sft_addition_default` result, benchmarks/README.md), the warm start of the `-m full`
    GRPO, PPO-LM and DPO targets."""
    return _sft_run(tmp_path_factory, "sft-default")


@pytest.fixture(scope="session")
def two_digit_warm_start(tmp_path_factory) -> pathlib.Path:
    """The SFT warm start of the slow GRPO and PPO-LM learning tests: 2-digit addition,
    25,600 samples, seed 0 (~16 s on 2 quiet cores).

    A fixed budget, trained whole (`stop_at_train_accuracy=None`): the run is past the
    plateau before carrying is learned on every seed measured (0.79 / 0.48 / 0.45
    greedy), so RL on top has something to sharpen and room to gain, in a quarter of
    the default 3-digit warm start's time."""
    return _sft_run(
        tmp_path_factory,
        "sft-2-digit",
        digits=2,
        total_steps=25_600,
        stop_at_train_accuracy=None,
    )


GUESS = dict(
    task="guess",
    max_number=8,
    num_eval=50,
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=4,
    mlp_size=256,
    context_len=64,
    eval_batch_size=64,
)


@pytest.fixture(scope="session")
def guess_options() -> dict:
    """The model and task of the guessing game's learning tests (multi-turn GRPO and
    PPO-LM), as config overrides."""
    return dict(GUESS)


@pytest.fixture(scope="session")
def guess_warm_start(tmp_path_factory) -> pathlib.Path:
    """SFT on the guessing game's (prompt, number) pairs: it teaches the reply format only
    (the number is unpredictable). 3,200 samples, ~20 s."""
    return _sft_run(
        tmp_path_factory, "sft-guess", **GUESS, total_steps=3200, stop_at_train_accuracy=None
    )
