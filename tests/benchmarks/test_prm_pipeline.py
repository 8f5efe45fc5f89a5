"""The bookkeeping of benchmarks/reproduce.py's process-reward pipeline (the pipeline
itself runs in tests/algorithms/test_prm_learning.py's slow tier)."""

from __future__ import annotations

from benchmarks.reproduce import updates_to_threshold

CURVE = [(50, 0.40), (100, 0.55), (150, 0.52), (200, 0.61)]


def test_updates_to_threshold_is_the_first_point_that_reaches_it():
    assert updates_to_threshold(CURVE, 0.50) == 100
    assert updates_to_threshold(CURVE, 0.55) == 100  # reaching counts, as >= 0 margin does
    assert updates_to_threshold(CURVE, 0.56) == 200  # a later dip below does not undo it
    assert updates_to_threshold(CURVE, 0.30) == 50


def test_updates_to_threshold_is_none_when_never_reached():
    assert updates_to_threshold(CURVE, 0.62) is None
    assert updates_to_threshold([], 0.0) is None
