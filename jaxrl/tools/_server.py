"""The tool server: a small, single-threaded Python process that forks one child per call.

`ToolRunner` starts it (`python .../jaxrl/tools/_server.py`) and talks to it over its stdin
and stdout in length-prefixed pickles: first the trainer's `sys.path` (so that tool
functions import as they do in the trainer), then one request per call, `(function,
arguments, output_chars, memory_mb, timeout)` (pickled twice, so that a function that
does not import here is an answer, not a dead server), answered by two messages: `"loaded"`
once the request is unpickled (the first call of a tool imports its module, which may
take a while), then `(ok, text)`.

Why a server of its own: forking the trainer is unsafe (XLA's threads hold locks a
child would inherit), starting Python per call costs seconds of imports, and
`multiprocessing`'s fork server re-imports the caller's `__main__` in each child. This
process has one thread, so its forks are safe, and it imports jaxrl once.

Per call: the child sets RLIMIT_AS (`memory_mb` above what it holds at the fork), runs
the function, makes the result text (a string, else JSON, else `repr`), cuts it to
`output_chars`, and writes `(ok, text)` to a pipe;
the server waits at most `timeout` seconds for it, then kills the child (and its process
group) and answers with a timeout error.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import select
import signal
import struct
import sys
import time
from typing import Any, BinaryIO

_HEADER = struct.Struct("!Q")


def send(stream: BinaryIO, value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    """`size` bytes (a raw, unbuffered stream may return fewer per read)."""
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the other side closed the stream")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(stream: BinaryIO) -> Any:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    return pickle.loads(_read_exactly(stream, size))


def as_text(value: Any) -> str:
    """A tool's result as the model reads it."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def cut(text: str, limit: int) -> str:
    """`text`, or its start and a note of the rest, in at most `limit` characters."""
    if len(text) <= limit:
        return text
    note = f"... [{len(text)} characters, cut]"
    return (text[: max(0, limit - len(note))] + note)[:limit]


def _address_space() -> int:
    """This process's virtual memory size in bytes (Linux: /proc/self/statm)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _child(request: tuple, write_fd: int) -> None:
    function, arguments, output_chars, memory_mb, _ = request
    # memory_mb more than the process holds now (the imports it shares with the server).
    limit = _address_space() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        answer = (True, cut(as_text(function(**arguments)), output_chars))
    except MemoryError:
        answer = (False, "error: the tool ran out of memory")
    except BaseException as err:  # whatever the arguments made the tool do: tell the model
        answer = (False, cut(f"error: {type(err).__name__}: {err}", output_chars))
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(pickle.dumps(answer))


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes until it closes the pipe, or None at the deadline."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def serve_one(request: tuple) -> tuple[bool, str]:
    """Runs one call in a forked child (see the module docstring)."""
    function = request[0]
    name = getattr(function, "__name__", type(function).__name__)
    timeout = request[4]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own process group, no access to the protocol's pipes
        os.close(read_fd)
        os.setpgid(0, 0)
        os.dup2(2, 1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        try:
            _child(request, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        data = _read_all(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
        for target in (-pid, pid):  # its process group, then itself
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
        os.waitpid(pid, 0)
    if data is None:
        return False, f"error: {name} did not finish within {timeout:g} s"
    if not data:
        return False, f"error: {name} stopped without a result"
    return pickle.loads(data)


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a tool's prints must not corrupt the protocol
    sys.path[:0] = [p for p in receive(stdin) if p not in sys.path]
    while True:
        try:
            payload = receive(stdin)  # the request, pickled once more by the runner
        except EOFError:
            return
        try:
            request = pickle.loads(payload)  # imports the tool's module the first time
        except Exception as err:  # e.g. a function that does not unpickle here
            send(stdout, "loaded")
            send(stdout, (False, f"error: the tool could not run: {type(err).__name__}: {err}"))
            continue
        send(stdout, "loaded")  # from here on the call's own timeout bounds the answer
        send(stdout, serve_one(request))


if __name__ == "__main__":
    main()
