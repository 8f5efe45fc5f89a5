"""What `jaxrl plan` says about GRPO on TPU slices, and what planning costs this CPU.

Each case is one `jaxrl.plan.plan(...)` call, run in a fresh process (so its peak RSS
and CPU seconds are its own): the per-device memory of every compiled step by role,
XLA's peak, FLOPs and HBM traffic per update, the roofline step time and whether it
fits, plus the planner's wall time, CPU seconds and peak RSS. docs/plan.md's worked
examples are generated from the results file (`python -m benchmarks.reproduce --only
plan_tpu`), so the numbers there are the code's of the day.

The memory and cost rows are the compiler's, the same on any machine with the same
libtpu; the wall time depends on the load (CPU seconds much less). TPU cases need
libtpu, which every JAX start on a machine without a TPU then greets with warnings, so
it lives in its own venv rather than the project's:

    python -m venv --system-site-packages /tmp/tpuvenv
    /tmp/tpuvenv/bin/pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"
    /tmp/tpuvenv/bin/python -m benchmarks.reproduce --only plan_tpu
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = ROOT / "examples" / "models"

_GRPO6_MODEL = dict(digits=2, num_layers=6, num_heads=4, num_kv_heads=2, kl_coef=0.1, mesh="fsdp=4")
_GRPO6 = {
    "v5e_2x2": dict(
        _GRPO6_MODEL,
        topology="v5e:2x2",
        hidden_size=128,
        mlp_size=512,
        total_steps=4096,
        num_prompts=32,
        group_size=8,
        max_new_tokens=64,
        context_len=128,
        dtype="bfloat16",
        micro_batches=2,
    ),
    "cpu8": dict(
        _GRPO6_MODEL,
        topology="cpu:8",
        hidden_size=64,
        mlp_size=256,
        num_prompts=8,
        group_size=4,
        total_steps=64,
    ),
}

# The Llama-3-8B-shaped GRPO step of docs/plan.md, planned on 8 and on 16 chips.
_LLAMA3_8B = dict(
    model_config=str(MODELS / "llama-3-8b.json"),
    dtype="bfloat16",
    num_prompts=16,
    group_size=4,
    max_new_tokens=64,
    micro_batches=4,
)

# name -> (topology, plan keyword arguments). The Llama-3-8B pair shows where it stops
# fitting (fsdp over 8 chips) and where it fits (16); the Qwen3-0.6B case shows a large
# batch whose activations, not its parameters, overflow a small slice.
CASES: dict[str, dict[str, Any]] = {
    "llama3_8b_v5e_2x4": dict(_LLAMA3_8B, topology="v5e:2x4", mesh="fsdp=8"),
    "llama3_8b_v5e_4x4": dict(_LLAMA3_8B, topology="v5e:4x4", mesh="fsdp=16"),
    # How good the shallow probes are (docs/plan.md, "Deep models are probed"): a 6-layer
    # GRPO step compiled at 1 and 2 layers and extrapolated, against the whole model.
    **{
        f"grpo6_{where}_{how}": dict(
            _GRPO6[where],
            full_depth=how == "full",
        )
        for where in ("v5e_2x2", "cpu8")
        for how in ("probed", "full")
    },
    "qwen3_06b_v5e_2x2": dict(
        topology="v5e:2x2",
        mesh="fsdp=4",
        model_config=str(MODELS / "qwen3-0.6b.json"),
        dtype="bfloat16",
        num_prompts=64,
        group_size=8,
        max_new_tokens=512,
        kl_coef=0.05,
        micro_batches=8,
    ),
}


def _worker(name: str) -> dict[str, Any]:
    """Plans one case in this process; returns the plan as plain data."""
    from jaxrl import plan as plan_lib

    kwargs = dict(CASES[name])
    topology = kwargs.pop("topology")
    plan_lib.prepare_process(topology)
    start = time.perf_counter()
    p = plan_lib.plan("grpo", topology=topology, suggest=False, **kwargs)
    chip = p.target.chip

    def roofline(step: Any) -> tuple[float | None, str | None]:
        if chip is None:  # cpu:N has no published peak
            return None, None
        compute = step.flops / chip.peak_bf16_flops
        memory = step.bytes_accessed / chip.hbm_bandwidth
        return max(compute, memory), "compute" if compute >= memory else "memory"

    return {
        "seconds": time.perf_counter() - start,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "fits": p.fits,
        "hbm_bytes": p.target.memory_bytes,
        "chip": None
        if chip is None
        else {
            "name": chip.name,
            "peak_bf16_flops": chip.peak_bf16_flops,
            "hbm_bandwidth": chip.hbm_bandwidth,
        },
        "model": p.model,
        "steps": [
            {
                "name": s.name,
                "memory": s.memory,
                "total": s.total,
                "flops": s.flops,
                "bytes_accessed": s.bytes_accessed,
                "roofline_seconds": roofline(s)[0],
                "bound": roofline(s)[1],
                "memory_analysis": s.memory_analysis,
                "out_of_memory": s.out_of_memory,
                "note": s.note,
            }
            for s in p.steps
        ],
        "report": p.report(),
    }


def measure(name: str, timeout: float) -> dict[str, Any]:
    """Runs one case in a child process; adds its wall and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PLAN ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"plan case {name} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1][len("PLAN ") :])
    result["wall_seconds"] = round(wall, 1)
    result["cpu_seconds"] = round(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1
    )
    result["load_average_at_start"] = round(load, 2)
    result["arguments"] = CASES[name]
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    parser.add_argument("--out", type=Path, help="where to write the JSON")
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print("PLAN " + json.dumps(_worker(args.worker)), flush=True)
        return
    try:
        import libtpu  # noqa: F401
    except ImportError:
        sys.exit(
            "plan_tpu needs libtpu, best in a venv of its own (this module's docstring): "
            "python -m venv --system-site-packages /tmp/tpuvenv && "
            '/tmp/tpuvenv/bin/pip install "jax[tpu]==<your jax version>"'
        )
    if args.out is None:
        sys.exit("pass --out FILE, or run python -m benchmarks.reproduce --only plan_tpu")
    cases = {}
    for name in args.cases:
        print(f"[plan_tpu] {name} ...", file=sys.stderr, flush=True)
        cases[name] = measure(name, args.timeout)
        print(
            f"[plan_tpu] {name}: fits={cases[name]['fits']}, "
            f"{cases[name]['wall_seconds']} s wall, {cases[name]['cpu_seconds']} CPU s",
            file=sys.stderr,
            flush=True,
        )
    args.out.write_text(json.dumps({"benchmark": "plan_tpu", "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
