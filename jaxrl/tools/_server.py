"""The tool server: a small, single-threaded Python process that forks one child per call
and runs up to `max_children` of them at once.

`ToolRunner` starts it (`python .../jaxrl/tools/_server.py`) and talks to it over its stdin
and stdout in length-prefixed pickles: first `(sys.path, max_children)` (the trainer's
path, so that tool functions import as they do in the trainer, and the bound on children
alive at once), then one message per call, `(call_id, request)`, where `request` is the
pickle of `(function, arguments, output_chars, memory_mb, timeout)` (pickled apart, so
that a function that does not import here is an answer, not a dead server). Each call is
answered by two messages, in whatever order the calls finish: `(call_id, "loaded")` once
the request is unpickled (the first call of a tool imports its module, which may take a
while), then `(call_id, (ok, text))`.

Why a server of its own: forking the trainer is unsafe (XLA's threads hold locks a
child would inherit), starting Python per call costs seconds of imports, and
`multiprocessing`'s fork server re-imports the caller's `__main__` in each child. This
process has one thread, so its forks are safe, and it imports jaxrl once.

Per call: the child sets RLIMIT_AS (`memory_mb` above what it holds at the fork), runs
the function, makes the result text (a string, else JSON, else `repr`), cuts it to
`output_chars`, and writes `(ok, text)`, length-prefixed, to a pipe of its own. The
server's loop (`select` over its stdin and every child's pipe) reads each child's answer
as it comes and kills a child (and its process group) the moment its answer is whole or
its `timeout` has passed since its fork, whichever comes first; it answers with a timeout
error in the second case. So a call that sleeps, floods, forks or allocates holds up only
itself, and the children run concurrently; while `max_children` are alive the server
reads no new call.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
    data = pickle.dumps(answer)
    # Length-prefixed: the server knows the answer is whole without waiting for the pipe
    # to close, which a process the tool forked (holding the pipe too) would delay.
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(_HEADER.pack(len(data)) + data)


@dataclasses.dataclass
class _Running:
    """A child at work on one call: where its answer arrives and until when it may run."""

    call_id: Any
    pid: int
    fd: int  # the read end of the child's answer pipe
    name: str
    timeout: float
    deadline: float  # time.monotonic() at its fork + timeout
    data: bytearray = dataclasses.field(default_factory=bytearray)

    def answer(self) -> tuple[bool, str] | None:
        """The child's answer once it is whole (None before)."""
        if len(self.data) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self.data)
        if len(self.data) < _HEADER.size + size:
            return None
        try:
            answer = pickle.loads(bytes(self.data[_HEADER.size : _HEADER.size + size]))
        except Exception:  # what a process the tool forked wrote into the pipe
            return self.stopped()
        ok = isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], bool)
        return answer if ok and isinstance(answer[1], str) else self.stopped()

    def stopped(self) -> tuple[bool, str]:
        return False, f"error: {self.name} stopped without a result"


def _fork(call_id: Any, request: tuple, running: dict[int, _Running]) -> _Running:
    """Starts the child for one call (see the module docstring)."""
    function = request[0]
    name = getattr(function, "__name__", type(function).__name__)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own process group, no access to the protocol's pipes
        try:
            os.close(read_fd)
            for other in running:  # the other children's answers are not its business
                os.close(other)
            os.setpgid(0, 0)
            os.dup2(2, 1)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            _child(request, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    timeout = request[4]
    return _Running(call_id, pid, read_fd, name, timeout, time.monotonic() + timeout)


def _kill(child: _Running) -> None:
    """Kills the child (its process group, then itself) and reaps it."""
    os.close(child.fd)
    for target in (-child.pid, child.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
    os.waitpid(child.pid, 0)


def _finish(child: _Running, answer: tuple[bool, str], stdout: BinaryIO) -> None:
    """Ends the child and sends its call's answer."""
    _kill(child)
    send(stdout, (child.call_id, answer))


def _read_child(child: _Running) -> tuple[bool, str] | None:
    """Reads what the child wrote so far; its answer once whole or the pipe closed."""
    chunk = os.read(child.fd, 1 << 16)
    if not chunk:  # closed: the child ended (or died) before its answer was whole
        return child.answer() or child.stopped()
    child.data += chunk
    return child.answer()


def _accept(stdin: BinaryIO, stdout: BinaryIO, running: dict[int, _Running]) -> bool:
    """Reads one call and starts its child; False once the runner closed the pipe."""
    try:
        call_id, payload = receive(stdin)  # the request is pickled once more by the runner
    except EOFError:
        return False
    try:
        request = pickle.loads(payload)  # imports the tool's module the first time
    except Exception as err:  # e.g. a function that does not unpickle here
        send(stdout, (call_id, "loaded"))
        problem = f"error: the tool could not run: {type(err).__name__}: {err}"
        send(stdout, (call_id, (False, problem)))
        return True
    send(stdout, (call_id, "loaded"))  # from here on the call's own timeout bounds the answer
    child = _fork(call_id, request, running)
    running[child.fd] = child
    return True


def serve(stdin: BinaryIO, stdout: BinaryIO, max_children: int) -> None:
    """Answers calls until the runner closes `stdin` (see the module docstring)."""
    running: dict[int, _Running] = {}  # by the read end of each child's pipe
    reading = True
    while reading or running:
        watch = list(running)
        if reading and len(running) < max_children:
            watch.append(stdin.fileno())
        wait = None
        if running:
            wait = max(0.0, min(c.deadline for c in running.values()) - time.monotonic())
        for fd in select.select(watch, [], [], wait)[0]:
            if fd == stdin.fileno():
                reading = _accept(stdin, stdout, running)
            else:
                answer = _read_child(running[fd])
                if answer is not None:
                    _finish(running.pop(fd), answer, stdout)
        if not reading:  # the runner is gone: nobody reads the answers
            for fd in list(running):
                _kill(running.pop(fd))
            return
        now = time.monotonic()
        for fd in [fd for fd, child in running.items() if child.deadline <= now]:
            child = running.pop(fd)
            timed_out = f"error: {child.name} did not finish within {child.timeout:g} s"
            _finish(child, (False, timed_out), stdout)


def main() -> None:
    stdin, stdout = sys.stdin.buffer.raw, sys.stdout.buffer  # raw: select sees every byte
    sys.stdout = sys.stderr  # a tool's prints must not corrupt the protocol
    paths, max_children = receive(stdin)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    with contextlib.suppress(BrokenPipeError):
        serve(stdin, stdout, max_children)


if __name__ == "__main__":
    main()
