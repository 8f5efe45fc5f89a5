"""The calls of one turn run concurrently (issue 33, `ToolRunner.run_many`): results in
the calls' order and with the texts running them one by one gives, whatever order they
finish in; at most `max_concurrent_calls` children at once; a call that sleeps, floods,
forks or allocates holds up only itself; every refused or failed call counted alike."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from jaxrl.errors import ConfigError  # not jaxrl.config: the tool server imports this module
from jaxrl.tools import MalformedCall, Tool, ToolCall, ToolRunner
from jaxrl.tools.runner import default_concurrency

# The sleeping call's timeout; every other call must be answered well before it. Long
# enough that a loaded 2-core CI machine (pytest -n 2) still answers the flood and the
# forks in half of it: at 3 s the flood missed that bound once at load ~7.
HOSTILE_TIMEOUT = 8.0


# Tools for the runner: module-level, so that its server imports them (without JAX).
def add(a: int, b: int = 0) -> int:
    """Adds two integers."""
    return a + b


def fail(reason: str) -> str:
    """Raises with the given reason."""
    raise RuntimeError(reason)


def hang(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "woke up"


def allocate(megabytes: int) -> int:
    """Allocates memory."""
    return len(bytearray(megabytes * 2**20))


def structured() -> dict:
    """Returns a non-text value."""
    return {"answer": [1, 2], "unit": "m²"}


def nap(seconds: float, text: str) -> str:
    """Sleeps, then returns the text."""
    time.sleep(seconds)
    return text


def span(seconds: float) -> list:
    """When it ran: [start, end] on the system's monotonic clock."""
    start = time.monotonic()
    time.sleep(seconds)
    return [start, time.monotonic()]


def spawn(children: int) -> list:
    """Forks children that sleep for a minute (holding the answer pipe), returns their pids."""
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
    return pids


def flood(chars: int) -> str:
    """Prints a lot, then returns a huge text."""
    for _ in range(100):
        print("flood " * 1000)
    return "F" * chars


def tools(timeout: float = 1.0) -> list[Tool]:
    quick = [add, fail, allocate, structured, nap, span, spawn, flood]
    wide = (span, spawn)  # their results are lists of numbers, read back whole
    return [
        Tool.from_function(f, timeout=timeout, output_chars=1000 if f in wide else 50)
        for f in quick
    ] + [Tool.from_function(hang, timeout=1.0, output_chars=50)]


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, arguments, (0, 0))


MIXED = [
    call("nap", seconds=0.4, text="first"),  # finishes last
    call("add", a=2, b=40),
    MalformedCall("the tool call is not valid JSON", (0, 5)),
    call("hang", seconds=60),  # its timeout
    call("nope"),
    call("nap", seconds=0.2, text="third"),
    call("add", a="two"),
    call("fail", reason="boom"),
    call("allocate", megabytes=1024),  # past memory_mb
    call("flood", chars=10**6),  # cut
    call("structured"),
    call("nap", seconds=0.0, text="fifth"),  # finishes first
]


def test_a_batch_gives_what_one_by_one_gives_in_the_calls_order():
    with ToolRunner(tools(), memory_mb=256, max_concurrent_calls=1) as one:
        alone = [one.run(c) for c in MIXED]
        alone_events = dict(one.events)
    with ToolRunner(tools(), memory_mb=256, max_concurrent_calls=4) as many:
        together = many.run_many(MIXED)
        assert dict(many.events) == alone_events
    assert [(r.text, r.ok) for r in together] == [(r.text, r.ok) for r in alone]
    texts = [r.text for r in together]
    assert texts[0] == "first" and texts[5] == "third" and texts[-1] == "fifth"
    assert texts[3] == "error: hang did not finish within 1 s"
    assert texts[1] == "42" and texts[9].endswith("characters, cut]")
    assert alone_events == {
        "malformed": 1,
        "unknown_tool": 1,
        "bad_arguments": 1,
        "failed": 3,  # hang, fail, allocate
    }


def test_at_most_max_concurrent_calls_run_at_once():
    """Six calls of 0.3 s each: never more than the bound side by side, and side by side
    (not one after another) up to it."""

    def most_at_once(results) -> int:
        spans = [json.loads(r.text) for r in results]
        return max(sum(s <= t < e for s, e in spans) for t, _ in spans)

    batch = [call("span", seconds=0.3)] * 6
    with ToolRunner(tools(), max_concurrent_calls=2) as two:
        results = two.run_many(batch)
    assert all(r.ok for r in results) and most_at_once(results) == 2
    with ToolRunner(tools(), max_concurrent_calls=6) as six:
        results = six.run_many(batch)
    assert most_at_once(results) > 2  # sleeping calls need no core: all overlap


def _gone(pid: int) -> bool:
    """Whether the process ended (gone, or a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_hostile_calls_hold_up_only_themselves():
    """A call that sleeps past its timeout, one that floods (prints and returns a huge
    text), one that forks children who keep its answer pipe open, and one that allocates
    without end run beside quick calls: the quick ones are answered correctly long
    before the sleeper's timeout, and the batch ends at about that timeout."""
    hostile = [
        Tool.from_function(hang, timeout=HOSTILE_TIMEOUT, output_chars=50),
        *[t for t in tools(timeout=HOSTILE_TIMEOUT) if t.name != "hang"],
    ]
    batch = [
        call("hang", seconds=60),
        call("add", a=1, b=1),
        call("flood", chars=10**7),
        call("add", a=2, b=2),
        call("spawn", children=20),
        call("allocate", megabytes=4096),
        call("add", a=3, b=3),
    ]
    with ToolRunner(hostile, memory_mb=256, max_concurrent_calls=len(batch)) as runner:
        start = time.perf_counter()
        results = runner.run_many(batch)
        wall = time.perf_counter() - start
        assert [results[i].text for i in (1, 3, 6)] == ["2", "4", "6"]
        for i in (1, 2, 3, 4, 5, 6):  # answered without waiting for the sleeper
            assert results[i].seconds < HOSTILE_TIMEOUT / 2, (batch[i], results[i])
        assert results[0].text == f"error: hang did not finish within {HOSTILE_TIMEOUT:g} s"
        assert results[2].ok and results[2].text.endswith("[10000000 characters, cut]")
        assert results[5].text == "error: the tool ran out of memory"
        # The forked children were killed with the call's process group.
        pids = json.loads(results[4].text)
        assert len(pids) == 20
        assert all(_gone(pid) for pid in pids)
        assert wall < HOSTILE_TIMEOUT + 10
        assert runner.run_many([call("add", a=5)])[0].text == "5"  # and the runner goes on


def test_a_dead_server_is_replaced_between_batches():
    with ToolRunner(tools(), max_concurrent_calls=2) as runner:
        assert [r.text for r in runner.run_many([call("add", a=1), call("add", a=2)])] == [
            "1",
            "2",
        ]
        os.kill(runner._server.pid, signal.SIGKILL)
        runner._server.wait()
        results = runner.run_many([call("add", a=3), call("add", a=4), call("add", a=5)])
        assert [r.text for r in results] == ["3", "4", "5"]


def test_a_stalled_server_costs_only_the_calls_it_stalled():
    """A stopped server misses the runner's deadline: the calls on it are answered with
    an error (never a hang), the server is replaced, and the next batch is answered."""
    with ToolRunner(tools(), max_concurrent_calls=2) as runner:
        assert runner.run(call("add", a=1)).text == "1"  # up, the test module imported
        runner.server_grace = 1.0
        stalled = runner._server
        os.kill(stalled.pid, signal.SIGSTOP)
        start = time.perf_counter()
        results = runner.run_many([call("add", a=2), call("add", a=3), call("add", a=4)])
        assert time.perf_counter() - start < 10
        for result, value in zip(results, ["2", "3", "4"], strict=True):
            assert result.text == value or "did not load add within 1 s" in result.text
        assert not results[0].ok  # the first in flight was stalled
        assert stalled.poll() is not None and runner.events["server_restarted"] >= 1
        runner.server_grace = 60.0
        assert [r.text for r in runner.run_many([call("add", a=5), call("add", a=6)])] == [
            "5",
            "6",
        ]


def test_an_empty_batch_starts_no_server():
    with ToolRunner(tools()) as runner:
        assert runner.run_many([]) == []
        assert runner._server is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_max_concurrent_calls_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match=rf"invalid max_concurrent_calls={bad!r}: must be an"):
        ToolRunner(tools(), max_concurrent_calls=bad)


def test_max_concurrent_calls_defaults_to_the_cores():
    assert ToolRunner(tools()).max_concurrent_calls == default_concurrency()
    assert default_concurrency() == len(os.sched_getaffinity(0))
