"""Runs the model's tool calls so that no call can hurt the trainer.

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
  next call starts a new server. So not even the server can hang the trainer.

Tool functions must be importable (module-level functions, or instances of module-level
classes): the server imports them by name. Code the model writes runs in
`jaxrl.rewards.sandbox` (the `python` tool), which isolates much more than this runner
does: this runner protects the trainer from a tool's failures, not the machine from a
hostile tool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from jaxrl.errors import ConfigError

from . import _server
from .calls import MalformedCall, ToolCall
from .schema import Tool

_MIN_ERROR_CHARS = 48


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What the model reads after a call (`text`), whether the call succeeded (`ok`),
    and how long it took."""

    text: str
    ok: bool
    seconds: float


class ToolRunner:
    """Runs parsed calls (`jaxrl.tools.calls`) against `tools` (see the module docstring).

    `memory_mb` bounds each call's address space; `error_chars` each error message's
    length; `server_grace` how long the runner waits for the server to load a call, and
    how many seconds past a tool's `timeout` for its answer (starting Python, importing
    a tool's module, forking, killing and reaping a child take time on a loaded machine;
    see the module docstring)."""

    def __init__(
        self,
        tools: Sequence[Tool],
        memory_mb: int = 1024,
        error_chars: int = 120,
        server_grace: float = 60.0,
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
        self.tools = {tool.name: tool for tool in tools}
        self.memory_mb, self.error_chars = memory_mb, error_chars
        self.server_grace = float(server_grace)
        self._server: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one call at a time on the server's pipe

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
        start = time.perf_counter()
        if isinstance(call, MalformedCall):
            return self._error(f"error: {call.error}", start)
        tool = self.tools.get(call.name)
        if tool is None:
            return self._error(
                f"error: unknown tool {call.name!r}; available: {sorted(self.tools)}", start
            )
        problem = tool.check_arguments(call.arguments)
        if problem:
            return self._error(f"error: {problem}", start)
        ok, text = self._call(tool, call.arguments)
        if not ok:
            return self._error(text, start)
        return ToolResult(text, ok, time.perf_counter() - start)

    def _error(self, message: str, start: float) -> ToolResult:
        return ToolResult(
            _server.cut(message, self.error_chars), False, time.perf_counter() - start
        )

    def _call(self, tool: Tool, arguments: dict[str, Any]) -> tuple[bool, str]:
        request = pickle.dumps(
            (tool.function, arguments, tool.output_chars, self.memory_mb, tool.timeout)
        )
        with self._lock:
            for attempt in range(2):  # a server that died is started again, once
                server = self._ensure_server()
                try:
                    _server.send(server.stdin, request)
                    for stage, limit in (
                        ("load", self.server_grace),
                        ("answer", tool.timeout + self.server_grace),
                    ):
                        # Unbuffered: nothing can sit in a reader's buffer unseen by select.
                        if not select.select([server.stdout], [], [], limit)[0]:
                            self.close()
                            return False, (
                                f"error: the tool server did not {stage} {tool.name} within "
                                f"{limit:g} s; it was restarted"
                            )
                        message = _server.receive(server.stdout)
                    return message
                except (EOFError, BrokenPipeError, OSError):
                    self.close()
                    if attempt:
                        raise RuntimeError("the tool server stopped twice in a row") from None
        raise AssertionError("unreachable")

    def _ensure_server(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                [sys.executable, _server.__file__],  # by path: no package import first
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # see `_call`: select() must see every byte not yet read
            )
            _server.send(self._server.stdin, list(sys.path))
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
        # At interpreter exit `subprocess`'s globals may be gone before this runs; the
        # server then ends with its closed stdin anyway.
        with contextlib.suppress(Exception):
            self.close()
