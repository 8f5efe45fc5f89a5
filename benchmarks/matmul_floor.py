"""The matmul floor of a compiled step: the time its matrix products take when each one
is timed alone on this machine, summed with the number of times the step runs it.

A step cannot run faster than its products (unless XLA fuses them away, which it does
not do for these), and for a small model on a CPU the products run far below the matmul
peak: a `[4672, 128] x [128, 256]` product does not reach the GFLOP/s of a 2048^3 one.
So "the step's FLOPs at the peak" is a floor nobody can reach, and "the step's products
at their own measured speed" is the floor that decides whether a speed target is
reachable at all. The benchmark workers report it beside the measured step time
(`benchmarks/workers/jaxrl_grpo.py`, `benchmarks/workers/jaxrl_dreamer.py`).

How: `jaxrl.plan.matmul_ops` lists every `dot_general` and `conv_general_dilated` of
the step's jaxpr with its loop weight (the same walk as the FLOP count of `jaxrl plan`);
each distinct product (primitive, operand shapes and dtypes, parameters) is compiled
alone with random operands and timed two ways, keeping the faster:

* one call, best of `repeats` (`block_until_ready`);
* for small products, a `lax.scan` over `batch` different left operands, best of
  `repeats`, divided by `batch`: the per-call dispatch (microseconds) would otherwise
  count as matmul time for the decode loop's tiny products.

`method="loop"` times every product instead inside one `fori_loop` of `iterations`
executions, its operands passed through `lax.optimization_barrier` at each iteration
(so XLA can neither hoist the product out of the loop nor drop it) and its result
carried out: the per-call dispatch is amortised for products of any size, as inside a
training scan. For steps made of microsecond products (SAC's, below 100 us each) the
scan of copies above costs more than the product itself (its stacked operands are
sliced and its results written into a stack), so this is the tighter floor there.

What the floor leaves out (so the real step is slower): every other kernel
(elementwise, reductions, transposes, copies), and the memory traffic between them.
What could make the real step faster than the floor: XLA fusing an elementwise producer
into a product in the full program, and two products running at once on two threads;
on these steps both are small (the profiles in benchmarks/README.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.plan import MatmulOp, matmul_ops

# Left operands up to this size are also timed in a scan of `batch` calls.
_SMALL_BYTES = 4 << 20


def _operand(aval: Any, key: jax.Array, lead: Sequence[int] = ()) -> jax.Array:
    shape = (*lead, *aval.shape)
    if jnp.issubdtype(aval.dtype, jnp.floating):
        return jax.random.normal(key, shape, aval.dtype)
    return jnp.zeros(shape, aval.dtype)


def _best(fn: Any, args: Sequence[Any], repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def _operands(op: MatmulOp, lead: Sequence[int] = ()) -> tuple[jax.Array, jax.Array]:
    """Random operands of `op`'s product (the left one with extra leading axes `lead`)."""
    lhs_aval, rhs_aval = (v.aval for v in op.eqn.invars[:2])
    k_lhs, k_rhs = jax.random.split(jax.random.key(0))
    return _operand(lhs_aval, k_lhs, lead), _operand(rhs_aval, k_rhs)


def _product(op: MatmulOp, a: jax.Array, b: jax.Array) -> jax.Array:
    """`op`'s primitive, with its parameters, on `a` and `b`."""
    return op.eqn.primitive.bind(a, b, **op.eqn.params)


def time_product(op: MatmulOp, repeats: int = 5, batch: int = 32) -> float:
    """Seconds per execution of `op`'s product alone (the faster of one call and, for
    a small left operand, a scan of `batch` calls; see the module docstring)."""
    lhs, rhs = _operands(op)
    one = jax.jit(lambda a, b: _product(op, a, b)).lower(lhs, rhs).compile()
    seconds = _best(one, (lhs, rhs), repeats)
    if lhs.nbytes <= _SMALL_BYTES and batch > 1:
        lhs_stack, _ = _operands(op, (batch,))

        def many(stack: jax.Array, b: jax.Array) -> jax.Array:
            return jax.lax.scan(lambda c, a: (c, _product(op, a, b)), None, stack)[1]

        looped = jax.jit(many).lower(lhs_stack, rhs).compile()
        seconds = min(seconds, _best(looped, (lhs_stack, rhs), repeats) / batch)
    return seconds


def time_product_in_loop(op: MatmulOp, repeats: int = 5, iterations: int = 1000) -> float:
    """Seconds per execution of `op`'s product inside a `fori_loop` of `iterations`
    (best of `repeats`; `method="loop"` in the module docstring)."""
    lhs, rhs = _operands(op)
    out = op.eqn.outvars[0].aval

    def body(_: jax.Array, carry: tuple) -> tuple:
        a, b, _ = carry
        a, b = jax.lax.optimization_barrier((a, b))
        return a, b, _product(op, a, b)

    def loop(a: jax.Array, b: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, iterations, body, (a, b, jnp.zeros(out.shape, out.dtype)))[2]

    compiled = jax.jit(loop).lower(lhs, rhs).compile()
    return _best(compiled, (lhs, rhs), repeats) / iterations


def _describe(op: MatmulOp) -> str:
    lhs, rhs = (v.aval for v in op.eqn.invars[:2])
    out = op.eqn.outvars[0].aval
    params = op.eqn.params
    if op.eqn.primitive.name == "dot_general":
        (contract, batch_dims) = params["dimension_numbers"]
        how = f"contract {contract}" + (f" batch {batch_dims}" if any(batch_dims) else "")
    else:
        how = "conv"
    return f"{list(lhs.shape)} x {list(rhs.shape)} -> {list(out.shape)} ({how})"


def matmul_floor(
    jaxpr: Any, repeats: int = 5, top: int = 12, method: str = "call"
) -> dict[str, Any]:
    """The matmul floor of a step from its jaxpr (`jax.make_jaxpr(step)(*args)`): total
    seconds, FLOPs, and the `top` products by their share of the floor. `method`:
    "call" (each product called alone, or in a scan of copies when small) or "loop"
    (each product in a loop; see the module docstring)."""
    timers = {"call": time_product, "loop": time_product_in_loop}
    if method not in timers:
        raise ValueError(f"method must be one of {sorted(timers)}, got {method!r}")
    ops, exact = matmul_ops(jaxpr, loops=True)
    groups: dict[tuple, list[MatmulOp]] = {}
    for op in ops:
        groups.setdefault(op.key, []).append(op)
    rows = []
    for members in groups.values():
        seconds = timers[method](members[0], repeats)
        times = sum(m.times for m in members)
        rows.append(
            {
                "product": _describe(members[0]),
                "times": times,
                "ms_each": 1e3 * seconds,
                "ms_total": 1e3 * seconds * times,
                "gflop_per_s": members[0].flops / seconds / 1e9,
            }
        )
    rows.sort(key=lambda r: -r["ms_total"])
    total = sum(r["ms_total"] for r in rows) / 1e3
    flops = sum(op.flops * op.times for op in ops)
    return {
        "seconds": total,
        "flops": flops,
        "gflop_per_s": flops / total / 1e9 if total else None,
        "distinct_products": len(rows),
        "products": len(ops),
        "trip_counts_exact": exact,
        "method": method,
        "top": rows[:top],
    }


def format_floor(name: str, floor: dict[str, Any], measured_seconds: float | None) -> str:
    """A few lines for a benchmark's log: the floor, the measured time, the top rows."""
    head = (
        f"{name}: matmul floor {1e3 * floor['seconds']:.1f} ms "
        f"({floor['flops'] / 1e9:.2f} GFLOP at {floor['gflop_per_s']:.1f} GFLOP/s, "
        f"{floor['products']} products, {floor['distinct_products']} distinct)"
    )
    if measured_seconds:
        head += (
            f"; measured {1e3 * measured_seconds:.1f} ms "
            f"= {measured_seconds / floor['seconds']:.2f}x the floor"
        )
    lines = [head]
    for r in floor["top"][:6]:
        lines.append(
            f"    {r['ms_total']:8.2f} ms  {r['times']:>6.0f} x {r['ms_each']:.3f} ms "
            f"({r['gflop_per_s']:.0f} GFLOP/s)  {r['product']}"
        )
    return "\n".join(lines)
