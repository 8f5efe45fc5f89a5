"""Loop-aware matmul cost of a jaxpr: the FLOPs XLA's cost analysis misses in loops.

XLA's cost analysis counts a loop body once, whatever its trip count (a `scan` of 10
matmuls costs as much as one, on TPU and CPU). `matmul_cost` counts the FLOPs and
operand bytes of every `dot_general` and `conv_general_dilated` with loop bodies
weighted by their trip counts, and once each; `jaxrl plan` scales XLA's numbers by
their ratio. Scans have static lengths; the sampler's decode loops stop at the first
step where every row has ended, so their bound (every completion runs to
`max_new_tokens`) is used: a worst case. The benchmarks use the same walk
(`matmul_ops`) to time every product alone.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.extend.core as jax_core
import numpy as np


@dataclasses.dataclass
class MatmulCost:
    """Matmul FLOPs and operand bytes of a jaxpr (`exact` False: a loop of unknown trip
    count was counted once)."""

    flops: float = 0.0
    bytes: float = 0.0
    exact: bool = True

    def add(self, other: MatmulCost, times: float = 1.0) -> None:
        self.flops += times * other.flops
        self.bytes += times * other.bytes
        self.exact &= other.exact


def _aval_bytes(aval: Any) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class MatmulOp:
    """One `dot_general` or `conv_general_dilated` equation of a jaxpr and how often it
    runs (`times`: the product of the trip counts of the loops around it). `eqn` is the
    jaxpr equation, so the same product can be rebuilt and timed alone
    (`eqn.primitive.bind(lhs, rhs, **eqn.params)`; benchmarks/matmul_floor.py does)."""

    eqn: Any
    times: float
    flops: float
    """2 x multiply-adds of one execution."""
    bytes: float
    """Operand and result bytes of one execution."""

    @property
    def key(self) -> tuple:
        """Equal for products of the same primitive, operand shapes, dtypes and params."""
        lhs, rhs = (v.aval for v in self.eqn.invars[:2])
        params = tuple(sorted((k, repr(v)) for k, v in self.eqn.params.items()))
        return (self.eqn.primitive.name, lhs.shape, str(lhs.dtype), rhs.shape,
                str(rhs.dtype), params)  # fmt: skip


def matmul_ops(jaxpr: Any, loops: bool = True) -> tuple[list[MatmulOp], bool]:
    """Every `dot_general` and `conv_general_dilated` in `jaxpr` (nested jaxprs
    included), with scan bodies weighted by their length and while bodies by their trip
    count when `loops` (else every body once, as XLA's cost analysis counts them), and
    whether every trip count was known.

    A while loop's trip count is read from a `t < limit` test of its condition on a
    carried counter with a known start (a literal, or the limit a previous loop ran
    to): an upper bound when the loop can also stop early (the sampler's EOS exit). A
    `cond` contributes its costliest branch. A `shard_map` body, whose shapes are one
    device's share, counts once per device of its mesh axes, so that the FLOPs are the
    whole program's inside it as outside (where shapes are global).
    """
    ops: list[MatmulOp] = []
    exact = _collect_matmuls(jaxpr, loops, 1.0, ops)
    return ops, exact


def _collect_matmuls(jaxpr: Any, loops: bool, times: float, ops: list[MatmulOp]) -> bool:
    inner = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    exact = True
    known: dict[Any, int] = {}
    for eqn in inner.eqns:
        prim = eqn.primitive.name
        if prim in ("dot_general", "conv_general_dilated"):
            lhs, rhs = (v.aval for v in eqn.invars[:2])
            out = eqn.outvars[0].aval
            if prim == "dot_general":
                (contract, _), _ = eqn.params["dimension_numbers"]
                flops = 2.0 * math.prod(out.shape) * math.prod(lhs.shape[i] for i in contract)
            else:
                out_features = rhs.shape[eqn.params["dimension_numbers"].rhs_spec[0]]
                flops = 2.0 * math.prod(out.shape) * math.prod(rhs.shape) / out_features
            nbytes = float(_aval_bytes(lhs) + _aval_bytes(rhs) + _aval_bytes(out))
            ops.append(MatmulOp(eqn, times, flops, nbytes))
        elif prim == "scan":
            length = eqn.params["length"] if loops else 1
            exact &= _collect_matmuls(eqn.params["jaxpr"], loops, times * length, ops)
        elif prim == "while":
            trip = _while_trip_count(eqn, known) if loops else 1
            if trip is None:
                trip, exact = 1, False
            exact &= _collect_matmuls(eqn.params["body_jaxpr"], loops, times * trip, ops)
        elif prim == "shard_map":  # its shapes are one device's share: count every device
            devices = math.prod(
                eqn.params["mesh"].shape[a] for a in eqn.params["newly_manual_axes"]
            )
            exact &= _collect_matmuls(eqn.params["jaxpr"], loops, times * devices, ops)
        elif prim == "cond":  # the costliest branch
            branches: list[tuple[list[MatmulOp], bool]] = []
            for branch in eqn.params["branches"]:
                branch_ops: list[MatmulOp] = []
                branches.append((branch_ops, _collect_matmuls(branch, loops, times, branch_ops)))
            branch_ops, branch_exact = max(
                branches, key=lambda b: sum(o.flops * o.times for o in b[0])
            )
            ops.extend(branch_ops)
            exact &= branch_exact
        else:
            for sub in jax_core.jaxprs_in_params(eqn.params):
                exact &= _collect_matmuls(sub, loops, times, ops)
    return exact


def matmul_cost(jaxpr: Any, loops: bool = True) -> MatmulCost:
    """FLOPs (2 x multiply-adds) and bytes (operands + result) of every `dot_general`
    and `conv_general_dilated` in `jaxpr`, loops weighted as `matmul_ops` says."""
    ops, exact = matmul_ops(jaxpr, loops)
    return MatmulCost(
        flops=sum(o.flops * o.times for o in ops),
        bytes=sum(o.bytes * o.times for o in ops),
        exact=exact,
    )


def _while_trip_count(eqn: Any, known: dict[Any, int]) -> int | None:
    """Iterations of a while loop whose condition tests `counter < literal` (see
    `matmul_cost`); records the counter's final value for the loops after it."""
    cond = eqn.params["cond_jaxpr"].jaxpr
    n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    carried = cond.invars[n_cond:]
    for ceqn in cond.eqns:
        if ceqn.primitive.name != "lt" or not isinstance(ceqn.invars[1], jax_core.Literal):
            continue
        counter = ceqn.invars[0]
        if counter not in carried:
            continue
        k = carried.index(counter)
        limit = int(ceqn.invars[1].val)
        start_var = eqn.invars[n_cond + n_body + k]
        if isinstance(start_var, jax_core.Literal):
            start = int(start_var.val)
        elif start_var in known:
            start = known[start_var]
        else:
            continue
        known[eqn.outvars[k]] = max(start, limit)
        return max(0, limit - start)
    return None
