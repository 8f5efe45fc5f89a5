"""benchmarks/reproduce.py's provenance rules (the runners are tested with the registry)."""

from __future__ import annotations

import pytest

from benchmarks import reproduce


@pytest.mark.parametrize(
    ("end", "cores", "busy"),
    [
        (1.9, 2, False),  # a measurement alone keeps up to a thread per core runnable
        (3.4, 2, False),
        (3.6, 2, True),  # more than the run alone can make: others shared the cores
        (6.0, 8, False),
    ],
)
def test_a_run_that_ended_on_a_busy_machine_counts_as_loaded(end, cores, busy):
    record = {"load_average_at_end": [end, 1.0, 1.0], "cores": cores}
    assert reproduce.busy_at_end(record) is busy
