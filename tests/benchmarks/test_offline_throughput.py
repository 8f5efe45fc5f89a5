"""benchmarks/offline_throughput.py's matched configurations are what jaxrl trains: every
library-neutral field maps onto a field of the algorithm's config (workers/jaxrl_offline.py
refuses one it cannot set), and the resulting config is valid."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from jaxrl import algorithms
from jaxrl import config as cfg

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "workers")]
import jaxrl_offline  # noqa: E402
import offline_throughput  # noqa: E402


@pytest.mark.parametrize("name", sorted(offline_throughput.CONFIGS))
def test_every_matched_field_sets_jaxrls_config(name):
    neutral = offline_throughput.CONFIGS[name]
    config_cls = algorithms.get(name).Config
    fields = {f.name for f in dataclasses.fields(config_cls)}
    overrides = jaxrl_offline.jaxrl_fields(name, neutral, fields)
    config = cfg.replace(config_cls(dataset="data.npz"), **overrides).validate()
    assert config.hidden_sizes == (256, 256) and config.batch_size == neutral["batch_size"]
    assert config.normalize_obs == neutral["normalize_obs"]


def test_a_field_jaxrl_lacks_is_refused():
    with pytest.raises(ValueError, match="no field 'weight_temp'"):
        jaxrl_offline.jaxrl_fields("iql", {"weight_temp": 3.0}, {"temperature"})
    with pytest.raises(ValueError, match="2 critics"):
        jaxrl_offline.jaxrl_fields("iql", {"num_critics": 10}, set())


@pytest.mark.parametrize(
    ("steps", "seeds", "expected"),
    [
        (10_000, 1, (10_000, 1000)),  # one seed: the whole budget, updates of 1,000
        (10_000, 16, (500, 250)),  # 625 each, rounded down to a multiple of 250
        (2_000, 16, (250, 250)),  # never below the shortest update
        (16_000, 16, (1000, 1000)),
    ],
)
def test_a_measurements_budget_is_shared_by_its_seeds(steps, seeds, expected):
    """N vmapped seeds split one budget, so a 16-seed row costs about what a 1-seed row
    does (at 2,000 CQL steps per seed, 16 seeds alone took over 10 minutes a repeat)."""
    per_seed, interval = offline_throughput.steps_per_seed(steps, seeds)
    assert (per_seed, interval) == expected
    assert per_seed % interval == 0
