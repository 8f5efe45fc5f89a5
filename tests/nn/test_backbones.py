"""World-model sequence backbones (jaxrl/nn/backbones): the parallel form equals the
step form (outputs and carries, from a non-initial carry, with resets), resets
isolate episodes, jit and vmap work, the transformer's window bounds what it sees
and the SSM is stable at init."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.nn import backbones
from jaxrl.nn.backbones import make, scan_steps
from jaxrl.nn.backbones.ssm import R_MAX, R_MIN

D_IN, HIDDEN, B, T, WINDOW = 5, 16, 4, 12, 5
OPTIONS = {
    "gru": {},
    "transformer": {"window": WINDOW, "num_heads": 4},
    "ssm": {"state_size": 8},
}
NAMES = sorted(OPTIONS)
TOL = {"rtol": 1e-5, "atol": 1e-5}

# Everything runs jitted with the backbone as a static argument (it is hashable static
# config), so each (backbone, shapes) pair compiles once per test process.
SEQUENCE = jax.jit(lambda bb, *args: bb.sequence(*args), static_argnums=0)
STEP = jax.jit(lambda bb, *args: bb.step(*args), static_argnums=0)
SCAN = jax.jit(scan_steps, static_argnums=0)
INITIAL = jax.jit(lambda bb: bb.initial_carry(B), static_argnums=0)
# Test-side array work is numpy: every distinct eager jax op would compile on its own.


def _np(tree):
    return jax.tree.map(np.asarray, tree)


def _backbone(name, **overrides):
    return make(name, D_IN, HIDDEN, **{**OPTIONS[name], **overrides})


@functools.cache
def _params(backbone):
    return jax.jit(backbone.init)(jax.random.key(0))


def _inputs(seed):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(B, T, D_IN)).astype(np.float32)
    resets = np.zeros((B, T), bool)
    resets[1, 0] = True  # row 0: no reset (continues the carry); row 1: discards it at once
    for row in range(2, B):
        resets[row, rng.choice(np.arange(1, T), size=2, replace=False)] = True
    return xs, resets


@functools.cache
def _warm_carry(backbone):
    """A non-initial carry: the end of a previous sequence (row 3 reset 2 steps before
    its end, so the transformer's cache is only partly valid there)."""
    xs, _ = _inputs(99)
    resets = np.zeros((B, T), bool)
    resets[3, T - 2] = True
    carries, _ = SEQUENCE(backbone, _params(backbone), INITIAL(backbone), xs, resets)
    return jax.tree.map(lambda leaf: leaf[:, -1], _np(carries))


def _assert_trees_close(a, b, **tol):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **(tol or TOL))


@pytest.mark.parametrize("name", NAMES)
def test_interface_shapes(name):
    backbone = _backbone(name)
    assert backbone.input_size == D_IN and backbone.hidden_size == HIDDEN
    assert hash(backbone) == hash(_backbone(name)) and backbone == _backbone(name)
    params = jax.eval_shape(backbone.init, jax.random.key(0))
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(params))
    carry = jax.eval_shape(lambda: backbone.initial_carry(B))
    assert all(leaf.shape[0] == B for leaf in jax.tree.leaves(carry))
    x, reset = jax.ShapeDtypeStruct((B, D_IN), jnp.float32), jax.ShapeDtypeStruct((B,), bool)
    new_carry, h = jax.eval_shape(backbone.step, params, carry, x, reset)
    assert (h.shape, h.dtype) == ((B, HIDDEN), jnp.float32)
    assert new_carry == carry  # same structure, shapes and dtypes
    xs = jax.ShapeDtypeStruct((B, T, D_IN), jnp.float32)
    resets = jax.ShapeDtypeStruct((B, T), bool)
    carries, hs = jax.eval_shape(backbone.sequence, params, carry, xs, resets)
    assert (hs.shape, hs.dtype) == ((B, T, HIDDEN), jnp.float32)
    assert carries == jax.tree.map(
        lambda c: jax.ShapeDtypeStruct((B, T, *c.shape[1:]), c.dtype), carry
    )


@pytest.mark.parametrize("name", NAMES)
def test_sequence_equals_scanned_step_from_a_warm_carry(name):
    backbone = _backbone(name)
    params, carry = _params(backbone), _warm_carry(backbone)
    assert any(np.abs(np.asarray(leaf)).max() > 0 for leaf in jax.tree.leaves(carry))
    xs, resets = _inputs(2)
    parallel = _np(SEQUENCE(backbone, params, carry, xs, resets))
    stepped = _np(SCAN(backbone, params, carry, xs, resets))
    _assert_trees_close(parallel, stepped)
    # Row 0 has no reset: the carry's history matters (a continuation, not a fresh start).
    _, fresh = SEQUENCE(backbone, params, INITIAL(backbone), xs, resets)
    assert np.abs(parallel[1][0, 0] - np.asarray(fresh)[0, 0]).max() > 1e-4

    # The carries after every step start imagination: flatten [B * T] and call step.
    carries, hs = parallel
    flat = jax.tree.map(lambda leaf: leaf[:, :-1].reshape(-1, *leaf.shape[2:]), carries)
    _, h_next = STEP(backbone, params, flat, xs[:, 1:].reshape(-1, D_IN), resets[:, 1:].ravel())
    np.testing.assert_allclose(np.reshape(h_next, (B, T - 1, HIDDEN)), hs[:, 1:], **TOL)


@pytest.mark.parametrize("name", NAMES)
def test_reset_discards_the_past(name):
    backbone = _backbone(name)
    params, carry = _params(backbone), _warm_carry(backbone)
    xs, _ = _inputs(6)
    starts = np.array([0, 3, 6, 9])
    resets = np.arange(T)[None, :] == starts[:, None]
    _, hs = _np(SEQUENCE(backbone, params, carry, xs, resets))
    before = np.arange(T)[None, :, None] < starts[:, None, None]
    noise = np.random.default_rng(7).normal(size=xs.shape).astype(np.float32)
    other_carry = jax.tree.map(lambda leaf: leaf + np.float32(1), carry)
    _, hs2 = _np(SEQUENCE(backbone, params, other_carry, np.where(before, noise, xs), resets))
    after = np.arange(T)[None, :] >= starts[:, None]
    np.testing.assert_allclose(hs2[after], hs[after], atol=1e-6)
    assert np.abs(hs2[~after] - hs[~after]).min() > 0
    # Step form: a reset step ignores its carry entirely.
    x = xs[:, 0]
    _, h_reset = STEP(backbone, params, other_carry, x, np.ones((B,), bool))
    _, h_fresh = STEP(backbone, params, INITIAL(backbone), x, np.zeros((B,), bool))
    np.testing.assert_allclose(h_reset, h_fresh, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_vmap_over_agents(name):
    backbone = _backbone(name)
    agents = 2
    keys = jax.random.split(jax.random.key(8), agents)
    assert jax.eval_shape(jax.vmap(backbone.init), keys) == jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct((agents, *leaf.shape), leaf.dtype), _params(backbone)
    )
    # Two different agents (a second init would cost another compile of the initialisers).
    params = jax.tree.map(lambda leaf: np.stack([leaf, 0.8 * leaf]), _np(_params(backbone)))
    carry = jax.tree.map(lambda leaf: np.stack([leaf, leaf + 0.5]), _warm_carry(backbone))
    xs, resets = _inputs(9)
    xs, resets = np.stack([xs, -xs]), np.stack([resets, resets[:, ::-1]])

    @jax.jit
    def run(params, carry, xs, resets):
        carries, hs = jax.vmap(backbone.sequence)(params, carry, xs, resets)
        last = jax.tree.map(lambda leaf: leaf[:, :, -1], carries)
        return (carries, hs), jax.vmap(backbone.step)(params, last, xs[:, :, 0], resets[:, :, 0])

    batched = _np(run(params, carry, xs, resets))
    for a in range(agents):
        p, c = jax.tree.map(lambda leaf, a=a: leaf[a], (params, carry))
        ref_carries, ref_hs = _np(SEQUENCE(backbone, p, c, xs[a], resets[a]))
        last = jax.tree.map(lambda leaf: leaf[:, -1], ref_carries)
        ref = ((ref_carries, ref_hs), STEP(backbone, p, last, xs[a, :, 0], resets[a, :, 0]))
        _assert_trees_close(jax.tree.map(lambda leaf, a=a: leaf[a], batched), ref)
    assert not np.allclose(batched[0][1][0], batched[0][1][1])


def test_make_rejects_unknown_names_and_options():
    with pytest.raises(ValueError, match=r"backbone.*\['gru', 'ssm', 'transformer'\]"):
        make("lstm", D_IN, HIDDEN)
    with pytest.raises(ValueError, match="num_heads"):
        make("gru", D_IN, HIDDEN, num_heads=4)
    with pytest.raises(ValueError, match="num_heads"):
        make("transformer", D_IN, HIDDEN, num_heads=3)
    with pytest.raises(ValueError, match="hidden_size"):
        make("ssm", D_IN, 0)
    assert set(backbones.BACKBONES) == {"gru", "transformer", "ssm"}


@pytest.mark.parametrize("num_layers", [1, 2])
def test_transformer_sees_only_its_window(num_layers):
    """One layer sees inputs up to window-1 steps back; a layer attends to the cached
    outputs of the layer below, so L layers see L * (window - 1) steps back."""
    backbone, t0 = _backbone("transformer", num_layers=num_layers), 1
    # The one-layer model's parameters are the two-layer model's minus layer 1 (saves an
    # init compile); `apply` fails if a parameter is missing.
    params = _params(_backbone("transformer"))
    if num_layers == 1:
        params = {k: v for k, v in params.items() if not k.endswith("_1")}
    xs, _ = _inputs(12)
    resets = np.zeros((B, T), bool)
    _, hs = SEQUENCE(backbone, params, INITIAL(backbone), xs, resets)
    xs2 = xs.copy()
    xs2[:, t0] += 1.0
    _, hs2 = SEQUENCE(backbone, params, INITIAL(backbone), xs2, resets)
    reach = num_layers * (WINDOW - 1)
    changed = np.abs(np.asarray(hs2) - np.asarray(hs)).max(axis=(0, 2))
    assert (changed[t0 : t0 + reach + 1] > 1e-4).all()
    assert (changed[t0 + reach + 1 :] == 0).all() and (changed[:t0] == 0).all()


def test_ssm_is_stable_at_init():
    backbone = _backbone("ssm")
    eig = np.abs(np.asarray(jax.jit(backbone.eigenvalues)(_params(backbone))))
    assert eig.shape == (backbone.num_layers, backbone.state_size)
    assert (eig < 1).all() and (eig >= R_MIN - 1e-6).all() and (eig <= R_MAX + 1e-6).all()
