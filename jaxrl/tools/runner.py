"""Runs the model's tool calls so that no call can hurt the trainer, and the calls of one
turn concurrently.

The model chooses a call's arguments, so a call may raise, hang, allocate without end,
return something that is not text, or return a million characters; it may name a tool
that does not exist or pass arguments the tool does not take. `ToolRunner.run` answers
every such call with a `ToolResult` whose `text` is what the model reads next (an error
message for a failed call, with `ok=False`), and the trainer goes on:

- arguments are checked against the tool's schema before anything runs;
- each call runs in its own process, forked by the runner's tool server
  (`jaxrl/tools/_server.py`: never a fork of the trainer, whose threads XLA owns), with
  an address-space limit (`memory_mb` more than it holds when forked), and is killed,
  with its process group, at its `timeout`;
- the result is made text in that process (a string as it is, else JSON, else `repr`)
  and cut to `output_chars` there (a note of the cut included), so a huge result never
  crosses to the trainer;
- an error message (a malformed or unknown call, bad arguments, a tool that raised, hung
  or died) is cut to the runner's `error_chars` the same way: it quotes what the model
  wrote, which has no length bound. So no result is longer than `max_result_chars`,
  the bound a multi-turn task promises its feedback within;
- the runner itself bounds its waits: `server_grace` seconds for the server to load the
  call (starting the server and importing a tool's module the first time), then the
  tool's `timeout` plus `server_grace` for the answer. A server that stalls (stopped,
  starved, stuck in the kernel) is killed, the call answered with an error, and the
  next call starts a new server. So not even the server can hang the trainer;
- every refused or failed call is counted by kind in `events` (`EVENTS`).

`ToolRunner.run_many(calls)` runs a batch (one turn's calls, one per episode) with at
most `max_concurrent_calls` children alive at once (default: the cores this process may
use), each call with every guarantee above; `run(call)` is a batch of one. The results
come back in the order of the calls, whatever order they finish in: each call's text
depends only on the call, its tool and the runner's limits, never on the other calls
(each runs in its own process, with its own deadline from its own fork), so a batch
gives what running its calls one by one gives. The exceptions are the machine's: calls
run side by side share the cores, so a call close to its `timeout` alone may pass it in
company (keep `max_concurrent_calls` at most the cores, and timeouts well above a
call's time), and each child may take `memory_mb`, so a batch may take
`max_concurrent_calls` times as much. A stalled server costs the calls it stalled
(answered with an error) and the others in flight are sent again to a new server.

Tool functions must be importable (module-level functions, or instances of module-level
classes): the server imports them by name. Code the model writes runs in
`jaxrl.rewards.sandbox` (the `python` tool), which isolates much more than this runner
does: this runner protects the trainer from a tool's failures, not the machine from a
hostile tool.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from jaxrl.errors import ConfigError

from . import _server
from .calls import MalformedCall, ToolCall
from .schema import Tool

_MIN_ERROR_CHARS = 48
# What `ToolRunner.events` counts: calls refused before anything ran (malformed, naming
# an unknown tool, arguments the schema does not allow), calls that ran and failed
# (raised, timed out, ran out of memory, died, or their server stalled), and tool
# servers replaced (stalled or dead).
EVENTS = ("malformed", "unknown_tool", "bad_arguments", "failed", "server_restarted")


def default_concurrency() -> int:
    """The cores this process may run on: `max_concurrent_calls`' default."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What the model reads after a call (`text`), whether the call succeeded (`ok`),
    and how long it took (from when it was sent to the tool server to its answer)."""

    text: str
    ok: bool
    seconds: float


@dataclasses.dataclass
class _Flight:
    """A call for the server: which result it is, and the runner's own deadline for the
    server's next message about it (see the module docstring)."""

    index: int  # its place in `run_many`'s calls
    tool: Tool
    request: bytes  # the pickled (function, arguments, output_chars, memory_mb, timeout)
    attempts: int = 0  # servers that died while it was in flight
    stage: str = "load"  # what the server does next: "load" the call, then "answer" it
    limit: float = 0.0  # seconds the runner gives the server for that stage
    deadline: float = 0.0  # time.monotonic() by which it must be done
    sent: float = 0.0  # time.perf_counter() when the call was sent

    def wait_for(self, stage: str, limit: float) -> None:
        self.stage, self.limit, self.deadline = stage, limit, time.monotonic() + limit


class ToolRunner:
    """Runs parsed calls (`jaxrl.tools.calls`) against `tools` (see the module docstring).

    `memory_mb` bounds each call's address space; `error_chars` each error message's
    length; `server_grace` how long the runner waits for the server to load a call, and
    how many seconds past a tool's `timeout` for its answer (starting Python, importing
    a tool's module, forking, killing and reaping a child take time on a loaded machine;
    see the module docstring); `max_concurrent_calls` how many calls of a batch
    (`run_many`) run at once (None: the cores this process may use)."""

    def __init__(
        self,
        tools: Sequence[Tool],
        memory_mb: int = 1024,
        error_chars: int = 120,
        server_grace: float = 60.0,
        max_concurrent_calls: int | None = None,
    ):
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"invalid tools: names must be unique, got {names}")
        for tool in tools:
            try:
                pickle.dumps(tool.function)
            except (pickle.PicklingError, AttributeError, TypeError):
                raise ConfigError(
                    f"invalid tool {tool.name}: its function must be importable (a "
                    "module-level function, not a lambda or a closure): calls run in a "
                    "worker process that imports it"
                ) from None
        if memory_mb < 64:
            raise ConfigError(f"invalid memory_mb={memory_mb}: must be >= 64")
        if not (isinstance(error_chars, int) and error_chars >= _MIN_ERROR_CHARS):
            raise ConfigError(
                f"invalid error_chars={error_chars!r}: must be an integer >= "
                f"{_MIN_ERROR_CHARS} (room for the start of a message and the note of its cut)"
            )
        if not server_grace > 0:
            raise ConfigError(f"invalid server_grace={server_grace!r}: must be > 0 seconds")
        if max_concurrent_calls is None:
            max_concurrent_calls = default_concurrency()
        if not (
            isinstance(max_concurrent_calls, int)
            and not isinstance(max_concurrent_calls, bool)
            and max_concurrent_calls >= 1
        ):
            raise ConfigError(
                f"invalid max_concurrent_calls={max_concurrent_calls!r}: must be an integer "
                f">= 1 (None: the {default_concurrency()} cores this process may use)"
            )
        self.tools = {tool.name: tool for tool in tools}
        self.memory_mb, self.error_chars = memory_mb, error_chars
        self.server_grace = float(server_grace)
        self.max_concurrent_calls = max_concurrent_calls
        self.events: collections.Counter[str] = collections.Counter()
        self._server: subprocess.Popen | None = None
        self._ids = itertools.count()  # a call's id on the server's pipe
        self._lock = threading.Lock()  # one batch at a time on the server's pipe

    @property
    def positional(self) -> dict[str, list[str]]:
        """Each tool's parameter names in order (the `plain` call format binds to them)."""
        return {
            name: list(tool.schema["parameters"]["properties"]) for name, tool in self.tools.items()
        }

    @property
    def max_result_chars(self) -> int:
        """The most characters any result's `text` has: a tool's `output_chars` or
        `error_chars`, whichever is larger."""
        return max([self.error_chars, *(tool.output_chars for tool in self.tools.values())])

    def run(self, call: ToolCall | MalformedCall) -> ToolResult:
        """The result the model reads for `call` (never raises for the call's sake)."""
        return self.run_many([call])[0]

    def run_many(self, calls: Sequence[ToolCall | MalformedCall]) -> list[ToolResult]:
        """The results of `calls`, in their order, the calls run concurrently (at most
        `max_concurrent_calls` at once); each result is what `run` gives for its call."""
        results: list[ToolResult | None] = [None] * len(calls)
        flights = []
        with self._lock:
            for i, call in enumerate(calls):
                start = time.perf_counter()
                refusal = self._refusal(call)
                if refusal is not None:
                    self.events[refusal[0]] += 1
                    results[i] = self._error(refusal[1], time.perf_counter() - start)
                    continue
                tool = self.tools[call.name]
                request = (tool.function, call.arguments, tool.output_chars)
                request += (self.memory_mb, tool.timeout)
                flights.append(_Flight(i, tool, pickle.dumps(request)))
            for i, (ok, text, seconds) in self._dispatch(flights).items():
                if ok:
                    results[i] = ToolResult(text, ok, seconds)
                else:
                    self.events["failed"] += 1
                    results[i] = self._error(text, seconds)
        return results

    def _refusal(self, call: ToolCall | MalformedCall) -> tuple[str, str] | None:
        """The event and error message of a call that must not run, or None."""
        if isinstance(call, MalformedCall):
            return "malformed", f"error: {call.error}"
        tool = self.tools.get(call.name)
        if tool is None:
            return (
                "unknown_tool",
                f"error: unknown tool {call.name!r}; available: {sorted(self.tools)}",
            )
        problem = tool.check_arguments(call.arguments)
        if problem:
            return "bad_arguments", f"error: {problem}"
        return None

    def _error(self, message: str, seconds: float) -> ToolResult:
        return ToolResult(_server.cut(message, self.error_chars), False, seconds)

    def _dispatch(self, flights: Sequence[_Flight]) -> dict[int, tuple[bool, str, float]]:
        """Each flight's `(ok, text, seconds)` by its index: at most
        `max_concurrent_calls` calls on the server at once, the next sent as soon as one
        is answered; the runner's deadlines as in the module docstring."""
        answers: dict[int, tuple[bool, str, float]] = {}
        waiting = collections.deque(flights)
        sent: dict[int, _Flight] = {}  # by call id
        while waiting or sent:
            if sent and self._server.poll() is not None:  # it died holding calls
                self._died(sent, waiting)
                continue
            server = self._ensure_server()
            try:
                while waiting and len(sent) < self.max_concurrent_calls:
                    flight = waiting.popleft()
                    call_id = next(self._ids)
                    sent[call_id] = flight
                    flight.wait_for("load", self.server_grace)
                    flight.sent = time.perf_counter()
                    _server.send(server.stdin, (call_id, flight.request))
                wait = min(flight.deadline for flight in sent.values()) - time.monotonic()
                # Unbuffered: nothing can sit in a reader's buffer unseen by select.
                if not select.select([server.stdout], [], [], max(0.0, wait))[0]:
                    self._stalled(sent, waiting, answers)
                    continue
                call_id, message = _server.receive(server.stdout)
            except (EOFError, BrokenPipeError, OSError):
                self._died(sent, waiting)
                continue
            flight = sent[call_id]
            if message == "loaded":  # from here on the tool's own timeout, and the grace
                flight.wait_for("answer", flight.tool.timeout + self.server_grace)
                continue
            del sent[call_id]
            answers[flight.index] = (*message, time.perf_counter() - flight.sent)
        return answers

    def _stalled(self, sent: dict[int, _Flight], waiting: collections.deque, answers: dict) -> None:
        """The server missed a deadline: the calls whose deadline passed are answered with
        an error, the server is killed, and the other calls go to the next one."""
        now = time.monotonic()
        late = [call_id for call_id, flight in sent.items() if flight.deadline <= now]
        if not late:  # select returned a moment early
            return
        for call_id in late:
            flight = sent.pop(call_id)
            message = (
                f"error: the tool server did not {flight.stage} {flight.tool.name} within "
                f"{flight.limit:g} s; it was restarted"
            )
            answers[flight.index] = (False, message, time.perf_counter() - flight.sent)
        self._requeue(sent, waiting)

    def _died(self, sent: dict[int, _Flight], waiting: collections.deque) -> None:
        """The server's pipe broke: a new server takes the calls in flight, once."""
        for flight in sent.values():
            flight.attempts += 1
            if flight.attempts >= 2:
                self.close()
                raise RuntimeError("the tool server stopped twice in a row")
        self._requeue(sent, waiting)

    def _requeue(self, sent: dict[int, _Flight], waiting: collections.deque) -> None:
        """Kills the server; the calls it held go first to the next one, in order."""
        self.events["server_restarted"] += 1
        self.close()
        again = sorted([*sent.values(), *waiting], key=lambda flight: flight.index)
        sent.clear()
        waiting.clear()
        waiting.extend(again)

    def _ensure_server(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                [sys.executable, _server.__file__],  # by path: no package import first
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # see `_dispatch`: select() must see every byte not yet read
            )
            _server.send(self._server.stdin, (list(sys.path), self.max_concurrent_calls))
        return self._server

    def close(self) -> None:
        """Stops the tool server (a later call starts a new one)."""
        if getattr(self, "_server", None) is not None:
            self._server.kill()
            self._server.wait()
            self._server = None

    def __enter__(self) -> ToolRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter exit module globals (`contextlib`, `subprocess`'s) may be gone
        # before this runs, so only builtins here; the server then ends with its closed
        # stdin anyway.
        try:  # noqa: SIM105 - contextlib may already be None
            self.close()
        except Exception:  # noqa: S110
            pass
