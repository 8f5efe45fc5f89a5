"""The seccomp filter: system calls code under test never needs fail with EPERM.

Built once per process with `pyseccomp` (ctypes over the system's libseccomp.so.2) and
exported as a BPF program, which bwrap loads (`--seccomp FD`) or, without namespaces,
the runner loads itself (`runner.py`). A deny list, as Docker's and Flatpak's default
profiles are, so ordinary Python keeps working:

* namespaces and mounts: `unshare`, `setns`, `clone`/`clone3` with any namespace flag
  (`clone3` answers ENOSYS so libc falls back to `clone`, whose flags a filter can
  read), `mount`, `umount2`, `pivot_root`, `chroot`, the new mount API (`fsopen`,
  `fsmount`, `move_mount`, `open_tree`, ...);
* other processes' memory and the kernel: `ptrace`, `process_vm_readv/writev`,
  `pidfd_getfd`, `kcmp`, `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`,
  `keyctl`, `add_key`, `request_key`, module and kexec loading, `reboot`, `swapon`,
  clock setting, `syslog`, `acct`, `quotactl`, `iopl`, `ioperm`, `open_by_handle_at`,
  the terminal injection ioctls (`TIOCSTI`, `TIOCLINUX`);
* Unix sockets: `socket(AF_UNIX, ...)` (a socket file of the host is a way out that
  neither read-only mounts nor a network namespace close); `socketpair` stays allowed;
* without namespaces (`strict`), every `socket` (no network at all) and SysV and POSIX
  IPC objects (`shmget`, `msgget`, `semget`, `mq_open`: without an IPC namespace they
  would outlive the program).

Other architectures' system calls (i386 through `int 0x80`, x32) kill the process
(libseccomp's default for a foreign architecture).
"""

from __future__ import annotations

import errno
import functools
import logging
import tempfile

logger = logging.getLogger(__name__)

DENIED = [
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "vhangup",
    "uselib",
    "nfsservctl",
]
DENIED_STRICT = ["socket", "shmget", "msgget", "semget", "mq_open"]
_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
_AF_UNIX = 1
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C


@functools.cache
def bpf(strict: bool) -> bytes | None:
    """The filter as a BPF program, or None if libseccomp is unavailable (logged)."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as err:  # RuntimeError: no libseccomp
        logger.warning("sandbox without a seccomp filter: %s", err)
        return None
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    arch = sc.system_arch()

    def rule(action: int, name: str, *args: object) -> None:
        try:
            sc.resolve_syscall(arch, name)
        except (ValueError, OSError):
            return  # not a system call on this architecture (e.g. iopl on aarch64)
        flt.add_rule(action, name, *args)

    for name in DENIED + (DENIED_STRICT if strict else []):
        rule(deny, name)
    rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in _NAMESPACE_FLAGS:
        rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for request in (_TIOCSTI, _TIOCLINUX):
        rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    if not strict:
        rule(deny, "socket", sc.Arg(0, sc.EQ, _AF_UNIX, 0))
    with tempfile.TemporaryFile() as f:
        flt.export_bpf(f)
        f.seek(0)
        return f.read()
