"""`jaxrl plan`: compile an algorithm's steps for a TPU slice on a laptop, and say whether
they fit before anyone rents the slice.

    jaxrl plan grpo --model-config examples/models/llama-3-8b.json --topology v5e:4x4 \\
        --mesh fsdp=16 --dtype bfloat16

    p = jaxrl.plan.plan("grpo", topology="v5e:4x4", mesh="fsdp=16",
                        model_config="examples/models/llama-3-8b.json")
    print(p.report()); p.fits

The story (`planner.plan`):

1. The target (`topology.py`): `v5e:4x4` is a TPU slice described by libtpu without
   any TPU attached, `cpu:8` eight emulated CPU devices (testable anywhere).
2. The algorithm is built from the same flags and config as `jaxrl train`; `--mesh`
   sets its mesh axes (`mesh_fsdp`, `mesh_tensor`; `data` takes the other devices).
3. Its state and batches are abstract (`jax.eval_shape` of the driver's `init`): no
   parameter is allocated, and a `--model` directory's weights are never read.
4. The algorithm's own hooks lay them out: `make_mesh` over the target's devices,
   `state_sharding`, `batch_sharding`.
5. Each step is the driver's own program (`measure.py`, through
   `jaxrl.training.steppers.lower_phase`), compiled and measured per device: memory
   by role against the chip's HBM, FLOPs and HBM traffic with loops weighted by their
   trip counts (`cost.py`), a roofline step time (`report.py`).
6. When a step does not fit: the algorithm's `plan_suggestions` (more fsdp, remat,
   LoRA, more micro-batches for the language models), each compiled; only those that
   fit are printed.

`jaxrl.plan(...)`, the module called as a function, still works but is deprecated:
call `jaxrl.plan.plan(...)`.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any

from .cost import MatmulCost, MatmulOp, matmul_cost, matmul_ops
from .planner import PLANNED_RUN_FIELDS, make_algorithm, plan, plan_algorithm, plan_config
from .report import Plan, StepPlan, Suggestion, format_plan
from .topology import (
    CHIPS,
    TIGHT,
    Chip,
    Target,
    check_model_dims,
    libtpu_installed,
    mesh_overrides,
    parse_bytes,
    parse_mesh,
    prepare_process,
    resolve_topology,
)

__all__ = [
    "CHIPS",
    "PLANNED_RUN_FIELDS",
    "TIGHT",
    "Chip",
    "MatmulCost",
    "MatmulOp",
    "Plan",
    "StepPlan",
    "Suggestion",
    "Target",
    "check_model_dims",
    "format_plan",
    "libtpu_installed",
    "make_algorithm",
    "matmul_cost",
    "matmul_ops",
    "mesh_overrides",
    "parse_bytes",
    "parse_mesh",
    "plan",
    "plan_algorithm",
    "plan_config",
    "prepare_process",
    "resolve_topology",
]


class _DeprecatedCall(types.ModuleType):
    """Keeps `jaxrl.plan(...)` (this package called as a function) working, with a
    `DeprecationWarning`, for code written when the planner was one callable module.
    Python has no other way to make a module callable; delete with the deprecation."""

    def __call__(self, *args: Any, **kwargs: Any) -> Plan:
        warnings.warn(
            "calling jaxrl.plan(...) is deprecated: call jaxrl.plan.plan(...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _DeprecatedCall
