"""The code sandbox (jaxrl.rewards.sandbox): hostile programs score 0 within the timeout
and leave this process healthy; correct ones score 1; batches run in parallel."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from jaxrl.config import ConfigError
from jaxrl.rewards import score
from jaxrl.rewards.sandbox import (
    _UID_BASE,
    MAX_SLOTS,
    Limits,
    checks,
    code_reward,
    extract_code,
    isolation,
    run,
    run_batch,
)
from jaxrl.rewards.sandbox import core as sandbox_core
from jaxrl.rewards.sandbox import launch as sandbox_launch
from jaxrl.tasks import Example

# Small limits: the fork bomb stops at 8 processes, the memory bomb at 256 MiB.
LIMITS = Limits(timeout=2.0, max_processes=8, memory_mb=256, file_size_mb=1.0)
TESTS = ["assert double(2) == 4", "assert double(-3) == -6"]
DOUBLE = "def double(x):\n    return 2 * x\n"


def sandbox_processes() -> list[str]:
    """Live (non-zombie) processes of this process's sandbox uids (other pytest workers
    run sandboxes of their own at the same time)."""
    ps = subprocess.run(["ps", "-eo", "uid=,stat="], capture_output=True, text=True, check=True)
    rows = [line.split() for line in ps.stdout.splitlines()]
    ours = range(_UID_BASE + os.getpid() * MAX_SLOTS, _UID_BASE + (os.getpid() + 1) * MAX_SLOTS)
    return [r[0] for r in rows if int(r[0]) in ours and not r[1].startswith("Z")]


def test_correct_program_scores_one_and_a_wrong_one_the_fraction_passed():
    block = code_reward(TESTS, limits=LIMITS)
    example = Example("write double", "")
    assert block("```python\ndef double(x):\n    return 2 * x\n```", example) == 1.0
    assert block("def double(x):\n    return 2 * abs(x)", example) == 0.5  # second test fails
    assert (
        code_reward(TESTS, all_or_nothing=True, limits=LIMITS)("def double(x): return 4", example)
        == 0.0
    )


def test_tests_default_to_the_lines_of_the_answer():
    block = code_reward(limits=LIMITS)
    example = Example("write inc", "assert inc(1) == 2\n\nassert inc(2) == 3\nassert inc(0) == 0")
    assert block("def inc(x):\n    return x + 1 if x else 5", example) == pytest.approx(2 / 3)


def test_hostile_programs_score_zero_within_the_timeout(tmp_path):
    # Each defines a correct `double` first: only the sandbox stopping it keeps it at 0.
    outside = tmp_path / "escaped.txt"
    hostile = {
        "infinite loop": "while True:\n    pass",
        "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
        "        pass",
        "memory bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))",
        "100 MB of output": "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)",
        "write outside scratch": f"open({str(outside)!r}, 'w').write('hi')",
        "early exit 0": "import sys\nsys.exit(0)",
        "fake results": "import os\nos.write(3, b'0\\n1\\n0 0\\n0 1\\n')",
    }
    programs = [DOUBLE + body for body in hostile.values()]
    start = time.monotonic()
    results = run_batch(programs, [TESTS] * len(programs), LIMITS)
    elapsed = time.monotonic() - start
    for name, result in zip(hostile, results, strict=True):
        assert result.passed == 0, (name, result)
        assert len(result.output) <= LIMITS.output_bytes
    # In parallel: about one timeout (2 s), not the sum (14 s). The bound sits well above
    # one timeout because the test shares 2 cores with another pytest worker (it took
    # 8.7 s at load average 10).
    assert elapsed < LIMITS.timeout * len(programs) / 1.5
    assert not outside.exists()
    assert run(DOUBLE, TESTS, LIMITS).passed == 2  # and the sandbox still works


def test_nothing_outlives_its_program():
    # The child leaves the process group (setsid) and sleeps: it is killed all the same.
    program = DOUBLE + "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)"
    assert run(program, TESTS, LIMITS).passed == 2
    time.sleep(0.2)
    assert sandbox_processes() == []


@pytest.mark.skipif(not isolation().namespaces, reason="no namespaces on this machine")
def test_namespaces_cut_the_network_and_give_a_private_tmp(tmp_path):
    probe = f"/tmp/jaxrl-sandbox-probe-{os.getpid()}"
    tests = [
        "import socket\nassert [n for _, n in socket.if_nameindex()] == ['lo']",
        f"open({probe!r}, 'w').write('private')\nassert open({probe!r}).read() == 'private'",
        "open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'",
        "import os\nassert os.getcwd() == '/tmp' and not os.path.exists('/home/x')",
    ]
    assert run("", tests, LIMITS).passed == 4
    assert not os.path.exists(probe)  # the program's /tmp was its own


def test_a_batch_of_sleepers_takes_about_the_slowest_not_the_sum():
    block = code_reward(["assert True"], limits=LIMITS, max_workers=8)
    completions = ["import time\ntime.sleep(1)"] * 8
    start = time.monotonic()
    scores = score(block, completions, [Example("p", "")] * 8)
    # About 1 s in parallel, 8 s in sequence; the margin is for a loaded machine.
    assert time.monotonic() - start < 6.0
    assert scores.rewards.tolist() == [1.0] * 8 and scores.failures == {}


def test_extract_code_takes_the_last_fenced_block():
    text = "plan\n```python\nx = 1\n```\nbetter:\n```\nx = 2\n```\n"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("x = 3") == "x = 3"


def test_literal_asserts_are_checked_outside_the_program():
    split = checks.split(
        "x = 3\nassert double(x) == 6\nassert 10 > double(1)\nassert double(0) in (0,)"
    )
    assert split.probe == "x = 3\n__report__(0, double(x))\n__report__(1, double(1))\n" + (
        "__report__(2, double(0))"
    )
    assert [(c.op, c.expected) for c in split.checks] == [("Eq", 6), ("Lt", 10), ("In", (0,))]
    assert checks.split("assert f(1) == f(2)").checks == ()  # no literal: run as it is
    lines = [b'["v", 0, 0, 6]', b'["v", 0, 1, {"f": "1.5"}]', b'["v", 0, 2, 0]', b'["done", 0]']
    assert checks.judge([split], lines) == {0}
    assert checks.judge([split], lines[:3]) == set()  # never finished
    assert checks.judge([split], [*lines, b'["v", 0, 0, 7]']) == set()  # a second guess
    assert checks.judge([split], [b'["v", 0, 0, {"x": "A"}]', *lines[1:]]) == set()


def test_reported_values_decode_to_exact_builtin_types():
    value = {"d": [{"t": [{"t": [1, "a"]}, {"fs": [{"b": "00ff"}, None]}]}]}
    assert checks.decode(value) == {(1, "a"): frozenset({b"\x00\xff", None})}
    assert checks.decode({"l": [{"c": ["1.0", "-2.0"]}, True]}) == [1 - 2j, True]
    with pytest.raises(ValueError):
        checks.decode({"q": 1})


def test_the_weakest_mode_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_launch, "bwrap_path", lambda: None)  # as without bwrap
    sandbox_core.isolation.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="jaxrl.rewards.sandbox.core"):
            assert sandbox_core.isolation().mode == "none"
            assert sandbox_core.isolation().mode == "none"
            code_reward(TESTS, limits=LIMITS)
    finally:
        sandbox_core.isolation.cache_clear()  # the next caller probes this machine again
    warnings = [r.getMessage() for r in caplog.records if "weakest mode" in r.getMessage()]
    assert len(warnings) == 1 and "no bwrap" in warnings[0]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"timeout": 0}, "timeout"),
        ({"disk_mb": 0}, "disk_mb"),
        ({"memory_mb": -1}, "memory_mb"),
        ({"open_files": 3}, "open_files"),
    ],
)
def test_bad_limits_name_the_field(options, field):
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        Limits(**options).validate()
    with pytest.raises(ConfigError, match="invalid max_workers="):
        code_reward(["assert True"], max_workers=0)
