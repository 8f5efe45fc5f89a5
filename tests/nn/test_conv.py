"""Every form of `jaxrl.nn.conv`'s stages equals the plain convolution: values and the
gradients with respect to the input and the kernel."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.nn import conv

# (batch, height, width, in channels, out channels, kernel): DreamerV3's first stage
# at a small batch, an odd channel count, and the other odd kernel widths.
SHAPES = [(2, 16, 16, 3, 8, 5), (1, 8, 6, 5, 3, 3), (2, 4, 4, 2, 2, 1), (1, 8, 8, 2, 3, 7)]


def _inputs(shape, out_hw):
    b, h, w, c_in, c_out, k = shape
    kx, kw, kc = jax.random.split(jax.random.key(sum(shape)), 3)
    x = jax.random.normal(kx, (b, h, w, c_in))
    weight = jax.random.normal(kw, (k, k, c_in, c_out))
    cot = jax.random.normal(kc, (b, *out_hw, c_out))
    return x, weight, cot


def _value_and_grads(fn, x, weight, cot):
    def loss(x, weight):
        return jnp.sum(fn(x, weight) * cot)

    out = jax.jit(fn)(x, weight)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, weight)
    return out, grads


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("impl", conv.POOL_IMPLS[1:])
def test_conv_pool_forms_equal_the_plain_convolution(shape, impl):
    b, h, w = shape[:3]
    x, weight, cot = _inputs(shape, (h // 2, w // 2))
    plain = _value_and_grads(lambda x, k: conv.conv_pool(x, k, "xla"), x, weight, cot)
    form = _value_and_grads(lambda x, k: conv.conv_pool(x, k, impl), x, weight, cot)
    assert form[0].shape == (b, h // 2, w // 2, shape[4])
    np.testing.assert_allclose(form[0], plain[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(form[1][0], plain[1][0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(form[1][1], plain[1][1], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("impl", conv.UPSAMPLE_IMPLS[1:])
def test_upsample_conv_forms_equal_the_plain_convolution(shape, impl):
    b, h, w = shape[:3]
    x, weight, cot = _inputs(shape, (2 * h, 2 * w))
    plain = _value_and_grads(lambda x, k: conv.upsample_conv(x, k, "xla"), x, weight, cot)
    form = _value_and_grads(lambda x, k: conv.upsample_conv(x, k, impl), x, weight, cot)
    assert form[0].shape == (b, 2 * h, 2 * w, shape[4])
    np.testing.assert_allclose(form[0], plain[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(form[1][0], plain[1][0], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(form[1][1], plain[1][1], rtol=1e-4, atol=1e-3)


def test_plain_forms_match_a_numpy_convolution():
    """The reference itself: conv + pool and upsample + conv against a direct NumPy loop."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 4, 4, 2)).astype(np.float32)
    w = rng.normal(size=(3, 3, 2, 3)).astype(np.float32)

    def same_conv(img):  # [H, W, C] -> [H, W, C_out], zero padding
        h, wd, _ = img.shape
        padded = np.pad(img, ((1, 1), (1, 1), (0, 0)))
        out = np.zeros((h, wd, 3), np.float32)
        for i in range(h):
            for j in range(wd):
                out[i, j] = np.einsum("abc,abco->o", padded[i : i + 3, j : j + 3], w)
        return out

    full = same_conv(x[0])
    pooled = full.reshape(2, 2, 2, 2, 3).max(axis=(1, 3))
    np.testing.assert_allclose(conv.conv_pool(x, w, "xla")[0], pooled, rtol=1e-5, atol=1e-5)
    up = x[0].repeat(2, axis=0).repeat(2, axis=1)
    np.testing.assert_allclose(conv.upsample_conv(x, w, "xla")[0], same_conv(up), atol=1e-4)


def test_space_to_depth_round_trips():
    x = jnp.arange(2 * 4 * 6 * 3, dtype=jnp.float32).reshape(2, 4, 6, 3)
    s = conv.space_to_depth(x)
    assert s.shape == (2, 2, 3, 12)
    # channel (2r + s) * C + c of block (i, j) is pixel (2i + r, 2j + s)
    assert s[1, 1, 2, (2 * 1 + 0) * 3 + 2] == x[1, 3, 4, 2]
    np.testing.assert_array_equal(conv.depth_to_space(s), x)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "impl", "match"),
    [
        ((1, 8, 8, 3), (5, 5, 3, 4), "fft", "impl must be one of"),
        ((1, 8, 8, 3), (4, 4, 3, 4), "xla", "K odd"),
        ((1, 8, 8, 2), (5, 5, 3, 4), "xla", "channels"),
        ((1, 7, 8, 3), (5, 5, 3, 4), "s2d", "even height and width"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(x_shape, w_shape, impl, match):
    with pytest.raises(ValueError, match=match):
        conv.conv_pool(jnp.zeros(x_shape), jnp.zeros(w_shape), impl)


# (batch, height, width, in channels, out channels, kernel, stride, padding): MinAtar's
# Dreamer encoder (3x3 "same", stride 1 then 2), DQN/PQN's 3x3 "valid", odd sizes, and
# explicit asymmetric padding.
PATCH_CASES = [
    (2, 10, 10, 4, 16, 3, 1, "SAME"),
    (2, 10, 10, 16, 8, 3, 2, "SAME"),
    (3, 10, 10, 4, 16, 3, 1, "VALID"),
    (1, 9, 7, 3, 5, 3, 2, "VALID"),
    (1, 8, 8, 2, 3, 5, 2, ((2, 1), (0, 3))),
    (2, 6, 6, 3, 4, 1, 1, "SAME"),
]


@pytest.mark.parametrize("case", PATCH_CASES, ids=str)
def test_patch_conv_equals_lax_conv_in_values_and_gradients(case):
    b, h, w, c_in, c_out, k, stride, padding = case
    kx, kw = jax.random.split(jax.random.key(h * w + k + stride))
    x = jax.random.normal(kx, (b, h, w, c_in))
    weight = jax.random.normal(kw, (k, k, c_in, c_out))
    dims = ("NHWC", "HWIO", "NHWC")

    def plain(x, weight):
        return jax.lax.conv_general_dilated(
            x, weight, (stride, stride), padding, dimension_numbers=dims
        )

    def form(x, weight):
        return conv.patch_conv(x, weight, (stride, stride), padding, dimension_numbers=dims)

    out_shape = jax.eval_shape(plain, x, weight).shape
    cot = jax.random.normal(jax.random.key(7), out_shape)
    expected = _value_and_grads(plain, x, weight, cot)
    got = _value_and_grads(form, x, weight, cot)
    assert got[0].shape == out_shape
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1][0], expected[1][0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1][1], expected[1][1], rtol=1e-4, atol=1e-3)


def test_patch_conv_is_a_drop_in_for_flax_conv():
    """Same parameter tree and the same outputs as flax's default convolution."""
    import flax.linen as nn

    x = jax.random.normal(jax.random.key(0), (2, 10, 10, 4))
    plain = nn.Conv(8, (3, 3), strides=2)
    form = nn.Conv(8, (3, 3), strides=2, conv_general_dilated=conv.patch_conv)
    params = plain.init(jax.random.key(1), x)
    assert jax.tree.structure(params) == jax.tree.structure(form.init(jax.random.key(1), x))
    np.testing.assert_allclose(form.apply(params, x), plain.apply(params, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rhs_dilation": (2, 2)}, "rhs_dilation"),
        ({"lhs_dilation": (2, 2)}, "lhs_dilation"),
        ({"feature_group_count": 2}, "feature_group_count"),
        ({"dimension_numbers": ("NCHW", "OIHW", "NCHW")}, "NHWC"),
    ],
)
def test_patch_conv_rejects_what_it_does_not_compute(kwargs, field):
    x = jnp.zeros((1, 6, 6, 4))
    weight = jnp.zeros((3, 3, 4, 4))
    with pytest.raises(ValueError, match=field):
        conv.patch_conv(x, weight, (1, 1), "SAME", **kwargs)


def test_conv_layer_is_flax_conv_computed_by_patch_conv():
    """`conv.Conv`: the parameters flax's `nn.Conv` would create (same names under a
    parent, same initial values) and its outputs."""
    import flax.linen as nn

    x = jax.random.normal(jax.random.key(0), (2, 10, 10, 4))
    plain, layer = nn.Conv(8, (3, 3), padding="VALID"), conv.Conv(8, (3, 3), padding="VALID")
    params = plain.init(jax.random.key(1), x)
    for expected, got in zip(
        jax.tree.leaves(params), jax.tree.leaves(layer.init(jax.random.key(1), x)), strict=True
    ):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_allclose(layer.apply(params, x), plain.apply(params, x), rtol=1e-5, atol=1e-5)

    class Parent(nn.Module):
        @nn.compact
        def __call__(self, x):
            return conv.Conv(4, (3, 3))(x)

    assert list(Parent().init(jax.random.key(0), x)["params"]) == ["Conv_0"]
