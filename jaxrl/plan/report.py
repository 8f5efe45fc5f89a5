"""What a plan found and how it is printed: `StepPlan` (one compiled step's memory and
cost per device), `Plan` (every step, the fit, the suggestions) and `format_plan`, the
table `jaxrl plan` prints.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .topology import TIGHT, GiB, Target


@dataclasses.dataclass
class StepPlan:
    """One compiled step's per-device memory and cost."""

    name: str
    description: str
    memory: dict[str, int]  # label -> bytes per device, in table order (without "total")
    total: int  # per-device peak (XLA's `peak_memory_in_bytes`)
    memory_analysis: dict[str, int]  # XLA's raw fields
    flops: float  # per device and update, loop bodies weighted by trip counts
    bytes_accessed: float  # per device and update, same weighting
    xla_flops: float  # XLA's cost analysis as reported (loop bodies once)
    loops_exact: bool  # False: a loop's trip count was unknown (counted once)
    compile_seconds: float
    note: str = ""  # how the numbers were obtained, when not by one full compile
    out_of_memory: bool = False  # XLA refused to compile: temporaries exceed the HBM

    def fits(self, budget: int | None) -> bool:
        if self.out_of_memory:
            return False
        return budget is None or self.total <= budget


@dataclasses.dataclass
class Plan:
    """What `jaxrl.plan` returns: the compiled steps and, if one does not fit, the
    checked changes that would make it fit."""

    algorithm: str
    target: Target
    mesh: dict[str, int]
    num_agents: int
    steps: list[StepPlan]
    model: str | None  # a one-line description of the LM (None for control)
    overrides: dict[str, Any]  # the hyperparameters given (for the suggestions' flags)
    suggestions: list[Suggestion] = dataclasses.field(default_factory=list)
    tried: list[str] = dataclasses.field(default_factory=list)
    sampler_mesh: dict[str, int] | None = None
    """Asynchronous mode: the sampler's mesh (`mesh` is then the learner's), on
    devices disjoint from it."""
    weight_update_bytes: int | None = None
    """Asynchronous mode: the bytes each sampler device receives per update (its copy of
    the trained parameters; frozen ones are copied once)."""

    @property
    def fits(self) -> bool:
        return all(step.fits(self.target.memory_bytes) for step in self.steps)

    def step(self, name: str) -> StepPlan:
        return next(s for s in self.steps if s.name == name)

    def report(self) -> str:
        """The printed table (see `format_plan`)."""
        return format_plan(self)


@dataclasses.dataclass
class Suggestion:
    """A change (as command-line flags) that was compiled and fits."""

    flags: str
    why: str
    totals: dict[str, int]  # step -> per-device total with the change


# ---------------------------------------------------------------------------- the table
def _gib(n: float) -> str:
    if n >= GiB / 10:
        return f"{n / GiB:.2f} GiB"
    if n >= 2**20 / 10:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB"


def format_plan(p: Plan) -> str:
    """The plan as text: one table per step, the fit verdict, the roofline's assumptions
    and, when a step does not fit, the checked changes that would make it fit."""
    t, chip, budget = p.target, p.target.chip, p.target.memory_bytes
    lines = []
    if chip is not None:
        head = (
            f"{t.num_devices} x {chip.device_kind}: {_gib(chip.hbm_bytes)} HBM, "
            f"{chip.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16, "
            f"{chip.hbm_bandwidth / 1e9:.0f} GB/s per chip"
        )
    else:
        head = f"{t.num_devices} emulated CPU devices"
    if budget is not None and (chip is None or budget != chip.hbm_bytes):
        head += f"; budget {_gib(budget)} per device"
    lines.append(f"jaxrl plan: {p.algorithm} on {t.name} ({head})")
    mesh = " x ".join(f"{k}={v}" for k, v in p.mesh.items())
    if p.sampler_mesh is None:
        lines.append(f"mesh: {mesh}; agents: {p.num_agents}")
    else:
        lines.extend(_async_lines(p, mesh))
    if p.model:
        lines.append(f"model: {p.model}")
    for s in p.steps:
        lines.append("")
        lines.append(f"step {s.name}: {s.description} (compiled in {s.compile_seconds:.1f} s)")
        if s.note:
            lines.append(f"  ({s.note})")
        lines.append(f"  {'per device':44s} {'bytes':>11s}")
        for label, value in s.memory.items():
            lines.append(f"  {label:44s} {_gib(value):>11s}")
        share = f"{s.total / budget:7.1%} of {_gib(budget)}" if budget else ""
        verdict = ""
        if budget:
            verdict = (
                "  fits"
                if s.total <= TIGHT * budget
                else ("  fits, tightly" if s.total <= budget else "  DOES NOT FIT")
            )
        lines.append(f"  {'total (peak)':44s} {_gib(s.total):>11s}  {share}{verdict}")
        mark = "" if s.loops_exact else " (a loop of unknown length counted once: a lower bound)"
        lines.append(f"  {'FLOPs':44s} {s.flops:11.3e}{mark}")
        lines.append(f"  {'HBM traffic':44s} {_gib(s.bytes_accessed):>11s}")
        if chip is not None:
            compute = s.flops / chip.peak_bf16_flops
            memory = s.bytes_accessed / chip.hbm_bandwidth
            bound = "compute" if compute >= memory else "memory"
            lines.append(
                f"  {'roofline step time':44s} {_seconds(max(compute, memory)):>11s}  "
                f"({bound}-bound: {_seconds(compute)} of FLOPs, {_seconds(memory)} of HBM traffic)"
            )
    lines.append("")
    lines.append(
        "per device: XLA's memory analysis of each compiled step (its peak; arguments by "
        "role from their shardings). FLOPs and HBM traffic: XLA's cost analysis, loop "
        "bodies weighted by their trip counts, per update for a chunk of fused updates "
        "(sampling: every completion runs to max_new_tokens)."
    )
    if chip is not None:
        lines.append(
            f"roofline: max(FLOPs / {chip.peak_bf16_flops / 1e12:.0f} TFLOP/s, traffic / "
            f"{chip.hbm_bandwidth / 1e9:.0f} GB/s), the chip's published bf16 peak and HBM "
            "bandwidth; assumes compute and memory traffic overlap perfectly, ignores "
            "inter-chip communication and host phases; float32 matmuls run below the bf16 peak."
        )
    lines.append("")
    lines.extend(_verdict(p))
    return "\n".join(lines)


def _async_lines(p: Plan, learner_mesh: str) -> list[str]:
    """The two sub-meshes of an asynchronous run and what moves between them."""
    sampler = p.sampler_mesh or {}
    devices = 1
    for size in sampler.values():
        devices *= size
    mesh = " x ".join(f"{k}={v}" for k, v in sampler.items())
    moved = p.weight_update_bytes or 0
    return [
        f"sampler mesh: {mesh} (the first {devices} devices; step async_collect); "
        f"learner mesh: {learner_mesh} (the rest; step async_learn); agents: {p.num_agents}",
        f"weight update (learner -> sampler, every update): {_gib(moved)} per sampler "
        f"device, {_gib(moved * devices)} in all",
    ]


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def _verdict(p: Plan) -> list[str]:
    budget = p.target.memory_bytes
    if budget is None:
        return ["fit: not judged (no per-device memory for cpu:N; give --device-memory)"]
    failing = [s for s in p.steps if not s.fits(budget)]
    if not failing:
        return [f"fits: every step within {_gib(budget)} per device"]
    worst = max(failing, key=lambda s: s.total)
    lines = [
        f"does not fit: step {worst.name} needs {_gib(worst.total)} per device, "
        f"{worst.total / budget:.0%} of the {_gib(budget)} of each device"
        + (f" ({len(failing)} steps do not fit)" if len(failing) > 1 else "")
    ]
    if p.suggestions:
        lines.append(f"changes that fit (each compiled for {p.target.name}):")
        for s in p.suggestions:
            totals = ", ".join(f"{k} {_gib(v)}" for k, v in s.totals.items())
            lines.append(f"  {s.flags:28s} {s.why}: {totals}")
    elif p.tried:
        lines.append(
            f"no change tried fits ({'; '.join(p.tried)}): try a larger slice or a smaller batch"
        )
    return lines
