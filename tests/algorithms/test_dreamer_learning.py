"""Learning targets of Dreamer on CPU with fixed seeds (issue #11).

The final return is `summary["final_return_mean"]`: the training episodes (the
policy samples its actions) of the last 10% of updates. The short CartPole run is
`-m slow` (CI): a reduced budget with a threshold clearly above a random policy
(about 22 on CartPole-v1). The issue's targets, 100k steps per backbone and a
MinAtar game, are `-m full`; measured results are in benchmarks/notes/2026-11-27-control-learning.md
("Dreamer learning").
"""

import numpy as np
import pytest

from benchmarks.registry import get as published
from jaxrl import config as cfg
from jaxrl.algorithms import dreamer
from jaxrl.training import driver


def _train(env: str, **overrides) -> dict:
    algo = dreamer.make(cfg.replace(dreamer.default_config(env), **overrides))
    run = driver.RunConfig(num_seeds=1, seed=0, progress=False)
    return driver.train(algo, run).summary


@pytest.mark.slow
def test_gru_cartpole_beats_random_clearly_in_16k_steps():
    """512 updates (16,384 steps) at the default train ratio (64: 1,024 gradient steps);
    measured 185.9 in 152 s of training (2 quiet cores)."""
    summary = _train("CartPole-v1", total_steps=16_384)
    print(f"final return {summary['final_return_mean']:.1f}, {summary['train_seconds']:.0f} s")
    assert summary["final_return_mean"] >= 50, summary


@pytest.mark.slow
def test_image_observations_are_reconstructed_after_brief_training():
    """Pixel observations end to end (Breakout-MinAtar's 10x10x4 boolean frames through
    the conv encoder, the replay buffer as bytes, the decoder): 150 gradient steps take
    the reconstruction loss below a tenth of its untrained value (measured: 128.6 ->
    7.9). Not yet below predicting every frame by the mean stored frame (1.36 on the
    same data): that takes a longer run than CI affords."""
    algo = dreamer.make(
        cfg.replace(
            dreamer.default_config("Breakout-MinAtar"),
            model_size="xs",
            total_steps=5_824,  # 182 updates of 32 steps; learning from update 32 on
            learning_starts=1_024,
            batch_size=8,
            batch_length=32,
            train_ratio=8.0,  # one gradient step per update
            imagination_starts=64,
        )
    )
    result = driver.train(algo, driver.RunConfig(num_seeds=1, progress=False, log_every=320))
    decoder = [float(np.asarray(row["decoder_loss"]).item()) for row in result.metrics]
    learning = [value for value in decoder if value > 0]  # rows before learning_starts are 0
    assert len(learning) >= 10, decoder
    assert learning[-1] < 0.1 * learning[0], decoder
    assert max(learning[-3:]) < min(learning[:3]), decoder  # the last rows, not one lucky one


@pytest.mark.full
@pytest.mark.parametrize("backbone", ["gru", "transformer", "ssm"])
def test_cartpole_reaches_400_in_100k_steps(backbone):
    # The published result's config (benchmarks/registry.py): the preset with `backbone`.
    overrides = published(f"dreamer_cartpole_{backbone}").overrides
    assert overrides.get("backbone", "gru") == backbone
    summary = _train("CartPole-v1", **overrides)
    assert summary["final_return_mean"] >= 400, summary
    assert summary["train_seconds"] <= 30 * 60, summary


@pytest.mark.full
def test_minatar_breakout_gru_clearly_above_random():
    """The preset (150k steps, size xs, train ratio 64): measured 1.32 at 100k and
    1.54 at 150k (seed 0), against a uniformly random policy's 0.4-0.5 per episode; as
    this test, 1.55 in 1,566 s of training (quiet, 2026-11-26)."""
    summary = _train("Breakout-MinAtar")
    print(f"final return {summary['final_return_mean']:.2f}, {summary['train_seconds']:.0f} s")
    assert summary["final_return_mean"] >= 1.0, summary
