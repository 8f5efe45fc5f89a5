"""DreamerV3 robustness tricks and lambda-returns against values computed by hand.

Each test traces its computations into one `jax.jit` call: compiling a handful of
small programs is much cheaper than dispatching (and compiling) op by op.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algorithms.dreamer import tricks
from jaxrl.returns import gae, lambda_returns

E = math.e


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# --------------------------------------------------------------------------- symlog / symexp


def test_symlog_symexp_hand_values_and_round_trip():
    hand = np.array([0.0, 1.0, -1.0, E - 1.0, -(E - 1.0)], np.float32)
    hand_symlog = [0.0, math.log(2.0), -math.log(2.0), 1.0, -1.0]
    mags = np.logspace(-6, 6, 49)
    wide = np.concatenate([-mags[::-1], [0.0], mags]).astype(np.float32)
    ys = np.linspace(-20.0, 20.0, 81, dtype=np.float32)

    @jax.jit
    def run(hand, wide, ys):
        return (
            tricks.symlog(hand),
            tricks.symexp(jnp.asarray(hand_symlog, jnp.float32)),
            tricks.symexp(tricks.symlog(wide)),
            tricks.symlog(tricks.symexp(ys)),
        )

    sl, se, wide_back, ys_back = run(hand, wide, ys)
    np.testing.assert_allclose(sl, hand_symlog, rtol=1e-6, atol=0)
    np.testing.assert_allclose(se, hand, rtol=1e-6, atol=0)
    assert float(sl[0]) == 0.0 and float(se[0]) == 0.0
    np.testing.assert_allclose(wide_back, wide, rtol=2e-6, atol=0)
    np.testing.assert_allclose(ys_back, ys, rtol=1e-6, atol=1e-6)


def test_symlog_symexp_derivatives_including_zero():
    # d/dx symlog = 1 / (1 + |x|), d/dx symexp = exp(|x|): both 1 at the origin.
    x = np.array([[0.0, 1.0, -3.0], [0.5, -2.0, 7.0]], np.float32)
    grads = jax.jit(
        lambda x: tuple(jax.vmap(jax.vmap(jax.grad(f)))(x) for f in (tricks.symlog, tricks.symexp))
    )
    d_symlog, d_symexp = (np.asarray(g) for g in grads(x))
    assert d_symlog[0, 0] == 1.0 and d_symexp[0, 0] == 1.0
    np.testing.assert_allclose(d_symlog, 1.0 / (1.0 + np.abs(x)), rtol=1e-6)
    np.testing.assert_allclose(d_symexp, np.exp(np.abs(x)), rtol=1e-6)


# --------------------------------------------------------------------------- two-hot


def test_twohot_bins_default_and_symmetry():
    bins = tricks.twohot_bins()
    assert bins.shape == (255,) and bins.dtype == jnp.float32
    bins = np.asarray(bins)
    assert bins[0] == -20.0 and bins[-1] == 20.0 and bins[127] == 0.0
    np.testing.assert_array_equal(bins, -bins[::-1])
    np.testing.assert_allclose(bins, np.linspace(-20.0, 20.0, 255), rtol=0, atol=2e-6)
    np.testing.assert_allclose(tricks.twohot_bins(5, -1.0, 3.0), [-1.0, 0.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "kwargs,name",
    [({"num_bins": 1}, "num_bins"), ({"num_bins": 2.5}, "num_bins"), ({"high": -20.0}, "low")],
)
def test_twohot_bins_validation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        tricks.twohot_bins(**kwargs)


def test_twohot_encode_hand_computed():
    bins = jnp.array([-1.0, 0.0, 1.0])
    cases = [
        (0.25, [0.0, 0.75, 0.25]),  # between two bins: linear interpolation
        (-0.5, [0.5, 0.5, 0.0]),
        (0.0, [0.0, 1.0, 0.0]),  # exactly on a bin
        (1.0, [0.0, 0.0, 1.0]),  # exactly on the last bin
        (-1.0, [1.0, 0.0, 0.0]),  # exactly on the first bin
        (5.0, [0.0, 0.0, 1.0]),  # beyond the ends: clipped to the outermost bin
        (-3.0, [1.0, 0.0, 0.0]),
    ]
    y = jnp.array([c[0] for c in cases])
    enc = jax.jit(tricks.twohot_encode)(y, bins)
    np.testing.assert_allclose(enc, [c[1] for c in cases], atol=1e-7)


def test_twohot_encode_batched_uneven_bins():
    bins = jnp.array([-2.0, 0.0, 1.0, 5.0])
    y = jnp.array([[3.0, -1.5], [1.0, 9.0]])
    enc = np.asarray(jax.jit(tricks.twohot_encode)(y, bins))
    assert enc.shape == (2, 2, 4)
    np.testing.assert_allclose(enc[0, 0], [0.0, 0.0, 0.5, 0.5])  # (5 - 3) / 4 on bin 1
    np.testing.assert_allclose(enc[0, 1], [0.75, 0.25, 0.0, 0.0])
    np.testing.assert_allclose(enc[1, 0], [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(enc[1, 1], [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(enc.sum(-1), 1.0, rtol=1e-6)
    # Inside the range the encoding's mean is the value itself.
    np.testing.assert_allclose((enc * bins).sum(-1), np.clip(y, -2.0, 5.0), rtol=1e-6)


def test_twohot_mean_recovers_symexp_of_encoded_value():
    bins = tricks.twohot_bins()
    y = jnp.array([[-13.7, -0.5, 0.0], [0.123, 3.3, 10.0]])
    even = jnp.array([-1.0, -0.5, 0.5, 1.0])
    even_probs = jnp.array([0.1, 0.2, 0.3, 0.4])

    @jax.jit
    def run(y):
        logits = jnp.log(tricks.twohot_encode(y, bins))  # -inf off the two bins
        return (
            tricks.twohot_mean(logits, bins),
            tricks.symexp(y),
            tricks.twohot_mean(jnp.zeros(255), bins),
            tricks.twohot_mean(jnp.log(even_probs), even),
        )

    mean, expected, zero_init, even_mean = run(y)
    np.testing.assert_allclose(mean, expected, rtol=2e-5)
    # A zero-initialised head (uniform over symmetric bins) predicts exactly 0.
    assert float(zero_init) == 0.0
    # Even bin counts work too (no middle bin).
    expected_even = math.expm1(0.1 * -1 + 0.2 * -0.5 + 0.3 * 0.5 + 0.4 * 1.0)
    assert float(even_mean) == pytest.approx(expected_even, rel=1e-6)


def test_twohot_loss_hand_cross_entropy_and_gradients():
    bins = jnp.array([-1.0, 0.0, 1.0])
    logits = jnp.array([0.1, 0.5, -0.3])
    log_p = _log_softmax([0.1, 0.5, -0.3])
    target = jnp.float32(math.expm1(0.25))  # symlog(target) = 0.25 -> weights [0, .75, .25]

    @jax.jit
    def run(logits, target):
        loss, (d_logits, d_target) = jax.value_and_grad(tricks.twohot_loss, argnums=(0, 1))(
            logits, target, bins
        )
        return loss, d_logits, d_target, tricks.twohot_loss(logits, target * 0 + 100.0, bins)

    loss, d_logits, d_target, far = run(logits, target)
    assert float(loss) == pytest.approx(-(0.75 * log_p[1] + 0.25 * log_p[2]), rel=1e-6)
    # Beyond the bins: all weight on the last one.
    assert float(far) == pytest.approx(-log_p[2], rel=1e-6)
    # No gradient into the target; the logits get softmax - twohot.
    assert float(d_target) == 0.0
    np.testing.assert_allclose(d_logits, np.exp(log_p) - [0.0, 0.75, 0.25], rtol=1e-5, atol=1e-7)


def test_twohot_loss_batched_jit_vmap():
    bins = tricks.twohot_bins(41, -5.0, 5.0)
    logits = np.random.default_rng(0).normal(size=(3, 4, 41)).astype(np.float32)
    target = np.array([[-100.0, -1.0, 0.0, 2.5]] * 3, np.float32) * [[1.0], [2.0], [0.5]]

    @jax.jit
    def run(logits, target):
        mapped = jax.vmap(tricks.twohot_loss, in_axes=(0, 0, None))(logits, target, bins)
        return tricks.twohot_loss(logits, target, bins), mapped

    direct, mapped = run(logits, target)
    assert direct.shape == (3, 4)
    np.testing.assert_allclose(mapped, direct, rtol=1e-6)
    # Reference: bins 0.25 apart from -5; interpolate symlog(target), clipped to the range.
    pos = (np.clip(np.sign(target) * np.log1p(np.abs(target)), -5.0, 5.0) + 5.0) / 0.25
    lower = np.minimum(np.floor(pos).astype(int), 39)
    frac = pos - lower
    log_p = _log_softmax(logits)
    take = lambda idx: np.take_along_axis(log_p, idx[..., None], -1)[..., 0]  # noqa: E731
    expected = -((1.0 - frac) * take(lower) + frac * take(lower + 1))
    np.testing.assert_allclose(direct, expected, rtol=1e-5)
    assert jax.eval_shape(tricks.twohot_mean, logits, bins).shape == (3, 4)


# --------------------------------------------------------------------------- unimix


def test_unimix_hand_computed_k4_floor_and_mix_zero():
    probs = jnp.array([0.7, 0.2, 0.1, 0.0])
    logits = jnp.array([[100.0, -100.0, 0.0, 3.0], [-50.0, -50.0, 50.0, 0.0]])

    @jax.jit
    def run(probs, logits):
        return (
            jnp.exp(tricks.unimix_logits(jnp.log(probs), 0.01)),
            jnp.exp(tricks.unimix_logits(logits)),
            tricks.unimix_logits(logits, 0.0),
            jax.nn.log_softmax(logits),
            jnp.exp(tricks.unimix_logits(logits, 1.0)),
        )

    hand, mixed, unmixed, log_softmax, uniform = run(probs, logits)
    # 0.99 * p + 0.01 / 4
    np.testing.assert_allclose(hand, [0.6955, 0.2005, 0.1015, 0.0025], rtol=1e-6)
    assert float(hand.sum()) == pytest.approx(1.0, abs=1e-6)
    assert bool(np.all(mixed >= 0.01 / 4 * (1 - 1e-6)))
    np.testing.assert_allclose(mixed.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(unmixed, log_softmax)
    np.testing.assert_allclose(uniform, 0.25, rtol=1e-6)
    with pytest.raises(ValueError, match="mix"):
        tricks.unimix_logits(logits, 1.5)


# --------------------------------------------------------------------------- KL


def test_categorical_kl_against_numpy():
    rng = np.random.default_rng(1)
    # batch (2, 3), 4 latents of 5 classes
    lhs, rhs = rng.normal(scale=2.0, size=(2, 2, 3, 4, 5)).astype(np.float32)

    @jax.jit
    def run(lhs, rhs):
        kl = tricks.categorical_kl
        return kl(lhs, rhs), kl(lhs, lhs), kl(lhs, lhs + 7.0)

    kl, same, shifted = run(lhs, rhs)
    assert kl.shape == (2, 3)
    lp, lq = _log_softmax(lhs), _log_softmax(rhs)
    np.testing.assert_allclose(kl, (np.exp(lp) * (lp - lq)).sum((-2, -1)), rtol=1e-5)
    np.testing.assert_allclose(same, 0.0, atol=1e-6)
    # Logits or normalised log-probabilities: same distribution, zero KL.
    np.testing.assert_allclose(shifted, 0.0, atol=1e-5)


def test_categorical_kl_zero_probability_class():
    lhs = jnp.log(jnp.array([[0.5, 0.5, 0.0]]))
    rhs = jnp.log(jnp.array([[0.25, 0.25, 0.5]]))
    run = jax.jit(jax.value_and_grad(tricks.categorical_kl, argnums=(0, 1)))
    kl, grads = run(lhs, rhs)
    assert float(kl) == pytest.approx(math.log(2.0), rel=1e-6)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)


def test_kl_balance_free_nats_clamp():
    post = jnp.log(jnp.array([[[0.99, 0.01]]]))  # batch 1, 1 latent, 2 classes
    prior = jnp.log(jnp.array([[[0.01, 0.99]]]))
    run = jax.jit(
        lambda post, prior: (
            tricks.kl_balance(post, prior),
            tricks.kl_balance(post, prior, free_nats=5.0),
            tricks.kl_balance(post, post),
        )
    )
    (dyn, rep), (dyn5, rep5), (dyn0, rep0) = run(post, prior)
    kl = 0.98 * math.log(99.0)  # 0.99 ln 99 + 0.01 ln(1/99) = 4.503
    assert dyn.shape == rep.shape == (1,)
    assert float(dyn[0]) == pytest.approx(kl, rel=1e-5)
    assert float(rep[0]) == pytest.approx(kl, rel=1e-5)
    assert float(dyn5[0]) == 5.0 and float(rep5[0]) == 5.0  # below the free nats: clamped
    assert float(dyn0[0]) == 1.0 and float(rep0[0]) == 1.0  # KL = 0 -> 1 nat


def test_kl_balance_gradients_are_split():
    post, prior = np.random.default_rng(2).normal(scale=3.0, size=(2, 2, 4, 6)).astype(np.float32)

    @jax.jit
    def grads(post, prior, free_nats):
        def term(which):
            def loss(post, prior):
                return tricks.kl_balance(post, prior, free_nats)[which].sum()

            return jax.grad(loss, argnums=(0, 1))(post, prior)

        return term(0), term(1)

    (dyn_post, dyn_prior), (rep_post, rep_prior) = jax.device_get(grads(post, prior, 0.0))
    assert np.all(dyn_post == 0.0) and np.abs(dyn_prior).max() > 1e-3
    assert np.all(rep_prior == 0.0) and np.abs(rep_post).max() > 1e-3
    # Below the free nats neither term has a gradient.
    for g in jax.tree.leaves(grads(post, prior, 1e6)):
        assert np.all(np.asarray(g) == 0.0)


# --------------------------------------------------------------------------- return scale


def test_return_scale_hand_example():
    returns = jnp.arange(21.0)  # 5th percentile 1, 95th 19 (linear interpolation)

    @jax.jit
    def run(returns):
        init = tricks.init_return_scale()
        once = tricks.update_return_scale(init, returns, decay=0.5)
        twice = tricks.update_return_scale(once, returns, decay=0.5)
        slow = tricks.update_return_scale(init, returns)
        divisors = [
            tricks.return_scale_divisor(once),
            tricks.return_scale_divisor(slow),
            tricks.return_scale_divisor(slow, limit=3.0),
        ]
        return init, once, twice, slow, divisors

    init, once, twice, slow, divisors = jax.device_get(run(returns))
    assert init.low.dtype == np.float32 and init.low.shape == () and init.high == 0.0
    assert (float(once.low), float(once.high)) == pytest.approx((0.5, 9.5))
    assert (float(twice.low), float(twice.high)) == pytest.approx((0.75, 14.25))
    # Default decay 0.99 from zero: 0.01, 0.19; the range 0.18 is floored at 1.
    assert (float(slow.low), float(slow.high)) == pytest.approx((0.01, 0.19))
    assert [float(d) for d in divisors] == pytest.approx([9.0, 1.0, 3.0])


def test_return_scale_all_elements_pytree_no_gradient():
    returns = jnp.arange(20.0).reshape(4, 5)

    @jax.jit
    def run(scale, returns):
        def divisor(r):
            return tricks.return_scale_divisor(tricks.update_return_scale(scale, r))

        return tricks.update_return_scale(scale, returns, decay=0.0), jax.grad(divisor)(returns)

    scale, grad = run(tricks.init_return_scale(), returns * 1.0)
    assert isinstance(scale, tricks.ReturnScale) and len(jax.tree.leaves(scale)) == 2
    np.testing.assert_allclose([scale.low, scale.high], np.quantile(np.arange(20.0), [0.05, 0.95]))
    assert bool(jnp.all(grad == 0.0))


# --------------------------------------------------------------------------- lambda-returns


def test_lambda_returns_hand_computed_lambda_one_and_zero():
    reward = jnp.array([1.0, 2.0, 3.0])
    cut = jnp.array([0.9, 0.0, 0.9])  # the episode ends after step 1
    flat = jnp.full(3, 0.9)
    next_value = jnp.array([10.0, 20.0, 30.0])
    other_values = jnp.array([-50.0, 70.0, 30.0])

    @jax.jit
    def run(reward, next_value, other_values):
        return (
            lambda_returns(reward, cut, next_value, 0.95),
            lambda_returns(reward, flat, other_values, 1.0),
            lambda_returns(reward, flat, other_values, jnp.float32(0.0)),
        )

    mid_cut, mc, td = run(reward, next_value, other_values)
    # R_2 = 3 + 0.9 * 30 = 30; R_1 = 2 + 0 = 2; R_0 = 1 + 0.9 * (0.05 * 10 + 0.95 * 2) = 3.16
    np.testing.assert_allclose(mid_cut, [3.16, 2.0, 30.0], rtol=1e-6)
    # lam = 1: discounted Monte-Carlo return bootstrapped with the last value only:
    # R_0 = 1 + .9 * (2 + .9 * (3 + .9 * 30)) = 27.1 whatever the intermediate values.
    np.testing.assert_allclose(mc, [27.1, 29.0, 30.0], rtol=1e-6)
    # lam = 0: one-step TD targets r_t + discount_t * next_value_t.
    np.testing.assert_allclose(td, [1.0 - 45.0, 2.0 + 63.0, 3.0 + 27.0], rtol=1e-6)


def test_lambda_returns_batched_matches_gae_returns():
    reward, value = np.random.default_rng(3).normal(size=(2, 6, 3)).astype(np.float32)
    last_value = jnp.array([0.5, -1.0, 2.0])
    done = np.zeros((6, 3), bool)
    done[2, 1] = done[5, 0] = True
    gamma, lam = 0.9, 0.8

    @jax.jit
    def run(reward, value, done, last_value):
        _, expected = gae(reward, value, done, last_value, gamma, lam)
        next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
        discount = gamma * (1.0 - done.astype(jnp.float32))
        return lambda_returns(reward, discount, next_value, lam), expected

    out, expected = run(reward, value, done, last_value)
    assert out.shape == (6, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
