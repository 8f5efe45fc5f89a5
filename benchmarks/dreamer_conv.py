"""How fast each form of DreamerV3's convolution stages runs on XLA's CPU backend.

    python benchmarks/dreamer_conv.py                  # batch 1024 (16 x 64 frames)
    python benchmarks/dreamer_conv.py --batch 256 --iters 5 --out /tmp/conv.json

The official DreamerV3 (dreamer 3.3.1, `size1m`: depth 4, multipliers 2, 3, 4, 4,
5x5 kernels) encodes 64x64x3 frames with four stages of a stride-1 5x5 convolution and
a 2x2 max-pool, and decodes with four of 2x nearest upsampling and a 5x5 convolution.
A gradient step of batch 16 x 64 runs every stage on 1,024 frames. `jaxrl.nn.conv`
writes each stage in several forms with the same parameters and the same values
(tests/nn/test_conv.py); this script times every form on every stage's shape, forward
alone and forward + gradient (`jax.value_and_grad` of the sum of the output times a
fixed cotangent, with respect to the input and the kernel), and the whole encoder
(four stages with RMSNorm-free SiLU between them) and the whole decoder.

Each cell: a jitted function, compiled first, then `--iters` calls after a warm-up
(median, `block_until_ready`). "GFLOP/s" is the plain convolution's FLOP count (2 x
multiply-adds of the stride-1 "same" convolution, as XLA and the official code count
it) divided by the time, so forms that compute it with fewer or more operations
compare on the work the model asks for; `flops_ratio` is a form's own count of
multiply-adds relative to the plain one (s2d: 1.44x, its kernel holds zeros;
sub-pixel: 0.36x). The float32 matmul peak (a jitted 2048^3 matmul,
`grpo_step.matmul_peak`) is measured before and after. Writes a table and JSON
(default benchmarks/results/dreamer_conv.json).

`--loop-length N` (default 2) also times every whole stack's forward + gradient the way
a trainer runs it: inside a `lax.scan` of N steps whose carry is the kernels (one SGD
step each, so nothing is hoisted out), per step. On XLA's CPU backend a convolution's
gradient inside a loop can be 10-80x slower than alone, and the form decides whether it
is; `--loop-batch` (default: `--batch`) shrinks those cells, because the slow ones take
minutes per step at batch 1024. The MinAtar encoders (Dreamer's two 3x3 convolutions on
10x10x4 frames, DQN/PQN's one 3x3 "valid" convolution) are timed the same way, plain
`lax.conv` against `jaxrl.nn.conv.patch_conv`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _harness import HERE, fmt, run_metadata, warn_if_loaded, write_results

DEFAULT_OUT = HERE / "results" / "dreamer_conv.json"
KERNEL = 5
# (height, width, in channels, out channels) of each stage at DreamerV3's size1m.
ENCODER = [(64, 64, 3, 8), (32, 32, 8, 12), (16, 16, 12, 16), (8, 8, 16, 16)]
DECODER = [(4, 4, 16, 16), (8, 8, 16, 12), (16, 16, 12, 8), (32, 32, 8, 3)]
# Multiply-adds of each form relative to the plain convolution (K = 5).
FLOPS_RATIO = {
    "xla": 1.0,
    "matmul": 1.0,
    "s2d": (4 * 9) / 25,
    "s2d_matmul": (4 * 9) / 25,
    "subpixel": 9 / 25,
    "subpixel_matmul": 9 / 25,
}


def _time(fn, args, iters: int, warmup: bool = True) -> float:
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    if warmup:
        jax.block_until_ready(compiled(*args))
    seconds = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def _time_in_loop(fn, args, iters: int, length: int) -> float:
    """Seconds per step of `length` steps of `jax.value_and_grad(fn)` inside a `lax.scan`
    whose carry is the kernels (`args[1]`), each step one small SGD step on them."""
    import jax

    grad = _grad_fn(fn)

    def loop(x, ws, cot):
        def step(ws, _):
            _, (_, g) = grad(x, ws, cot)
            return jax.tree.map(lambda w, d: w - 1e-6 * d, ws, g), None

        return jax.lax.scan(step, ws, None, length=length)[0]

    return _time(loop, args, iters, warmup=False) / length


def _stage_fn(kind: str, impl: str):
    from jaxrl.nn import conv

    return (
        (lambda x, w: conv.conv_pool(x, w, impl))
        if kind == "pool"
        else (lambda x, w: conv.upsample_conv(x, w, impl))
    )


def _grad_fn(fn):
    import jax
    import jax.numpy as jnp

    def loss(x, ws, cot):
        return jnp.sum(fn(x, ws) * cot)

    return jax.value_and_grad(loss, argnums=(0, 1))


def stage_flops(kind: str, batch: int, shape: tuple[int, int, int, int]) -> float:
    """2 x multiply-adds of the plain stride-1 5x5 convolution of a stage."""
    h, w, c_in, c_out = shape
    if kind == "upsample":
        h, w = 2 * h, 2 * w
    return 2.0 * batch * h * w * KERNEL * KERNEL * c_in * c_out


def measure_stages(batch: int, iters: int) -> list[dict[str, Any]]:
    import jax
    import jax.numpy as jnp

    from jaxrl.nn import conv

    rows = []
    for kind, stages, impls in (
        ("pool", ENCODER, conv.POOL_IMPLS),
        ("upsample", DECODER, conv.UPSAMPLE_IMPLS),
    ):
        for shape in stages:
            h, w, c_in, c_out = shape
            kx, kw, kc = jax.random.split(jax.random.key(0), 3)
            x = jax.random.normal(kx, (batch, h, w, c_in), jnp.float32)
            weight = jax.random.normal(kw, (KERNEL, KERNEL, c_in, c_out), jnp.float32) * 0.1
            out_shape = jax.eval_shape(_stage_fn(kind, "xla"), x, weight).shape
            cot = jax.random.normal(kc, out_shape, jnp.float32)
            flops = stage_flops(kind, batch, shape)
            for impl in impls:
                fn = _stage_fn(kind, impl)
                forward = _time(fn, (x, weight), iters)
                grad = _time(_grad_fn(fn), (x, weight, cot), iters)
                row = {
                    "kind": kind,
                    "shape": list(shape),
                    "impl": impl,
                    "forward_ms": 1e3 * forward,
                    "forward_and_grad_ms": 1e3 * grad,
                    "forward_gflop_per_s": flops / forward / 1e9,
                    # forward + gradient = 3x the forward's multiply-adds
                    "forward_and_grad_gflop_per_s": 3 * flops / grad / 1e9,
                    "flops_ratio": FLOPS_RATIO[impl],
                }
                rows.append(row)
                print(
                    f"  {kind:<8} {str(shape):<18} {impl:<16} fwd {row['forward_ms']:8.2f} ms "
                    f"({row['forward_gflop_per_s']:6.1f} GFLOP/s)  fwd+grad "
                    f"{row['forward_and_grad_ms']:8.2f} ms "
                    f"({row['forward_and_grad_gflop_per_s']:6.1f})",
                    flush=True,
                )
    return rows


def measure_stacks(
    batch: int, iters: int, loop_batch: int, loop_length: int
) -> list[dict[str, Any]]:
    """The whole encoder (4 conv + pool stages) and decoder (4 upsample + conv stages),
    SiLU between stages, every stage in the same form; alone at `batch` and (when
    `loop_length` > 0) inside a loop at `loop_batch`."""
    import jax
    import jax.numpy as jnp

    from jaxrl.nn import conv

    rows = []
    for kind, stages, impls in (
        ("encoder", ENCODER, conv.POOL_IMPLS),
        ("decoder", DECODER, conv.UPSAMPLE_IMPLS),
    ):
        stage = "pool" if kind == "encoder" else "upsample"
        h, w, c_in, _ = stages[0]
        keys = jax.random.split(jax.random.key(1), len(stages) + 2)
        x = jax.random.normal(keys[0], (batch, h, w, c_in), jnp.float32)
        weights = [
            jax.random.normal(k, (KERNEL, KERNEL, s[2], s[3]), jnp.float32) * 0.1
            for k, s in zip(keys[2:], stages, strict=True)
        ]
        flops = sum(stage_flops(stage, batch, s) for s in stages)
        for impl in impls:
            one = _stage_fn(stage, impl)

            def stack(x, ws, one=one):
                for i, wi in enumerate(ws):
                    x = one(x, wi)
                    x = jax.nn.silu(x) if i < len(ws) - 1 else x
                return x

            cot = jax.random.normal(keys[1], jax.eval_shape(stack, x, weights).shape)
            forward = _time(stack, (x, weights), iters)
            grad = _time(_grad_fn(stack), (x, weights, cot), iters)
            row = {
                "kind": kind,
                "impl": impl,
                "forward_ms": 1e3 * forward,
                "forward_and_grad_ms": 1e3 * grad,
                "forward_gflop_per_s": flops / forward / 1e9,
                "forward_and_grad_gflop_per_s": 3 * flops / grad / 1e9,
                "gflop_forward": flops / 1e9,
            }
            loop_note = ""
            if loop_length > 0:
                lx, lc = x[:loop_batch], cot[:loop_batch]
                in_loop = _time_in_loop(stack, (lx, weights, lc), 1, loop_length)
                alone = _time(_grad_fn(stack), (lx, weights, lc), iters)
                row.update(
                    loop_batch=loop_batch,
                    loop_length=loop_length,
                    forward_and_grad_alone_at_loop_batch_ms=1e3 * alone,
                    forward_and_grad_in_loop_ms=1e3 * in_loop,
                    loop_slowdown=in_loop / alone,
                )
                loop_note = (
                    f"  at batch {loop_batch}: alone {1e3 * alone:8.1f} ms, in a loop "
                    f"{1e3 * in_loop:9.1f} ms ({in_loop / alone:5.1f}x)"
                )
            rows.append(row)
            print(
                f"  {kind:<8} {impl:<16} fwd {row['forward_ms']:8.1f} ms "
                f"({row['forward_gflop_per_s']:6.1f} GFLOP/s)  fwd+grad "
                f"{row['forward_and_grad_ms']:8.1f} ms "
                f"({row['forward_and_grad_gflop_per_s']:6.1f}){loop_note}",
                flush=True,
            )
    return rows


# MinAtar's small encoders (10x10x4 frames): (name, batch, [(out channels, stride,
# padding), ...]) with 3x3 kernels. Dreamer's replays 16 x 64 frames per gradient step;
# DQN's minibatch is 32 (PQN's is larger; its cost grows as DQN's does).
MINATAR = [
    ("dreamer-minatar", 1024, [(16, 1, "SAME"), (32, 2, "SAME")]),
    ("dqn-minatar", 32, [(16, 1, "VALID")]),
]


def measure_minatar(iters: int, loop_length: int) -> list[dict[str, Any]]:
    """MinAtar's encoders, plain `lax.conv` against `patch_conv`, forward + gradient
    alone and inside a loop of `max(loop_length, 2)` steps."""
    import jax
    import jax.numpy as jnp

    from jaxrl.nn import conv

    rows = []
    dims = ("NHWC", "HWIO", "NHWC")
    for name, batch, layers in MINATAR:
        keys = jax.random.split(jax.random.key(2), len(layers) + 2)
        x = jax.random.uniform(keys[0], (batch, 10, 10, 4), jnp.float32)
        weights, c_in = [], 4
        for k, (c_out, _, _) in zip(keys[2:], layers, strict=True):
            weights.append(jax.random.normal(k, (3, 3, c_in, c_out), jnp.float32) * 0.1)
            c_in = c_out
        for impl, conv_fn in (("xla", jax.lax.conv_general_dilated), ("patch", conv.patch_conv)):

            def encoder(x, ws, conv_fn=conv_fn, layers=layers):
                for wi, (_, stride, padding) in zip(ws, layers, strict=True):
                    y = conv_fn(x, wi, (stride, stride), padding, dimension_numbers=dims)
                    x = jax.nn.silu(y)
                return x

            cot = jax.random.normal(keys[1], jax.eval_shape(encoder, x, weights).shape)
            alone = _time(_grad_fn(encoder), (x, weights, cot), iters)
            in_loop = _time_in_loop(encoder, (x, weights, cot), iters, max(loop_length, 2))
            row = {
                "kind": name,
                "impl": impl,
                "batch": batch,
                "forward_and_grad_ms": 1e3 * alone,
                "forward_and_grad_in_loop_ms": 1e3 * in_loop,
                "loop_slowdown": in_loop / alone,
            }
            rows.append(row)
            print(
                f"  {name:<16} {impl:<6} batch {batch:>5}: fwd+grad alone {1e3 * alone:7.2f} ms, "
                f"in a loop {1e3 * in_loop:8.2f} ms ({in_loop / alone:5.1f}x)",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--batch", type=int, default=1024, help="frames per call (16 x 64)")
    p.add_argument("--iters", type=int, default=7, help="timed calls per cell (median)")
    p.add_argument(
        "--loop-length", type=int, default=2, help="steps of the in-loop cells (0: skip them)"
    )
    p.add_argument("--loop-batch", type=int, default=None, help="frames of the in-loop cells")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    loop_batch = args.loop_batch or args.batch
    sys.path.insert(0, str(HERE))
    from grpo_step import matmul_peak

    load = warn_if_loaded("other work on the machine slows every cell")
    result = run_metadata("dreamer_conv", __file__, argv)
    result.update(
        batch=args.batch,
        iters=args.iters,
        kernel=KERNEL,
        loop_length=args.loop_length,
        loop_batch=loop_batch,
    )
    peaks = [matmul_peak()]
    print(f"float32 matmul peak: {peaks[0]['gflop_per_s_best']:.1f} GFLOP/s", flush=True)
    print(f"stages at batch {args.batch} (GFLOP/s of the plain convolution's count):")
    result["stages"] = measure_stages(args.batch, args.iters)
    print("whole stacks:")
    result["stacks"] = measure_stacks(args.batch, args.iters, loop_batch, args.loop_length)
    print("MinAtar encoders (3x3 convolutions on 10x10x4 frames):")
    result["minatar"] = measure_minatar(args.iters, args.loop_length)
    peaks.append(matmul_peak())
    result["matmul_peak"] = peaks
    result["matmul_peak_gflop_per_s"] = max(x["gflop_per_s_best"] for x in peaks)
    result["load_average_before"] = load
    result["load_average_after"] = warn_if_loaded("the load rose during the run")
    best: dict[str, str] = {}
    for kind in ("encoder", "decoder"):
        rows = [r for r in result["stacks"] if r["kind"] == kind]
        plain = next(r for r in rows if r["impl"] == "xla")
        cells = [("forward_and_grad_ms", kind, "alone")]
        if args.loop_length > 0:
            cells.append(("forward_and_grad_in_loop_ms", f"{kind}_in_loop", "in a loop"))
        for field, name, where in cells:
            fastest = min(rows, key=lambda r, field=field: r[field])
            best[name] = fastest["impl"]
            print(
                f"{kind}: fastest forward + gradient {where} is {fastest['impl']} "
                f"({fmt(plain[field], '.1f')} ms plain -> {fastest[field]:.1f} ms)"
            )
    result["fastest"] = best
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
