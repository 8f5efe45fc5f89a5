"""Attacks on the code sandbox (issue 30), in every mode this machine can run: nothing
escapes, nothing hangs, nothing survives, no reward is forged.

Each attack is a function `(ctx) -> list of problems` that runs hostile programs
through the sandbox and checks the host afterwards: no file written outside the
program's scratch, no secret read, no process left, no IPC object left, no socket
reached, and the sandbox still answering a correct program promptly. The modes:

* "root" and "none" run here in the test process (forced with `forced_isolation`)
  when it is root, as CI is;
* "user" (a non-root user with namespaces) runs in one helper process: this file run
  as a script, as uid 65534, inside a root-made bwrap that makes the Python install
  traversable (it may sit under a private /root); "no process left" means no process
  of uid 65534 but the helper. The helper also runs every attack in "none" as that
  user, the weakest mode, which must fail only where its documentation says it does
  (`NONE_AS_USER_WEAKNESSES`). When the tests themselves run as a non-root user,
  "user" and "none" run in-process.

All attacks of the helper run in a single test, so pytest-xdist never starts it twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jaxrl.rewards import sandbox
from jaxrl.rewards.sandbox import Limits, forced_isolation
from jaxrl.rewards.sandbox.core import _UID_BASE, MAX_SLOTS, _run, _slots

REPO = Path(__file__).resolve().parents[2]  # on the helper's PYTHONPATH

NOBODY = 65534
LIMITS = Limits(timeout=3.0, max_processes=8, memory_mb=192, file_size_mb=2.0, disk_mb=8.0)
DOUBLE = "def double(x):\n    return 2 * x\n"
WRONG = "def double(x):\n    return 0\n"
TESTS = ["assert double(2) == 4", "assert double(-3) == -6"]
LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


class Ctx:
    """What an attack needs: the mode, host paths it must not reach, listeners."""

    def __init__(self, mode: str, base: Path) -> None:
        self.mode = mode
        self.iso = forced_isolation(mode)
        self.token = f"jaxrl{os.getpid()}x{int(time.time() * 1000) % 10**8}"
        self.home = base / "home"  # the trainer user's files
        self.home.mkdir(mode=0o755)
        self.secret = self.home / "id_rsa"
        self.secret.write_text(f"SECRET-{self.token}\n")
        self.secret.chmod(0o600)
        self.open_dir = base / "open"  # a world-writable host directory
        self.open_dir.mkdir()
        self.open_dir.chmod(0o1777)
        self.sock_path = str(self.open_dir / "x.sock")
        self.tmpdir = base / "runs"  # where the sandbox makes its run folders
        self.tmpdir.mkdir(mode=0o711)  # as /tmp would be: others may pass, not list
        self.connections: list[str] = []

    def run(self, program: str, tests: list[str] | None = None, limits: Limits = LIMITS):
        return _run(program, TESTS if tests is None else tests, limits, self.iso)

    @contextlib.contextmanager
    def listeners(self):
        """A Unix socket file (mode 0777), an abstract Unix socket and a TCP port on
        127.0.0.1, each recording any connection in `self.connections`."""
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(self.sock_path)
        os.chmod(self.sock_path, 0o777)
        abstract = socket.socket(socket.AF_UNIX)
        abstract.bind("\0" + self.token)
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        servers = {"unix": unix, "abstract": abstract, "tcp": tcp}
        stop = threading.Event()

        def serve(name: str, server: socket.socket) -> None:
            server.listen()
            server.settimeout(0.05)
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                self.connections.append(name)
                conn.close()

        threads = [
            threading.Thread(target=serve, args=item, daemon=True) for item in servers.items()
        ]
        for t in threads:
            t.start()
        try:
            yield tcp.getsockname()[1]
        finally:
            stop.set()
            for t in threads:
                t.join()
            for s in servers.values():
                s.close()

    def leftovers(self) -> list[int]:
        """Live processes the sandbox may have left: of our sandbox uids as root, else
        every process of our uid but this one (the helper is uid 65534's only one)."""
        time.sleep(0.05)
        if os.geteuid() == 0:
            uids = range(
                _UID_BASE + os.getpid() * MAX_SLOTS, _UID_BASE + (os.getpid() + 1) * MAX_SLOTS
            )
            return [p for u in uids for p in sandbox.launch.processes_of(u)]
        return [p for p in sandbox.launch.processes_of(os.getuid()) if p != os.getpid()]

    def healthy(self) -> list[str]:
        """The sandbox still runs a correct program promptly, with every slot free,
        nothing left behind, no run folder left."""
        problems = []
        start = time.monotonic()
        result = self.run(DOUBLE)
        if result.passed != 2 or time.monotonic() - start > 10:
            problems.append(f"a correct program afterwards: {result}")
        if len(_slots._free) != MAX_SLOTS:
            problems.append(f"slots not released: {len(_slots._free)} free")
        if left := self.leftovers():
            problems.append(f"processes left: {left}")
        if runs := list(self.tmpdir.iterdir()):
            problems.append(f"run folders left: {runs}")
        return problems


def sysvipc() -> set[str]:
    """Keys of the host's SysV IPC objects."""
    keys = set()
    for kind in ("shm", "msg", "sem"):
        with contextlib.suppress(OSError):
            lines = Path("/proc/sysvipc", kind).read_text().splitlines()[1:]
            keys |= {f"{kind}:{line.split()[0]}" for line in lines}
    return keys


# ----------------------------------------------------------------------------- attacks
# 1. Filesystem: remount writable, then write the user's files and read their secrets.
def attack_filesystem(ctx: Ctx) -> list[str]:
    target = ctx.home / "written.txt"
    shared = [ctx.open_dir / "escaped.txt", Path(f"/tmp/{ctx.token}.txt")]  # world-writable
    paths = [str(p) for p in (target, ctx.secret, *shared)]
    program = (
        WRONG
        + LIBC
        + (
            "MS_REMOUNT, MS_BIND = 32, 4096\n"
            "print('remount', libc.mount(None, b'/', None, MS_REMOUNT | MS_BIND, None))\n"
            f"for path in {paths!r}:\n"
            "    try:\n"
            "        print('wrote', path, open(path, 'a').write('pwned'))\n"
            "    except OSError as e:\n"
            "        print('no', e)\n"
            "try:\n"
            f"    print(open({str(ctx.secret)!r}).read())\n"
            "except OSError as e:\n"
            "    print('no', e)\n"
        )
    )
    result = ctx.run(program)
    problems = []
    if target.exists() or "pwned" in ctx.secret.read_text():
        problems.append("wrote the user's files")
    if ctx.iso.namespaces and any(p.exists() for p in shared):  # documented for none
        problems.append("wrote to a world-writable host directory")
    for p in shared:
        with contextlib.suppress(OSError):
            p.unlink()
    if f"SECRET-{ctx.token}" in result.output:
        problems.append("read the user's 0600 secret")
    if "remount 0" in result.output:
        problems.append("remounted /")
    return problems


# 1. /proc: unmount it to see the host's processes (namespace modes hide them).
def attack_proc(ctx: Ctx) -> list[str]:
    if not ctx.iso.namespaces:
        return []  # documented: without namespaces /proc is the host's
    marker = subprocess.Popen(["/bin/sh", "-c", "exec sleep 60", f"host-{ctx.token}"])
    try:
        program = (
            WRONG
            + LIBC
            + (
                "print('umount', libc.umount2(b'/proc', 2))\n"
                "for pid in os.listdir('/proc'):\n"
                "    try:\n"
                "        print(open(f'/proc/{pid}/cmdline', 'rb').read())\n"
                "    except OSError:\n"
                "        pass\n"
            )
        )
        result = ctx.run(program)
    finally:
        marker.kill()
        marker.wait()
    problems = []
    if f"host-{ctx.token}" in result.output:
        problems.append("saw a host process")
    if "umount 0" in result.output:
        problems.append("unmounted /proc")
    return problems


# 2. A tree 3000 deep in scratch, in a batch: run folders deleted, slots released.
def attack_deep_tree(ctx: Ctx) -> list[str]:
    program = DOUBLE + "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
    batch = [threading.Thread(target=ctx.run, args=(program,)) for _ in range(3)]
    for t in batch:
        t.start()
    for t in batch:
        t.join(timeout=60)
    return [f"{t.name} hung" for t in batch if t.is_alive()]


# 3. IPC objects: made by one program, looked for by the next and on the host.
def attack_ipc(ctx: Ctx) -> list[str]:
    key = 0x4A000000 + os.getpid() % 0xFFFF
    name = f"/{ctx.token}".encode()
    before = sysvipc()
    make = (
        WRONG
        + LIBC
        + (
            f"key, name = {key}, {name!r}\n"
            "IPC_CREAT = 0o1000\n"
            "shm = libc.shmget(key, 32 << 20, IPC_CREAT | 0o666)\n"
            "msg = libc.msgget(key, IPC_CREAT | 0o666)\n"
            "print('shm', shm, msg, libc.semget(key, 1, IPC_CREAT | 0o666))\n"
            "libc.shmat.restype = ctypes.c_void_p\n"
            "if shm >= 0:\n"
            "    addr = libc.shmat(shm, None, 0)\n"
            "    if addr not in (None, 2**64 - 1):\n"
            "        ctypes.memset(addr, 65, 32 << 20)\n"
            "print('mq', libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o666, None))\n"
        )
    )
    find = (
        WRONG
        + LIBC
        + (
            f"key, name = {key}, {name!r}\n"
            "found = [libc.shmget(key, 0, 0), libc.msgget(key, 0), libc.semget(key, 0, 0), "
            "libc.mq_open(name, os.O_RDWR)]\n"
            "print('FOUND' if any(x >= 0 for x in found) else 'none', found)\n"
        )
    )
    ctx.run(make)
    result = ctx.run(find)
    problems = []
    if "FOUND" in result.output:
        problems.append(f"a later program found IPC objects: {result.output[-200:]}")
    if left := sysvipc() - before:
        problems.append(f"SysV IPC objects left on the host: {left}")
    return problems


# 4. Sockets: a host Unix socket file, an abstract one, a TCP port on loopback.
def attack_sockets(ctx: Ctx) -> list[str]:
    with ctx.listeners() as port:
        program = WRONG + (
            "import socket\n"
            f"for family, address in [(socket.AF_UNIX, {ctx.sock_path!r}), "
            f"(socket.AF_UNIX, '\\0{ctx.token}'), (socket.AF_INET, ('127.0.0.1', {port}))]:\n"
            "    try:\n"
            "        s = socket.socket(family)\n"
            "        s.settimeout(1)\n"
            "        s.connect(address)\n"
            "        print('CONNECTED', address)\n"
            "    except OSError as e:\n"
            "        print('no', e)\n"
        )
        ctx.run(program)
        time.sleep(0.2)
    return [f"reached the host's {name} listener" for name in ctx.connections]


# 5. A setsid grandchild, a process-group escapee and a sleeper: none may survive.
def attack_survivors(ctx: Ctx) -> list[str]:
    program = DOUBLE + (
        "import os, subprocess, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "time.sleep(0.2)\n"
    )
    result = ctx.run(program)
    problems = [] if result.passed == 2 else [f"the program itself failed: {result}"]
    if left := ctx.leftovers():
        problems.append(f"survivors: {left}")
    return problems


# 6. Memory of the whole tree: 4 children each holding 64 MiB (limit 192 MiB).
def attack_memory_tree(ctx: Ctx) -> list[str]:
    program = WRONG + (
        "import os, time\n"
        "r, w = os.pipe()\n"
        "children = []\n"
        "for _ in range(4):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        b = bytearray(64 << 20)\n"
        "        b[::4096] = b'x' * len(b[::4096])\n"
        "        os.write(w, b'1')\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "time.sleep(1.0)\n"
        "os.set_blocking(r, False)\n"
        "ready = len(os.read(r, 100))\n"
        "alive = sum(os.waitpid(pid, os.WNOHANG)[0] == 0 for pid in children)\n"
        "print('HELD', min(ready, alive), 'CHILDREN', len(children))\n"
    )
    result = ctx.run(program)
    if "CHILDREN 4" not in result.output:
        return [f"the attack did not run: {result}"]
    held = int(result.output.split("HELD")[1].split()[0])
    if not sandbox.core._cgroups().version:
        return []  # documented: RLIMIT_AS per process, memory_mb x max_processes in all
    # 3 x 64 MiB and Python's own pass 192 MiB: a cgroup lets at most 2 hold theirs
    return [] if held <= 2 else [f"{held} children held 64 MiB each under a 192 MiB cap"]


# 7. Reward hacks: patched compile, an always-equal object, frames, fake reports.
def attack_reward_hacks(ctx: Ctx) -> list[str]:
    tests = ["assert double(493827) == 987654", "assert double(5) == 10"]
    hacks = {
        "compile": "import builtins\nreal = builtins.compile\n"
        "builtins.compile = lambda *a, **k: real('pass', 'x', 'exec')\n",
        "always equal": "class A:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\ndef double(x):\n    return A()\n",
        "int subclass": "class I(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\ndef double(x):\n    return I(0)\n",
        "frames and gc": "import gc, sys, json, os\nf = sys._getframe()\nwhile f:\n"
        "    print(sorted(f.f_locals)[:50], f.f_globals.get('__name__'))\n"
        "    print(repr(f.f_locals)[:2000])\n    f = f.f_back\n"
        "seen = [o for o in gc.get_objects() if isinstance(o, (str, int, dict))]\n"
        "print([o for o in seen if '98765' in repr(o)][:5])\n"
        "for fd in range(3, 20):\n    for i in range(4):\n        try:\n"
        "            os.write(fd, json.dumps(['done', i]).encode() + b'\\n')\n"
        "            for guess in (987654, 10, 0):\n"
        "                os.write(fd, json.dumps(['v', i, 0, guess]).encode() + b'\\n')\n"
        "        except OSError:\n            pass\n",
        "early exit": "import sys\nsys.exit(0)\n",
        "patched report": "import builtins\n"
        "def double(x):\n    return 0\n"
        "__report__ = lambda k, v: None\n",
    }
    problems = []
    for name, body in hacks.items():
        result = ctx.run(WRONG + body, tests)
        if result.passed:
            problems.append(f"{name}: passed {result.passed}")
        if "987654" in result.output:
            problems.append(f"{name}: found the expected value")
    return problems


# 8. Concurrent programs: one writes a secret to its output and scratch, one looks.
def attack_concurrent(ctx: Ctx) -> list[str]:
    writer = WRONG + (
        f"print('OUT-{ctx.token}', flush=True)\n"
        f"open('secret.txt', 'w').write('FILE-{ctx.token}')\n"
        "import time\ntime.sleep(1.5)\n"
    )
    reader = WRONG + (
        "import glob, os, time\ntime.sleep(0.5)\n"
        "for pattern in ['/tmp/*', '/tmp/*/*', '/tmp/*/*/*', '/proc/*/cwd/*', '/proc/*/fd/*']:\n"
        "    for path in glob.glob(pattern):\n"
        "        try:\n"
        "            print(path, open(path).read(200))\n"
        "        except (OSError, UnicodeDecodeError):\n"
        "            pass\n"
    )
    results = {}
    threads = [
        threading.Thread(target=lambda k=k, p=p: results.__setitem__(k, ctx.run(p)))
        for k, p in (("writer", writer), ("reader", reader))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = results["reader"].output
    return [f"read the other's {w}" for w in ("OUT", "FILE") if f"{w}-{ctx.token}" in out]


# 9. Output flood, a hang after passing, disk filling, nested user namespaces, ptrace.
def attack_smaller(ctx: Ctx) -> list[str]:
    problems = []
    flood = ctx.run(
        DOUBLE + "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)\n"
    )
    if flood.status != "killed" or len(flood.output) > LIMITS.output_bytes:
        problems.append(f"flood: {flood.status}, {len(flood.output)} bytes kept")
    hang = ctx.run(DOUBLE + "import os, time\nos._exit = lambda code: time.sleep(60)\n")
    if hang.status != "timeout" or hang.passed:
        problems.append(f"hang after passing: {hang.status}, passed {hang.passed}")
    fill = ctx.run(
        WRONG + "total = 0\nfor i in range(24):\n    try:\n"
        "        open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n        total += 1\n"
        "    except OSError:\n        break\nprint('MB', total)\n"
    )
    written = int(fill.output.split("MB")[1].split()[0]) if "MB " in fill.output else -1
    if ctx.iso.namespaces and not 0 <= written <= LIMITS.disk_mb:
        problems.append(f"disk: wrote {written} MiB in a {LIMITS.disk_mb} MiB scratch")
    nested = ctx.run(
        WRONG + LIBC + "print('unshare', libc.unshare(0x10000000))\n"
        "print('ptrace', libc.ptrace(16, os.getppid(), 0, 0))\n"
        "import subprocess\n"
        "print('cmd', subprocess.run(['unshare', '-U', '-r', 'true']).returncode)\n"
    )
    bomb = ctx.run(
        WRONG + "import os, time\nn = 0\nwhile n < 100:\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n"
        "        os._exit(0)\n    n += 1\nprint('FORKED', n)\n"
    )
    forked = int(bomb.output.split("FORKED")[1].split()[0]) if "FORKED" in bomb.output else -1
    if not 0 <= forked < LIMITS.max_processes:
        problems.append(f"fork bomb: {forked} children under max_processes={LIMITS.max_processes}")
    for claim in ("unshare 0", "ptrace 0", "cmd 0"):
        if claim in nested.output:
            problems.append(f"{claim.split()[0]} succeeded")
    return problems


ATTACKS: dict[str, Callable[[Ctx], list[str]]] = {
    "1 filesystem": attack_filesystem,
    "1 proc": attack_proc,
    "2 deep tree": attack_deep_tree,
    "3 ipc": attack_ipc,
    "4 sockets": attack_sockets,
    "5 survivors": attack_survivors,
    "6 memory tree": attack_memory_tree,
    "7 reward hacks": attack_reward_hacks,
    "8 concurrent": attack_concurrent,
    "9 smaller": attack_smaller,
}


def run_attack(mode: str, name: str) -> list[str]:
    """One attack in `mode` plus the health check after it."""
    with tempfile.TemporaryDirectory(prefix="jaxrl-attack-") as base:
        os.chmod(base, 0o755)
        ctx = Ctx(mode, Path(base))
        old, tempfile.tempdir = tempfile.tempdir, str(ctx.tmpdir)  # the run folders' home
        try:
            return ATTACKS[name](ctx) + ctx.healthy()
        finally:
            tempfile.tempdir = old
            if os.geteuid() != 0 and mode == "none":  # what it let survive, for the next
                sandbox.launch.kill_until_gone(ctx.leftovers, "the attack's survivors")
                _wait_reaped()  # its RLIMIT_NPROC counts every process of ours


def _wait_reaped(seconds: float = 5.0) -> None:
    """Waits until no zombie of our uid is left to count against RLIMIT_NPROC."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        zombies = []
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                status = Path(entry.path, "status").read_text() if entry.name.isdigit() else ""
                if "\nState:\tZ" in status and f"\nUid:\t{os.getuid()}\t" in status:
                    zombies.append(entry.name)
        if not zombies:
            return
        time.sleep(0.05)


# What the weakest mode (no namespaces, not root) documents it does not stop: the
# program has the user's permissions (their files, the other programs' scratch and
# output), and a process that leaves the process group outlives the program.
NONE_AS_USER_WEAKNESSES = {
    "1 filesystem": {"wrote the user's files", "read the user's 0600 secret"},
    "5 survivors": {"survivors", "processes left"},
    "8 concurrent": {"read the other's OUT", "read the other's FILE"},
}


# ----------------------------------------------------------------------------- modes
def _in_process_modes() -> list[str]:
    if sys.platform != "linux":
        return []
    if os.geteuid() == 0:
        modes = ["none"]
        with contextlib.suppress(ValueError):
            forced_isolation("root")
            modes.insert(0, "root")
        return modes
    modes = ["none"]
    with contextlib.suppress(ValueError):
        forced_isolation("user")
        modes.insert(0, "user")
    return modes


@pytest.mark.parametrize("name", list(ATTACKS))
@pytest.mark.parametrize("mode", _in_process_modes())
def test_attack(mode, name):
    problems = run_attack(mode, name)
    assert unexpected(mode, name, problems, os.geteuid() == 0) == set(), problems


def unexpected(mode: str, name: str, problems: list[str], root: bool) -> set[str]:
    """The problems an attack found beyond what its mode documents (the weakest mode,
    as a non-root user, documents some; every other mode none)."""
    kinds = {p.split(":")[0] for p in problems}
    if mode == "none" and not root:
        return kinds - NONE_AS_USER_WEAKNESSES.get(name, set())
    return kinds


def _userns_disabled() -> bool:
    """Whether the kernel is set to refuse unprivileged user namespaces."""
    for knob in (
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/user/max_user_namespaces",
    ):
        with contextlib.suppress(OSError, ValueError):
            if int(Path(knob).read_text()) == 0:
                return True
    return False


@pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or sandbox.launch.bwrap_path() is None,
    reason="needs root (to become uid 65534) and bwrap",
)
@pytest.mark.skipif(_userns_disabled(), reason="this kernel refuses unprivileged user namespaces")
def test_attacks_as_an_unprivileged_user():
    base = Path(tempfile.mkdtemp(prefix="jaxrl-nobody-"))
    try:
        os.chown(base, NOBODY, NOBODY)
        os.chmod(base, 0o700)
        argv = [sys.executable, __file__, "--helper"]
        command = sandbox.launch.unprivileged_command(argv, NOBODY, str(base), [str(REPO)])
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    finally:
        sandbox.launch.remove_tree(str(base))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["uid"] == NOBODY, report
    user, none = report["user"], report["none"]
    assert sorted(user) == sorted(none) == sorted(ATTACKS), report
    assert {k: v for k, v in user.items() if v} == {}
    # The weakest mode fails only where its documentation says it does.
    assert {k: v for k, v in none.items() if unexpected("none", k, v, root=False)} == {}, none


def _helper() -> None:
    """As the unprivileged helper: every attack in the "user" and "none" modes, then
    one JSON line."""
    report = {"uid": os.getuid()}
    if len(sys.argv) > 2:  # one attack in one mode, its problems printed (to debug)
        print(run_attack(sys.argv[2], sys.argv[3]))
        return
    for mode in ("user", "none"):
        report[mode] = {}
        for name in ATTACKS:
            try:
                report[mode][name] = run_attack(mode, name)
            except Exception as err:  # a crash is a problem to report, not a lost report
                report[mode][name] = [f"raised {err!r}"]
    print(json.dumps(report))


if __name__ == "__main__" and sys.argv[1:2] == ["--helper"]:
    _helper()
