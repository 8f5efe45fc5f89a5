"""Runs model-written Python against tests in a sandboxed subprocess (`code_reward`).

One program is one child process tree, started by `run` and always torn down before it
returns. Layers, each with what it does and does not stop:

* **Time**: a wall-clock `timeout`, then SIGKILL to the child's process group (it starts
  in its own session), and RLIMIT_CPU per process.
* **Memory, files, output**: RLIMIT_AS (address space), RLIMIT_FSIZE (any file written,
  including the output), RLIMIT_NOFILE, RLIMIT_CORE=0. stdout and stderr go to a file,
  so a program printing 100 MB is stopped by RLIMIT_FSIZE (SIGXFSZ) and the parent reads
  at most `output_bytes` of it: output never fills the trainer's memory.
* **Processes**: RLIMIT_NPROC counts the processes of the child's *real user*, and the
  kernel ignores it for root (and for CAP_SYS_RESOURCE/CAP_SYS_ADMIN). So as root the
  child drops to its own unprivileged uid (`uid_base + slot`, one per concurrent
  program, none shared with a real user or another trainer process): the limit then
  caps that program's process tree alone, and a fork bomb stops at `max_processes`.
  Without root (and without user namespaces) the limit counts all of the user's
  processes, which still bounds a fork bomb but may refuse forks early on a busy account.
* **Namespaces** (`unshare --mount --net --pid`, when `isolation()` finds them allowed,
  as root or through a user namespace): no network but loopback; a PID namespace whose
  init is the program, so when it exits or is killed the kernel kills every process it
  left, even ones that left the process group with `setsid`; `/proc` shows only them;
  and a mount namespace in which every mount is remounted read-only except the scratch
  directory (bound onto itself), so nothing outside scratch can be written, /tmp and
  /dev/shm included.
* **Scratch and environment**: cwd is a fresh directory (also `HOME` and `TMPDIR`),
  deleted afterwards; the environment has only `PATH`, `HOME`, `TMPDIR` and `LANG`;
  Python runs isolated (`-I`: no `PYTHON*` variables, no user site, no cwd on the path).

Without namespaces (no `unshare`, or not permitted) there is **no network isolation**;
as root the drop to an unprivileged uid still prevents writes to files and directories
that are not world-writable (so the trainer's files are safe) but **not** writes to
world-writable directories (`/tmp`, `/var/tmp`, `/dev/shm`), and the leftovers of a
program are killed by signalling every process of its uid; without root either, writes
are limited only by the user's own permissions and a program that calls `setsid`
escapes the process-group kill (its CPU limit still ends it). `isolation()` says which
case holds and `run` logs it once. cgroups (memory and pids controllers) and seccomp
would be stronger still; they need root-managed hierarchies and are not used.

The limits are set by a small bootstrap (`_BOOTSTRAP`) that the child runs before it
executes the harness, not in a `preexec_fn`: `run_batch` starts programs from several
threads, and a `preexec_fn` is not safe with threads. The harness reads the program and
tests from stdin, runs the program, then each test in the program's namespace, and
writes one line per passed test, tagged with a random nonce, to a file descriptor only
the parent reads: a program that exits early, crashes or prints fake results passes
nothing. It is not a defence against a program written to find the nonce in the
harness's memory; keep tests in a trusted form if models are rewarded for cheating.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from jaxrl.config import ConfigError, check
from jaxrl.tasks import Example

from .base import Block

logger = logging.getLogger(__name__)

MAX_SLOTS = 64  # concurrent programs per trainer process (each gets its own uid)
_UID_BASE = 2_000_000_000  # + pid * MAX_SLOTS + slot; far above any real user's uid
_UNSHARE = ("unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc")
_RESULTS_CAP = 1 << 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-program limits (see the module docstring for what each one stops)."""

    timeout: float = 5.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_seconds: int = 5
    """RLIMIT_CPU: CPU seconds per process."""
    memory_mb: int = 512
    """RLIMIT_AS: address space per process, in MiB."""
    max_processes: int = 32
    """RLIMIT_NPROC: processes of the sandbox's user (its own uid when we are root)."""
    file_size_mb: float = 8.0
    """RLIMIT_FSIZE: largest file a program may write, its output included, in MiB."""
    output_bytes: int = 65536
    """Bytes of stdout and stderr kept in `Result.output`."""
    open_files: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""

    def validate(self) -> Limits:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        for name in ("timeout", "cpu_seconds", "memory_mb", "max_processes", "file_size_mb"):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and value > 0, name, value, "> 0")
        check(self.output_bytes >= 0, "output_bytes", self.output_bytes, ">= 0")
        check(self.open_files >= 16, "open_files", self.open_files, ">= 16 (Python needs some)")
        return self


@dataclasses.dataclass(frozen=True)
class Result:
    """What one program did: tests passed, how it ended, the start of its output."""

    passed: int
    total: int
    status: str
    """"ok" (exit 0), "error" (non-zero exit), "killed" (a signal: a limit was hit) or
    "timeout" (the wall clock ran out)."""
    returncode: int | None
    output: str
    seconds: float

    @property
    def fraction(self) -> float:
        """Passed tests over all tests (0 for no tests)."""
        return self.passed / self.total if self.total else 0.0


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What this machine lets the sandbox do (see the module docstring)."""

    namespaces: bool
    """Network, PID and mount namespaces (read-only filesystem outside scratch)."""
    own_uid: bool
    """Each program runs as its own unprivileged uid (we are root)."""


# ----------------------------------------------------------------------- child programs
# Runs in the child as the (possibly namespaced) root: read-only remounts, limits, drop
# to the sandbox uid, then exec the harness. argv[1] is a JSON object of settings.
_BOOTSTRAP = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
scratch = cfg["scratch"]
if cfg["remount"]:
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
    MS_NOATIME, MS_NODIRATIME, MS_REC, MS_PRIVATE = 1024, 2048, 16384, 1 << 18
    MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
    KEEP = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
            "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME,
            "strictatime": MS_STRICTATIME}
    libc = ctypes.CDLL(None, use_errno=True)
    def mount(source, target, flags):
        if libc.mount(source, target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), target)
    mount(None, "/", MS_REC | MS_PRIVATE)
    mount(scratch.encode(), scratch, MS_BIND)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    unescape = lambda p: p.encode().decode("unicode_escape")  # "\040" -> " "
    for fields in mounts:
        point = unescape(fields[4])
        if point != scratch:
            keep = sum(KEEP.get(o, 0) for o in fields[5].split(","))
            mount(None, point, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
for name, value in cfg["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
if cfg["uid"] is not None:
    os.setgroups([])
    os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
if cfg["remount"]:  # changing uid cleared unshare's --kill-child (PR_SET_PDEATHSIG): re-arm
    PR_SET_PDEATHSIG, SIGKILL = 1, 9
    if libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_PDEATHSIG) failed")
os.chdir(scratch)
os.execve(cfg["python"], [cfg["python"], "-I", "-c", cfg["harness"], str(cfg["fd"])],
          cfg["env"])
"""

# Runs the program, then each test; one "<nonce> <index>" line per passed test.
_HARNESS = r"""
import json, os, sys, traceback
def main():
    results = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    nonce, namespace = job.pop("nonce"), {"__name__": "__main__"}
    exec(compile(job.pop("program"), "solution.py", "exec"), namespace)
    for i, test in enumerate(job.pop("tests")):
        try:
            exec(compile(test, f"test_{i}", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
        else:
            results.write(f"{nonce} {i}\n")
main()
"""


# ----------------------------------------------------------------------------- slots
class _Slots:
    """Slot numbers for concurrent programs, hence distinct sandbox uids."""

    def __init__(self, size: int) -> None:
        self._free = list(range(size))
        self._ready = threading.Condition()

    def acquire(self) -> int:
        with self._ready:
            self._ready.wait_for(lambda: self._free)
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._ready:
            self._free.append(slot)
            self._ready.notify()


_slots = _Slots(MAX_SLOTS)


def _sandbox_uid(slot: int) -> int:
    return _UID_BASE + os.getpid() * MAX_SLOTS + slot


# ----------------------------------------------------------------------------- running
def _rlimits(limits: Limits) -> dict[str, int]:
    mib = 1 << 20
    return {
        "RLIMIT_CPU": int(limits.cpu_seconds),
        "RLIMIT_AS": int(limits.memory_mb * mib),
        "RLIMIT_FSIZE": int(limits.file_size_mb * mib),
        "RLIMIT_NPROC": int(limits.max_processes),
        "RLIMIT_NOFILE": int(limits.open_files),
        "RLIMIT_CORE": 0,
    }


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _kill_uid(uid: int) -> None:
    """SIGKILL to every process of `uid` (without a PID namespace, leftovers that left
    the process group): `kill -1` run as that uid signals exactly its processes."""
    subprocess.run(
        ["kill", "-s", "KILL", "--", "-1"], user=uid, group=uid, capture_output=True, check=False
    )


def _others_may_run(path: str) -> bool:
    """Whether any user may execute `path` (o+x on it and every directory above it)."""
    path = os.path.realpath(path)
    parts = [path] + [os.path.dirname(path)]
    while parts[-1] != os.path.dirname(parts[-1]):
        parts.append(os.path.dirname(parts[-1]))
    return all(os.stat(p).st_mode & 0o001 for p in parts)


@functools.cache
def interpreter(own_uid: bool) -> str:
    """The Python that runs programs: this one, unless the sandbox uid cannot execute it
    (e.g. it lives under a private /root), then the system's `python3`."""
    if not own_uid or _others_may_run(sys.executable):
        return sys.executable
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None or not _others_may_run(system):
        raise RuntimeError(
            f"the sandbox user cannot execute {sys.executable} and there is no "
            "world-executable python3 in /usr/local/bin, /usr/bin or /bin"
        )
    return system


def _run(program: str, tests: Sequence[str], limits: Limits, iso: Isolation) -> Result:
    start = time.monotonic()
    slot = _slots.acquire()
    uid = _sandbox_uid(slot) if iso.own_uid else None
    run_dir = tempfile.mkdtemp(prefix="jaxrl-sandbox-")
    try:
        scratch = os.path.join(run_dir, "scratch")
        os.mkdir(scratch, 0o700)
        os.chmod(run_dir, 0o711)  # the sandbox uid may enter, not list or write
        if uid is not None:
            os.chown(scratch, uid, uid)
        nonce = secrets.token_hex(16)
        with (
            open(os.path.join(run_dir, "output"), "w+b") as out,
            open(os.path.join(run_dir, "results"), "w+b") as res,
        ):
            settings = {
                "scratch": scratch,
                "remount": iso.namespaces,
                "rlimits": _rlimits(limits),
                "uid": uid,
                "fd": res.fileno(),
                "harness": _HARNESS,
                "python": interpreter(iso.own_uid),
                "env": {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch,
                        "LANG": "C.UTF-8"},
            }  # fmt: skip
            prefix = list(_UNSHARE) if iso.namespaces else []
            if iso.namespaces and not iso.own_uid:
                prefix.insert(1, "--map-root-user")  # a user namespace makes us its root
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(settings)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(res.fileno(),),
                cwd=scratch,
                env=settings["env"],
                start_new_session=True,
            )
            job = json.dumps({"nonce": nonce, "program": program, "tests": list(tests)})
            try:
                proc.communicate(job.encode(), timeout=limits.timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
                proc.wait()
                if uid is not None:  # also what left the group and outlived its parent
                    _kill_uid(uid)
            out.seek(0)
            output = out.read(limits.output_bytes).decode("utf-8", errors="replace")
            res.seek(0)
            lines = res.read(_RESULTS_CAP).decode("ascii", errors="replace").splitlines()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        _slots.release(slot)
    passed = {int(m[1]) for m in (re.fullmatch(rf"{nonce} (\d+)", x) for x in lines) if m}
    code = proc.returncode
    status = "timeout" if timed_out else "ok" if code == 0 else "killed" if code < 0 else "error"
    return Result(
        passed=len(passed & set(range(len(tests)))),
        total=len(tests),
        status=status,
        returncode=code,
        output=output,
        seconds=time.monotonic() - start,
    )


@functools.cache
def isolation() -> Isolation:
    """Probes once which isolation this machine allows: runs a trivial program with
    namespaces and, if that fails, settles for what needs none (logged once)."""
    own_uid = os.geteuid() == 0
    if shutil.which("unshare"):
        trial = Isolation(namespaces=True, own_uid=own_uid)
        result = _run("", ["pass"], Limits(timeout=30.0), trial)
        if result.passed == 1:
            return trial
        reason = f"unshare failed: {result.output.strip()[-300:]!r}"
    else:
        reason = "no unshare binary"
    logger.warning(
        "sandbox without namespaces (%s): no network isolation; %s",
        reason,
        "writes to world-writable directories such as /tmp are not prevented"
        if own_uid
        else "writes are limited only by this user's permissions",
    )
    return Isolation(namespaces=False, own_uid=own_uid)


def run(program: str, tests: Sequence[str], limits: Limits | None = None) -> Result:
    """Runs `program`, then each test (Python source, e.g. `"assert f(2) == 4"`) in the
    program's namespace, in a sandbox (see the module docstring)."""
    limits = (limits or Limits()).validate()
    return _run(program, tests, limits, isolation())


def run_batch(
    programs: Sequence[str],
    tests: Sequence[Sequence[str]],
    limits: Limits | None = None,
    max_workers: int = 8,
) -> list[Result]:
    """`run` on each (program, tests) pair, `max_workers` sandboxes at a time, so a
    batch takes about as long as its slowest programs, not their sum."""
    check(1 <= max_workers <= MAX_SLOTS, "max_workers", max_workers, f"in [1, {MAX_SLOTS}]")
    limits = (limits or Limits()).validate()
    iso = isolation()
    from concurrent.futures import ThreadPoolExecutor  # threads only wait on children

    with ThreadPoolExecutor(max_workers) as pool:
        return list(pool.map(lambda pt: _run(*pt, limits, iso), zip(programs, tests, strict=True)))


# ----------------------------------------------------------------------------- reward
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The last fenced code block (```python ... ```) of a completion, else all of it."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def answer_tests(example: Example) -> list[str]:
    """Tests from a reference answer: each non-blank line is one test."""
    return [line for line in example.answer.splitlines() if line.strip()]


def code_reward(
    tests: Sequence[str] | Callable[[Example], Sequence[str]] | None = None,
    *,
    all_or_nothing: bool = False,
    limits: Limits | None = None,
    max_workers: int = 8,
) -> Block:
    """A block that runs the completion's code (`extract_code`) against tests in the
    sandbox: the fraction of tests passed, or with `all_or_nothing` 1 only if all pass.

    `tests`: the same tests for every example, a function of the example, or None for
    `answer_tests` (one test per line of the reference answer, as a JSONL task of
    coding problems would store them). `max_workers` programs run at once in `score`.
    """
    limits = (limits or Limits()).validate()
    check(1 <= max_workers <= MAX_SLOTS, "max_workers", max_workers, f"in [1, {MAX_SLOTS}]")
    if tests is None:
        tests_of: Callable[[Example], Sequence[str]] = answer_tests
    elif callable(tests):
        tests_of = tests
    elif isinstance(tests, Sequence) and all(isinstance(t, str) for t in tests):
        fixed = list(tests)
        tests_of = lambda example: fixed  # noqa: E731
    else:
        raise ConfigError(f"invalid tests={tests!r}: must be strings, a function or None")

    def reward(completion: str, example: Example) -> float:
        cases = tests_of(example)
        if not cases:
            raise ValueError("no tests for this example")
        result = run(extract_code(completion), cases, limits)
        return float(result.passed == result.total) if all_or_nothing else result.fraction

    return Block("code", reward, max_workers=max_workers)
