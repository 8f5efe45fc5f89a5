"""Runs model-written Python against tests in a sandbox (`run`, `code_reward`).

Model-written code runs here thousands of times per training run, on the machine that
holds the trainer, its checkpoints and its user's files. The threat model: the program
is hostile, by accident or because reward hacking pays. It may loop, fork, allocate,
print or write without end; read or write anything its uid can reach; look for the
tests or the expected answers; patch Python itself (builtins, `compile`, `exec`, frames,
`gc`) to fake passing; leave processes, files or IPC objects behind for a later program;
talk to other programs or to the host over sockets. Its reward must count only tests
its code really passes, and the trainer must never hang, crash or leak.

**Results that cannot be forged** (`checks.py`, `runner.py`): the trainer turns each
`assert <expr> <op> <literal>` into a probe that reports `<expr>`'s value; the literal
never enters the program's process. The runner compiles the program and every probe
before the program runs, reports values as tagged JSON of plain built-in types (an
object with a rigged `__eq__` is "unsupported"), and the trainer compares them with
fresh built-in objects. Tests count only when the program ends normally: a timeout or
a kill scores 0. Tests that are not such asserts are only as strong as the program's
process (see `checks.py`).

**Modes** (`isolation()` probes once; `forced_isolation` for tests). Every mode has: a
wall-clock `timeout` (then SIGKILL to the whole tree); RLIMIT_CPU, RLIMIT_AS,
RLIMIT_FSIZE (SIGXFSZ restored: an output flood ends "killed"), RLIMIT_NOFILE,
RLIMIT_CORE=0 and RLIMIT_NPROC per process; output to a file of which the trainer reads
`output_bytes`; a minimal environment; isolated Python (`-I -S`, site-packages on the
path); a seccomp filter (`seccomp.py`: no mount, unshare, setns, namespace clones,
ptrace, bpf, keyctl, perf_event_open, userfaultfd, io_uring, module loading, ... and no
Unix sockets); no-new-privileges; clean-up that cannot raise or hang, and the slot
always released.

* **root** (the trainer is root, bwrap works): bwrap builds a new root holding only the
  system's directories and Python's, read-only; new /proc and /dev; a private /tmp and
  /dev/shm, tmpfs capped at `disk_mb` each (the program's cwd and HOME); new IPC, PID,
  network (loopback only), UTS and cgroup namespaces. The runner drops to the program's
  own uid (`uid_base + slot`), which clears every capability, so RLIMIT_NPROC caps its
  process tree. Where cgroups are writable (v2, or v1's memory and pids), a per-slot
  cgroup caps the whole tree's memory (its tmpfs files included) at `memory_mb` and
  lists what is left to kill. When the program
  ends, the PID namespace's end kills every process it made.
* **user** (a non-root user, bwrap in a user namespace): the same filesystem and
  namespaces; the program runs as the user's uid mapped into a user namespace with no
  capabilities, which may not create another (`--disable-userns`, and seccomp). The
  user's home and files are not mounted; the trainer is not in the PID namespace.
  Memory: RLIMIT_AS per process, so a program's tree holds at most `memory_mb` x
  `max_processes`, plus its two tmpfs (unless a delegated cgroup v2 is writable).
* **none** (no usable bwrap or user namespaces): the weakest, warned at start. The
  seccomp filter also forbids every `socket` (so no network) and SysV/POSIX IPC
  objects. As root, the program runs as its own uid: it cannot write files that are not
  world-writable, and its leftovers are killed by uid and checked gone; world-writable
  places (/tmp, /dev/shm) are writable and the filesystem readable as far as others
  may read it. As a non-root user, the program may read and write whatever the user
  may, and a process that leaves the process group may outlive it until its CPU limit.
  Disk use is capped per file only.

Layout: `limits.py` (`Limits`, `Result`), `checks.py` (probes and judging), `runner.py`
(the program's side), `seccomp.py` (the filter), `launch.py` (bwrap, cgroups,
leftovers), `core.py` (`run`, `run_batch`, `isolation`), `reward.py` (`code_reward`).
docs/lm.md (the code sandbox) has the same in prose, with the attack tests that hold
each mode to it (tests/rewards/test_sandbox_attacks.py).
"""

from .core import (
    _UID_BASE,  # noqa: F401  (the uids of programs, for tests that look for leftovers)
    MAX_SLOTS,
    MODES,
    Isolation,
    forced_isolation,
    isolation,
    run,
    run_batch,
)
from .launch import interpreter
from .limits import Limits, Result
from .reward import answer_tests, code_reward, extract_code

__all__ = [
    "MAX_SLOTS",
    "MODES",
    "Isolation",
    "Limits",
    "Result",
    "answer_tests",
    "code_reward",
    "extract_code",
    "forced_isolation",
    "interpreter",
    "isolation",
    "run",
    "run_batch",
]
