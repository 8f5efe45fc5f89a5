"""Does a run fit in memory? Asked twice before anything large is allocated or run.

1. Before the initial state is built: its size from abstract shapes (`jax.eval_shape`
   of `init`: parameters, optimiser state, environment states, replay buffers).
2. After a step's program is compiled and before it first runs: what XLA's buffer
   assignment says the program needs beyond its (donated) inputs, its temporaries and
   new outputs (`compiled.memory_analysis()`, as `jaxrl plan` reads it).

A run that does not fit then stops with the estimate in one line, in seconds, instead
of swapping for minutes or being killed by the kernel (PPO on CartPole with
`--num-envs 1000000 --num-steps 16` holds a 46 MB state but its update needs 16.6 GiB
of temporaries: the whole rollout and its minibatches). `RunConfig.check_memory=False`
(`--no-memory-check`) skips both checks, for a machine whose swap or overcommit the
user trusts.

What counts as available: on CPU, the host's `MemAvailable` (all CPU devices share it;
/proc/meminfo, or `sysconf` elsewhere); on an accelerator, the first device's
`bytes_limit - bytes_in_use` against the per-device share (XLA's analysis of an SPMD
program is per device; the state is divided by the device count). When the backend
reports nothing, nothing is checked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from jaxrl import config as cfg

HEADROOM = 0.9
"""The fraction of the available memory a run may plan to use: the rest is for what no
estimate sees (the Python process, host copies of metrics, the allocator's slack)."""


def tree_bytes(tree: Any) -> int:
    """Bytes of the arrays (or `ShapeDtypeStruct`s) of a pytree."""
    return sum(
        int(leaf.size) * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(tree)
        if hasattr(leaf, "dtype") and hasattr(leaf, "size")
    )


def host_available_bytes() -> int | None:
    """The host memory a new allocation can use without swapping (`MemAvailable`)."""
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:  # Linux
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:  # elsewhere: the free pages
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(devices: Sequence[Any]) -> int | None:
    """Memory left for one device's share of the run (CPU: the host's, for all of them)."""
    device = devices[0]
    if device.platform == "cpu":
        return host_available_bytes()
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    return None if limit is None else int(limit) - int(stats.get("bytes_in_use", 0))


def _gib(n: float) -> str:
    """A size as people read it: 66.24 GiB, 150 MiB, 12 KiB."""
    if n >= 2**28:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def check_fits(what: str, per_device: Mapping[str, float], devices: Sequence[Any]) -> None:
    """Raises `ConfigError` when `per_device` (bytes each device needs, by what they
    hold) exceeds `HEADROOM` of the memory `available_bytes` reports. CPU devices share
    the host's memory, so there their needs add up."""
    available = available_bytes(devices)
    if available is None:
        return
    on_host = devices[0].platform == "cpu"
    scale = len(devices) if on_host else 1
    needed = scale * sum(per_device.values())
    if needed <= HEADROOM * available:
        return
    where = "the host" if on_host else f"each {devices[0].platform} device"
    detail = ", ".join(f"{name} {_gib(scale * size)}" for name, size in per_device.items() if size)
    raise cfg.ConfigError(
        f"invalid run: {what} needs about {_gib(needed)} ({detail}) but {where} has "
        f"{_gib(available)} available; make it smaller (fewer agents, environments or "
        "steps per update, a smaller buffer or model), or pass --no-memory-check "
        "(check_memory=False) to run it anyway"
    )


def check_state(abstract_state: Any, devices: Sequence[Any]) -> None:
    """Check 1: the initial state, from its abstract shapes (nothing allocated yet),
    spread over the devices."""
    per_device = tree_bytes(abstract_state) / len(devices)
    check_fits("the training state", {"state": per_device}, devices)


def check_program(compiled: Any, name: str, devices: Sequence[Any]) -> None:
    """Check 2: what a compiled program needs beyond its inputs, before it first runs
    (its inputs, the state above all, are allocated already and so are no longer in
    the available memory). XLA's analysis is per device."""
    try:
        analysis = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError, AttributeError):  # a backend without it
        return
    if analysis is None:
        return
    outputs = max(0, analysis.output_size_in_bytes - analysis.alias_size_in_bytes)
    per_device = {"temporaries": analysis.temp_size_in_bytes, "new outputs": outputs}
    check_fits(f"the compiled {name} program", per_device, devices)
