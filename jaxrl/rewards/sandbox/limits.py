"""`Limits` (what one program may use) and `Result` (what it did)."""

from __future__ import annotations

import dataclasses

from jaxrl.errors import check


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-program limits (the package docstring says which mode enforces each how)."""

    timeout: float = 5.0
    """Wall-clock seconds before the whole process tree is killed (and scores 0)."""
    cpu_seconds: int = 5
    """RLIMIT_CPU: CPU seconds per process."""
    memory_mb: int = 512
    """Memory of the whole program in MiB: a memory cgroup caps its process tree (and
    its files in /tmp) where one is available; RLIMIT_AS caps each process always."""
    max_processes: int = 32
    """RLIMIT_NPROC: processes of the program's user (its own uid as root; in a user
    namespace they are counted per namespace; without either, all of the user's)."""
    file_size_mb: float = 8.0
    """RLIMIT_FSIZE: largest file a program may write, its output included, in MiB."""
    disk_mb: float = 64.0
    """Size of the program's private /tmp (its cwd and HOME) and of its /dev/shm."""
    output_bytes: int = 65536
    """Bytes of stdout and stderr kept in `Result.output`."""
    open_files: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""

    def validate(self) -> Limits:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        for name in (
            "timeout",
            "cpu_seconds",
            "memory_mb",
            "max_processes",
            "file_size_mb",
            "disk_mb",
        ):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and value > 0, name, value, "> 0")
        check(self.output_bytes >= 0, "output_bytes", self.output_bytes, ">= 0")
        check(self.open_files >= 16, "open_files", self.open_files, ">= 16 (Python needs some)")
        return self


@dataclasses.dataclass(frozen=True)
class Result:
    """What one program did: tests passed, how it ended, the start of its output."""

    passed: int
    """Tests passed; 0 unless the program ended "ok" (a timeout or a kill scores 0)."""
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
