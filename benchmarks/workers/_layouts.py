"""Labels of the GRPO benchmark's layouts, shared by its jaxrl and TRL workers (stdlib
only: the TRL worker runs in another virtualenv)."""

from __future__ import annotations


def layout_label(library: str, processes: int = 1, devices: int = 1, micro_batches: int = 1) -> str:
    """`library`, then `-p{P}` for P processes, `-d{D}` for D devices in a process and
    `-mb{M}` for M accumulated micro-batches: `jaxrl`, `jaxrl-d2`, `jaxrl-p2`,
    `trl-p2-mb2`."""
    parts = [library]
    for prefix, count in (("p", processes), ("d", devices), ("mb", micro_batches)):
        if count > 1:
            parts.append(f"{prefix}{count}")
    return "-".join(parts)
