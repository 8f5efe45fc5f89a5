"""The two convolution stages of DreamerV3's image encoder and decoder, each written in
several arithmetically equal forms, because on XLA's CPU backend the form decides the
speed.

DreamerV3 (Hafner et al. 2023, arXiv:2301.04104; the `dreamer` 3.3.1 code, `rssm.Encoder`
and `rssm.Decoder` with their default `strided: False`) halves the resolution with a
stride-1 "same" convolution followed by a 2x2 max-pool, and doubles it with a
nearest-neighbour 2x upsample followed by a stride-1 "same" convolution. Both stages here
take the kernel in that code's layout, `[K, K, C_in, C_out]` (HWIO, K odd), so every form
has the same parameters.

`conv_pool(x, w, impl)`, `[B, H, W, C] -> [B, H/2, W/2, C_out]`:

* `"xla"`: `lax.conv_general_dilated` at full resolution, then the max over each 2x2
  block (what the official code runs).
* `"s2d"`: space-to-depth. With `x` rearranged to `[B, H/2, W/2, 4C]` (the four
  pixels of each 2x2 block as channels), the four outputs of a block are one
  `ceil(K/2)+1`-wide convolution with `4 C_out` outputs (`s2d_kernel` places the K x K
  taps; a quarter of the entries are zero), and the max-pool becomes a max over the
  four channel groups: no full-resolution tensor and no strided window op at all.
* `"s2d_matmul"`: the same, with the small convolution written as patch extraction
  (shifted slices, concatenated on the channel axis) and one matmul of
  `[B H/2 W/2, 9 * 4C] x [9 * 4C, 4 C_out]`.
* `"matmul"`: patch extraction and a matmul at full resolution, then the pool.

`upsample_conv(x, w, impl)`, `[B, H, W, C] -> [B, 2H, 2W, C_out]`:

* `"xla"`: repeat every pixel 2x2, then `lax.conv_general_dilated` (the official code).
* `"subpixel"`: the four output phases of a 2x2 block read only a 3x3 neighbourhood of
  the low-resolution input, so the stage is one 3x3 convolution with `4 C_out` outputs
  (`subpixel_kernel` sums the K x K taps that land on the same input pixel) followed by
  depth-to-space (Shi et al. 2016, "Real-Time Single Image and Video Super-Resolution
  Using an Efficient Sub-Pixel Convolutional Neural Network"). Same values, 9 x 4 = 36
  instead of 4 x 25 = 100 multiply-adds per input pixel and channel pair at K = 5.
* `"subpixel_matmul"`: the same with the 3x3 convolution as patch extraction + matmul.

`patch_conv` is `lax.conv_general_dilated` (NHWC, HWIO, any stride and padding) as
patches + matmul, and `Conv` is flax's `nn.Conv` computed by it, the layer every network
uses (MinAtar encoders of Dreamer, DQN and PQN): inside a loop, XLA's CPU convolution
gradients are many times slower than outside one, and a matmul's are not (see `patch_conv`).

Which form is fastest is measured by `benchmarks/dreamer_conv.py` (its history is in
benchmarks/notes, "Dreamer throughput"); `FAST_POOL`
and `FAST_UPSAMPLE` name the forms the networks use: the fastest inside a loop, where
training runs them. Alone, the `s2d` and `subpixel` forms (plain convolutions over
rearranged inputs) are as fast or faster; inside a loop their gradients slow down like
every XLA CPU convolution's, and the patch + matmul forms do not.
`tests/nn/test_conv.py` checks that every form equals the `xla` form in values and in
gradients.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.nn.layers import flat_dot_general

POOL_IMPLS = ("xla", "s2d", "s2d_matmul", "matmul")
UPSAMPLE_IMPLS = ("xla", "subpixel", "subpixel_matmul")
# The forms the networks use: the fastest inside a training loop
# (benchmarks/dreamer_conv.py measures every form alone and in a loop).
FAST_POOL = "s2d_matmul"
FAST_UPSAMPLE = "subpixel_matmul"

_DIMS = ("NHWC", "HWIO", "NHWC")


def _check(x: jax.Array, w: jax.Array, impl: str, impls: tuple[str, ...]) -> int:
    if impl not in impls:
        raise ValueError(f"impl must be one of {impls}, got {impl!r}")
    k = w.shape[0]
    if w.ndim != 4 or w.shape[1] != k or k % 2 != 1:
        raise ValueError(f"kernel must be [K, K, C_in, C_out] with K odd, got {w.shape}")
    if x.shape[-1] != w.shape[2]:
        raise ValueError(f"input has {x.shape[-1]} channels, the kernel expects {w.shape[2]}")
    return k


def _conv_same(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_DIMS)


def _patches(
    x: jax.Array,
    k: int,
    pads: tuple[tuple[int, int], tuple[int, int]],
    strides: tuple[int, int] = (1, 1),
) -> jax.Array:
    """`[B, H, W, C] -> [B, H', W', k*k*C]`: the k x k neighbourhood of every output pixel
    (zero padding `pads` = ((top, bottom), (left, right)), window `strides`), taps in
    row-major order with the channels innermost, matching `w.reshape(k * k * C, C_out)`
    of an HWIO kernel."""
    xp = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    (sh, sw), (ph, pw) = strides, xp.shape[1:3]
    out_h, out_w = (ph - k) // sh + 1, (pw - k) // sw + 1
    taps = [
        xp[:, i : i + sh * (out_h - 1) + 1 : sh, j : j + sw * (out_w - 1) + 1 : sw, :]
        for i in range(k)
        for j in range(k)
    ]
    return jnp.concatenate(taps, axis=-1)


def patch_conv(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: tuple[int, int],
    padding: str | tuple[tuple[int, int], tuple[int, int]],
    lhs_dilation: tuple[int, int] | None = None,
    rhs_dilation: tuple[int, int] | None = None,
    dimension_numbers: Any = _DIMS,
    feature_group_count: int = 1,
    precision: Any = None,
) -> jax.Array:
    """`lax.conv_general_dilated` for NHWC inputs and square HWIO kernels, written as patch
    extraction (shifted, strided slices concatenated on the channel axis) and one matmul.
    A drop-in for the `conv_general_dilated` of flax's `nn.Conv` (see `Conv`): same
    parameters, same values (tests/nn/test_conv.py checks values and gradients).

    Why: inside a `lax.scan` or `while_loop` (which is where every training step runs,
    under the driver's scan over updates) XLA's CPU backend computes a convolution's
    gradients many times slower than the same program outside a loop, while a matmul's
    speed does not change (`benchmarks/dreamer_conv.py --loop-length`;
    benchmarks/notes, "Convolutions inside a loop", which also measures a Dreamer gradient step on
    MinAtar's 10x10 frames with each form). No dilation and no feature groups (an error
    names them). Networks use it through `Conv`.
    """
    dims = jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    if dims != jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, _DIMS):
        raise ValueError(f"patch_conv needs NHWC inputs and HWIO kernels, got {dimension_numbers}")
    for name, value in (("lhs_dilation", lhs_dilation), ("rhs_dilation", rhs_dilation)):
        if value is not None and tuple(value) != (1, 1):
            raise ValueError(f"patch_conv supports {name}=(1, 1) or None only, got {value}")
    if feature_group_count != 1:
        raise ValueError(
            f"patch_conv supports feature_group_count=1 only, got {feature_group_count}"
        )
    k, k_w, c_in, c_out = rhs.shape
    if k != k_w or lhs.ndim != 4:
        raise ValueError(
            f"patch_conv needs a square [K, K, C_in, C_out] kernel and a [B, H, W, C] input, "
            f"got {rhs.shape} and {lhs.shape}"
        )
    strides = tuple(window_strides)
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(lhs.shape[1:3], (k, k), strides, padding)
    pads = tuple(tuple(int(p) for p in pair) for pair in padding)
    patches = _patches(lhs, k, pads, strides)
    # One 2-D matmul over every output pixel (see flat_dot_general: a matmul over
    # [B, H', W', K] makes XLA CPU transpose the whole output gradient, a large share of
    # a DreamerV3 step).
    dims = (((patches.ndim - 1,), (0,)), ((), ()))
    return flat_dot_general(patches, rhs.reshape(k * k * c_in, c_out), dims, precision)


class Conv(nn.Conv):
    """flax's `nn.Conv` computed by `patch_conv`: the same parameters (names, shapes,
    initialisers) and values, and the fast form inside a training loop. Every network's
    convolution uses it."""

    conv_general_dilated: Any = patch_conv


def space_to_depth(x: jax.Array) -> jax.Array:
    """`[B, H, W, C] -> [B, H/2, W/2, 4C]`; channel index `(2 r + s) * C + c` holds pixel
    `(2i + r, 2j + s)`."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h // 2, w // 2, 4 * c)


def depth_to_space(x: jax.Array) -> jax.Array:
    """The inverse of `space_to_depth`: `[B, H, W, 4C] -> [B, 2H, 2W, C]`."""
    b, h, w, c4 = x.shape
    c = c4 // 4
    x = x.reshape(b, h, w, 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, 2 * h, 2 * w, c)


def _s2d_taps(k: int) -> tuple[int, np.ndarray]:
    """For the s2d form of a K-wide stride-1 "same" convolution: the width `n` of the
    block convolution and, for every (output phase p, block offset e, input phase r), the
    original tap index `a` (or -1 when no tap lands there).

    Output pixel 2m + p reads input 2m + p + a for a in [-K//2, K//2]; that is block
    m + e, phase r with e = floor((p + a) / 2), r = (p + a) mod 2.
    """
    half = k // 2
    lo = (0 - half) // 2
    hi = (1 + half) // 2
    n = hi - lo + 1
    table = -np.ones((2, n, 2), np.int64)
    for p in range(2):
        for a in range(-half, half + 1):
            e, r = (p + a) // 2, (p + a) % 2
            table[p, e - lo, r] = a + half
    return n, table


def s2d_kernel(w: jax.Array) -> jax.Array:
    """The `[n, n, 4 C_in, 4 C_out]` kernel of the space-to-depth form (see `_s2d_taps`):
    input channel `(2 r + s) * C_in + i` is input phase (r, s) of channel i, output channel
    `(2 p + q) * C_out + o` is output phase (p, q) of channel o."""
    k, _, c_in, c_out = w.shape
    n, table = _s2d_taps(k)
    # select[e, r, p, a] = 1 when output phase p reads block offset e, input phase r
    # through tap a (one einsum places every tap; zeros where none lands).
    select = np.zeros((n, 2, 2, k), np.float32)
    for p in range(2):
        for e in range(n):
            for r in range(2):
                if table[p, e, r] >= 0:
                    select[e, r, p, table[p, e, r]] = 1.0
    select = jnp.asarray(select, w.dtype)
    kernel = jnp.einsum("erpa,fsqb,abio->efrsipqo", select, select, w)
    return kernel.reshape(n, n, 4 * c_in, 4 * c_out)


def subpixel_kernel(w: jax.Array) -> jax.Array:
    """The `[3, 3, C_in, 4 C_out]` kernel of the sub-pixel form of nearest 2x upsampling
    followed by a K-wide "same" convolution: output phase p reads low-resolution offset
    d = floor((p + a) / 2) for tap a, so each phase's 3x3 kernel sums the taps that share
    a d. Output channel `(2 p + q) * C_out + o` is phase (p, q) of channel o."""
    k, _, c_in, c_out = w.shape
    half = k // 2
    span = (1 + half) // 2  # offsets d in [-span, span]
    n = 2 * span + 1
    # merge[p, d, a] = 1 when tap a of output phase p reads offset d.
    merge = np.zeros((2, n, k), np.float32)
    for p in range(2):
        for a in range(-half, half + 1):
            merge[p, (p + a) // 2 + span, a + half] = 1.0
    merge = jnp.asarray(merge, w.dtype)
    kernel = jnp.einsum("pda,qeb,abio->deipqo", merge, merge, w)
    return kernel.reshape(n, n, c_in, 4 * c_out)


def conv_pool(x: jax.Array, w: jax.Array, impl: str = FAST_POOL) -> jax.Array:
    """A K x K stride-1 "same" convolution (no bias) then a 2x2 max-pool:
    `[B, H, W, C_in] -> [B, H/2, W/2, C_out]` (H and W even). Forms: module docstring."""
    k = _check(x, w, impl, POOL_IMPLS)
    if x.shape[1] % 2 or x.shape[2] % 2:
        raise ValueError(f"conv_pool needs an even height and width, got {x.shape[1:3]}")
    c_out = w.shape[-1]
    if impl in ("xla", "matmul"):
        half = k // 2
        y = _conv_same(x, w) if impl == "xla" else patch_conv(x, w, (1, 1), ((half, half),) * 2)
        b, h, wd, _ = y.shape
        return y.reshape(b, h // 2, 2, wd // 2, 2, c_out).max(axis=(2, 4))
    n, _ = _s2d_taps(k)
    lo = -((0 - k // 2) // 2)  # blocks of padding before (the most negative offset)
    pad = (lo, n - 1 - lo)
    xs = space_to_depth(x)
    ws = s2d_kernel(w)
    if impl == "s2d":
        y = jax.lax.conv_general_dilated(xs, ws, (1, 1), (pad, pad), dimension_numbers=_DIMS)
    else:
        y = patch_conv(xs, ws, (1, 1), (pad, pad))
    return _max_of_phases(y)


def _max_of_phases(y: jax.Array) -> jax.Array:
    """`[..., 4 C] -> [..., C]`: the max over the four channel groups (the 2x2 max-pool of
    the s2d forms), as pairwise `maximum`s. `reduce_max` over an axis computes the same
    values, but its derivative (equality masks, tie counts, a division) is many times
    dearer on XLA CPU; `maximum`'s is one select per element."""
    c = y.shape[-1] // 4
    a, b, d, e = (y[..., i * c : (i + 1) * c] for i in range(4))
    return jnp.maximum(jnp.maximum(a, b), jnp.maximum(d, e))


def upsample_conv(x: jax.Array, w: jax.Array, impl: str = FAST_UPSAMPLE) -> jax.Array:
    """Nearest-neighbour 2x upsampling then a K x K stride-1 "same" convolution (no bias):
    `[B, H, W, C_in] -> [B, 2H, 2W, C_out]`. Forms: module docstring."""
    _check(x, w, impl, UPSAMPLE_IMPLS)
    if impl == "xla":
        up = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        return _conv_same(up, w)
    ws = subpixel_kernel(w)
    span = ws.shape[0] // 2
    if impl == "subpixel":
        y = jax.lax.conv_general_dilated(
            x, ws, (1, 1), ((span, span), (span, span)), dimension_numbers=_DIMS
        )
    else:
        y = patch_conv(x, ws, (1, 1), ((span, span),) * 2)
    return depth_to_space(y)
