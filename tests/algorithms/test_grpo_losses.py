"""The LM RL objectives (`jaxrl.objectives`) against hand-computed values on small padded
batches."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import objectives as L
from jaxrl.config import ConfigError
from jaxrl.returns import gae


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


# ============================================================================ advantages
def test_grpo_advantages_hand_computed():
    # Group 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735.
    # Group 2: mean 0.75, deviations (.25, .25, .25, -.75), std sqrt(0.75 / 3) = 0.5.
    rewards = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    s1 = math.sqrt(1 / 3) + 1e-6
    s2 = 0.5 + 1e-6
    expected = [
        0.5 / s1,
        -0.5 / s1,
        -0.5 / s1,
        0.5 / s1,
        0.25 / s2,
        0.25 / s2,
        0.25 / s2,
        -0.75 / s2,
    ]
    close(L.grpo_advantages(rewards, 4), expected)


def test_dr_grpo_and_rloo_hand_computed():
    rewards = jnp.array([1.0, 2.0, 6.0, 0.0, 0.0, 3.0])
    close(L.dr_grpo_advantages(rewards, 3), [-2.0, -1.0, 3.0, -1.0, -1.0, 2.0])
    # Leave-one-out baselines: (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5; (0+3)/2, (0+3)/2, 0.
    close(L.rloo_advantages(rewards, 3), [1 - 4, 2 - 3.5, 6 - 1.5, -1.5, -1.5, 3.0])


def test_rloo_group_of_two_is_the_difference_to_the_other():
    close(L.rloo_advantages(jnp.array([1.0, 0.0, 3.0, 5.0]), 2), [1.0, -1.0, -2.0, 2.0])


@pytest.mark.parametrize("name", ["grpo_advantages", "dr_grpo_advantages", "rloo_advantages"])
def test_equal_rewards_give_exactly_zero_advantage(name):
    # In float32 mean([0.1] * 3) - 0.1 = 7e-9; divided by (std + 1e-6) that would be 0.007.
    rewards = jnp.array([0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 0.0, 1.0, 0.0])
    out = np.asarray(getattr(L, name)(rewards, 3))
    assert np.all(np.isfinite(out))
    assert np.all(out[:6] == 0.0)
    assert np.any(out[6:] != 0.0)


def test_group_size_one_and_bad_layout_are_config_errors():
    for fn in (L.grpo_advantages, L.dr_grpo_advantages, L.rloo_advantages):
        with pytest.raises(ConfigError, match="group_size"):
            fn(jnp.ones(4), 1)
        with pytest.raises(ConfigError, match="group_size"):
            fn(jnp.ones(6), 4)
    for name in ("grpo", "dr_grpo", "rloo"):
        with pytest.raises(ConfigError, match="group_size"):
            L.validate_advantage(name, 1)
    L.validate_advantage("reinforce_pp", 1)
    L.validate_advantage("gae", 1)
    with pytest.raises(ConfigError, match="advantage.*allowed|advantage='ppo'"):
        L.validate_advantage("ppo", 4)


def test_outcome_token_rewards_on_last_completion_token():
    mask = jnp.array([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    out = L.outcome_token_rewards(jnp.array([2.0, 3.0, 4.0]), mask)
    close(out, [[0, 0, 2, 0], [0, 0, 0, 3], [0, 0, 0, 0]])


def test_masked_gae_skips_holes_hand_computed():
    # Token 1 is masked (an environment token): token 0 bootstraps from token 2.
    r = jnp.array([[0.0, 5.0, 1.0]])  # the masked reward is ignored
    v = jnp.array([[0.5, 9.0, 0.8]])
    m = jnp.array([[1.0, 0.0, 1.0]])
    adv, ret = L.masked_gae(r, v, m, 0.9, 0.95)
    a2 = 1.0 - 0.8
    a0 = (0.0 + 0.9 * 0.8 - 0.5) + 0.9 * 0.95 * a2
    close(adv, [[a0, 0.0, a2]])
    close(ret, [[a0 + 0.5, 0.0, 1.0]])


def test_masked_gae_matches_shared_gae_on_contiguous_rows():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(3, 5)).astype(np.float32)
    v = rng.normal(size=(3, 5)).astype(np.float32)
    lengths = np.array([5, 3, 1])
    m = (np.arange(5)[None] < lengths[:, None]).astype(np.float32)
    adv, ret = L.masked_gae(r, v, m, 0.99, 0.9)
    for row, n in enumerate(lengths):
        done = np.zeros(n, bool)
        done[-1] = True
        ref_adv, ref_ret = gae(r[row, :n], v[row, :n], done, jnp.float32(0.0), 0.99, 0.9)
        close(adv[row, :n], ref_adv)
        close(ret[row, :n], ref_ret)
        assert np.all(np.asarray(adv[row, n:]) == 0.0)


def test_reinforce_pp_discounted_returns_whitened_over_tokens():
    r = jnp.array([[0.0, 1.0, 2.0, 0.0], [0.0, 0.0, 3.0, 0.0]])
    m = jnp.array([[1, 1, 1, 0], [0, 1, 1, 0]], jnp.float32)
    # gamma 0.5: row 0 returns (0 + .5 + .25 * 2, 1 + .5 * 2, 2) = (1, 2, 2); row 1 (1.5, 3).
    returns = np.array([1.0, 2.0, 2.0, 1.5, 3.0])
    expected = (returns - returns.mean()) / np.sqrt(returns.var() + 1e-8)
    out = np.asarray(L.reinforce_pp_advantages(r, m, gamma=0.5))
    close(out[0, :3], expected[:3])
    close(out[1, 1:3], expected[3:])
    assert out[0, 3] == 0.0 and out[1, 0] == 0.0 and out[1, 3] == 0.0


def test_compute_advantages_dispatch_broadcasts_and_masks():
    mask = jnp.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], jnp.float32)
    rewards = jnp.array([1.0, 0.0, 2.0, 2.0])
    token_rewards = L.outcome_token_rewards(rewards, mask)
    adv, ret = L.compute_advantages("dr_grpo", token_rewards, mask, group_size=2)
    close(adv, [[0.5, 0.5, 0], [-0.5, 0, 0], [0, 0, 0], [0, 0, 0]])
    close(ret, [[1, 1, 0], [0, 0, 0], [2, 2, 2], [2, 2, 0]])
    jitted = jax.jit(L.compute_advantages, static_argnames=("name", "group_size"))
    adv, _ = jitted("rloo", token_rewards, mask, group_size=2)
    close(adv, [[1, 1, 0], [-1, 0, 0], [0, 0, 0], [0, 0, 0]])
    with pytest.raises(ConfigError, match="values"):
        L.compute_advantages("gae", token_rewards, mask, group_size=2)
    with pytest.raises(ConfigError, match="advantage"):
        L.compute_advantages("vtrace", token_rewards, mask, group_size=2)
    with pytest.raises(ConfigError, match="group_size"):
        L.compute_advantages("grpo", token_rewards, mask, group_size=1)


def test_gae_dispatch_is_whitened_masked_gae():
    rng = np.random.default_rng(1)
    r, v = rng.normal(size=(2, 2, 4)).astype(np.float32)
    m = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    adv, ret = L.compute_advantages("gae", r, m, group_size=1, values=v, gamma=0.9, gae_lambda=0.8)
    raw, raw_ret = L.masked_gae(r, v, m, 0.9, 0.8)
    flat = np.asarray(raw)[m > 0]
    close(np.asarray(adv)[m > 0], (flat - flat.mean()) / np.sqrt(flat.var() + 1e-8), 1e-4)
    close(ret, raw_ret)


def test_zero_advantage_group_fraction():
    rewards = jnp.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    close(L.constant_reward_groups(rewards, 2), [True, False, True])
    assert float(L.zero_advantage_group_fraction(rewards, 2)) == pytest.approx(2 / 3)


# ========================================================================= policy losses
# Two rows, per-sequence advantages +1 and -1; row 0's last token is padding.
LOG_RATIO = np.array([[0.5, 0.1, -0.5, 0.0], [0.5, -0.5, 0.3, 0.0]], np.float32)
OLD = np.array([[-1.0, -2.0, -0.5, -1.0], [-0.3, -1.5, -2.0, -0.7]], np.float32)
MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
ADV = np.array([1.0, -1.0], np.float32)


def test_clipped_surrogate_hand_computed():
    logp = jnp.asarray(OLD + LOG_RATIO)
    loss, stats = L.policy_loss("clip", logp, OLD, ADV, MASK, eps_low=0.2, eps_high=0.28)
    e = math.exp
    # Row 0 (A = +1): -min(r, clip(r, .8, 1.28)) -> r = e^.5 clipped to 1.28; e^.1; e^-.5 kept.
    # Row 1 (A = -1): -min(-r, -clip(r)) = max(r, clip(r)) -> e^.5, .8 (clipped), e^.3, 1.
    close(loss, [[-1.28, -e(0.1), -e(-0.5), 0.0], [e(0.5), 0.8, e(0.3), 1.0]])
    assert float(stats["clip_fraction_high"]) == pytest.approx(1 / 7)  # row 0, token 0
    assert float(stats["clip_fraction_low"]) == pytest.approx(1 / 7)  # row 1, token 1
    ratios = np.exp(LOG_RATIO)[MASK > 0]
    assert float(stats["ratio_mean"]) == pytest.approx(ratios.mean(), rel=1e-6)
    lr = LOG_RATIO[MASK > 0]
    assert float(stats["approx_kl"]) == pytest.approx(np.mean(np.expm1(lr) - lr), rel=1e-5)
    # Clipped tokens get no gradient; the others d(-r A)/dlogp = -r A.
    grad = jax.grad(
        lambda lp: jnp.sum(L.policy_loss("clip", lp, OLD, ADV, MASK, eps_low=0.2, eps_high=0.28)[0])
    )(logp)
    close(grad, [[0.0, -e(0.1), -e(-0.5), 0.0], [e(0.5), 0.0, e(0.3), 1.0]])


def test_dual_clip_caps_negative_advantage_loss():
    logp = jnp.asarray(OLD + LOG_RATIO)
    loss, stats = L.policy_loss(
        "clip", logp, OLD, ADV, MASK, eps_low=0.2, eps_high=0.28, dual_clip_c=1.5
    )
    e = math.exp
    # Row 1, token 0: r = e^.5 = 1.65 > c = 1.5, so the loss e^.5 is capped at -c A = 1.5.
    close(loss[1], [1.5, 0.8, e(0.3), 1.0])
    close(loss[0], [-1.28, -e(0.1), -e(-0.5), 0.0])
    assert float(stats["dual_clip_fraction"]) == pytest.approx(1 / 7)


def test_gspo_sequence_ratio_and_gradient():
    # Row 0: mean log ratio over the mask (0.1 + 0.3) / 2 = 0.2 -> s = e^.2, clipped (A > 0).
    # Row 1: mean log ratio 0 -> s = 1, inside the range; A = 2.
    lr = np.array([[0.1, 0.3, 7.0], [1e-4, -1e-4, 0.0]], np.float32)
    old = np.array([[-1.0, -2.0, -3.0], [-0.5, -0.25, -1.0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 1, 0]], np.float32)
    adv = np.array([1.0, 2.0], np.float32)
    logp = jnp.asarray(old + lr)
    kw = dict(eps_low=3e-4, eps_high=4e-4)
    loss, stats = L.policy_loss("gspo", logp, old, adv, mask, **kw)
    close(loss, [[-1.0004, -1.0004, 0.0], [-2.0, -2.0, 0.0]])
    assert float(stats["clip_fraction_high"]) == pytest.approx(0.5)
    assert float(stats["ratio_mean"]) == pytest.approx((2 * math.exp(0.2) + 2) / 4, rel=1e-5)

    # With seq_mean_token_mean, the token form's gradient is that of GSPO's sequence
    # objective -A_i s_i (unclipped row 1): d/dlogp_t = -A s / |y|.
    def aggregated(lp):
        per_token, _ = L.policy_loss("gspo", lp, old, adv, mask, **kw)
        return L.aggregate_loss(per_token, mask, "seq_mean_token_mean", 2.0)

    def sequence_objective(lp):
        s = jnp.exp(jnp.sum((lp - old) * mask, axis=1) / 2)
        return -(2.0 * s[1]) / 2.0

    grad = jax.jit(jax.grad(aggregated))(logp)
    close(grad[1], jax.jit(jax.grad(sequence_objective))(logp)[1])
    close(grad[0], [0.0, 0.0, 0.0])  # a clipped sequence


def test_cispo_keeps_gradient_of_clipped_tokens():
    lr = np.array([[0.5, -0.5, 0.0]], np.float32)
    old = np.array([[-1.0, -2.0, -0.5]], np.float32)
    logp = jnp.asarray(old + lr)  # (-0.5, -2.5, -0.5)
    mask = np.ones((1, 3), np.float32)
    kw = dict(eps_low=1.0, eps_high=0.28)  # no lower bound, as MiniMax-M1
    loss, stats = L.policy_loss("cispo", logp, old, jnp.ones(1), mask, **kw)
    w = [1.28, math.exp(-0.5), 1.0]
    close(loss, [[-w[0] * -0.5, -w[1] * -2.5, -w[2] * -0.5]])
    assert float(stats["clip_fraction_high"]) == pytest.approx(1 / 3)
    assert float(stats["clip_fraction_low"]) == 0.0
    grad = jax.grad(
        lambda lp: jnp.sum(L.policy_loss("cispo", lp, old, jnp.ones(1), mask, **kw)[0])
    )(logp)
    close(grad, [[-w[0], -w[1], -w[2]]])  # the clipped token still learns, scaled by 1.28


def test_clip_ranges_and_names_are_validated():
    args = (jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.ones(1), jnp.ones((1, 2)))
    with pytest.raises(ConfigError, match="eps_high"):
        L.policy_loss("clip", *args, eps_low=0.28, eps_high=0.2)
    with pytest.raises(ConfigError, match="eps_high"):
        L.policy_loss("gspo", *args, eps_low=4e-4, eps_high=3e-4)
    with pytest.raises(ConfigError, match="eps_low"):
        L.validate_clip("clip", 1.0, 1.0)
    with pytest.raises(ConfigError, match="eps_low"):
        L.validate_clip("clip", 0.0, 0.2)
    with pytest.raises(ConfigError, match="eps_high"):
        L.validate_clip("cispo", 1.0, 0.0)
    L.validate_clip("cispo", 1.0, 0.28)  # a bound on a weight, not a trust region
    with pytest.raises(ConfigError, match="dual_clip_c"):
        L.validate_clip("clip", 0.2, 0.2, dual_clip_c=1.0)
    with pytest.raises(ConfigError, match="dual_clip_c"):
        L.policy_loss("cispo", *args, eps_low=0.2, eps_high=0.2, dual_clip_c=3.0)
    with pytest.raises(ConfigError, match="policy_loss"):
        L.policy_loss("ppo2", *args, eps_low=0.2, eps_high=0.2)


# =========================================================================== aggregation
def test_aggregation_modes_hand_computed():
    per_token = jnp.array([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    mask = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)  # row 2 fully masked

    def agg(mode, **kw):
        return float(L.aggregate_loss(per_token, mask, mode, L.loss_normaliser(mask, mode), **kw))

    assert float(L.loss_normaliser(mask, "token_mean")) == 4.0
    assert float(L.loss_normaliser(mask, "seq_mean_token_mean")) == 2.0
    assert agg("token_mean") == pytest.approx((6 + 4) / 4)
    assert agg("seq_mean_token_mean") == pytest.approx((6 / 3 + 4 / 1) / 2)
    assert agg("seq_mean_token_sum_norm", max_len=4) == pytest.approx((6 + 4) / 4 / 2)
    with pytest.raises(ConfigError, match="max_len"):
        agg("seq_mean_token_sum_norm")
    with pytest.raises(ConfigError, match="loss_agg"):
        agg("sum")
    empty = jnp.zeros((2, 3), bool)
    out = L.aggregate_loss(
        jnp.ones((2, 3)), empty, "token_mean", L.loss_normaliser(empty, "token_mean")
    )
    assert float(out) == 0.0


def _accumulation_batch():
    rng = np.random.default_rng(3)
    b, t = 8, 6
    old = rng.normal(-1.5, 0.5, size=(b, t)).astype(np.float32)
    logp = (old + rng.normal(0.0, 0.3, size=(b, t))).astype(np.float32)
    lengths = np.array([6, 1, 4, 0, 2, 5, 3, 6])  # unequal, with a fully masked row
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
    adv = rng.normal(size=b).astype(np.float32)
    return logp, old, adv, mask


@pytest.mark.parametrize("name", L.POLICY_LOSSES.names())
def test_one_minibatch_of_8_equals_4_accumulated_minibatches_of_2(name):
    logp, old, adv, mask = _accumulation_batch()
    eps_low = 1.0 if name == "cispo" else 0.2

    def loss_fn(lp, old, adv, mask, normalisers):
        per_token, _ = L.policy_loss(name, lp, old, adv, mask, eps_low=eps_low, eps_high=0.28)
        return {
            agg: L.aggregate_loss(per_token, mask, agg, normalisers[agg], max_len=6)
            for agg in L.LOSS_AGGREGATIONS
        }

    @jax.jit
    def losses_and_grads(lp, old, adv, mask, normalisers):
        values = loss_fn(lp, old, adv, mask, normalisers)
        grads = {
            agg: jax.grad(lambda x, a=agg: loss_fn(x, old, adv, mask, normalisers)[a])(lp)
            for agg in L.LOSS_AGGREGATIONS
        }
        return values, grads

    whole = {agg: L.loss_normaliser(mask, agg) for agg in L.LOSS_AGGREGATIONS}  # of the whole batch
    full_loss, full_grad = losses_and_grads(logp, old, adv, mask, whole)
    splits = [tuple(x[i : i + 2] for x in (logp, old, adv, mask)) for i in range(0, 8, 2)]
    parts = [losses_and_grads(*split, whole) for split in splits]
    for agg in L.LOSS_AGGREGATIONS:
        close(sum(p[0][agg] for p in parts), full_loss[agg])
        close(jnp.concatenate([p[1][agg] for p in parts]), full_grad[agg])
        assert float(jnp.abs(full_grad[agg]).sum()) > 0.0
    # The pitfall (verl #5625): each minibatch normalised by its own token count.
    own = [
        {agg: L.loss_normaliser(split[3], agg) for agg in L.LOSS_AGGREGATIONS} for split in splits
    ]
    naive = (
        sum(
            losses_and_grads(*split, n)[0]["token_mean"]
            for split, n in zip(splits, own, strict=True)
        )
        / 4
    )
    assert abs(float(naive) - float(full_loss["token_mean"])) > 1e-3


# =================================================================================== KL
def test_kl_estimators_hand_computed():
    logp, ref = jnp.array([[-1.0, -0.5]]), jnp.array([[-2.0, -0.5]])
    close(L.kl_estimate(logp, ref, "k1"), [[1.0, 0.0]])
    close(L.kl_estimate(logp, ref, "k2"), [[0.5, 0.0]])
    k3 = math.exp(-1.0) - 1.0 + 1.0  # r - 1 - log r with log r = -1
    close(L.kl_estimate(logp, ref, "k3"), [[k3, 0.0]])
    close(L.kl_estimate(logp, ref, "k3+"), [[k3, 0.0]])
    with pytest.raises(ConfigError, match="kl"):
        L.kl_estimate(logp, ref, "k4")


THETA = jnp.array([0.3, -1.2, 0.8, 0.0, -0.4])  # policy logits
REF = jax.nn.log_softmax(jnp.array([-0.5, 0.7, 0.2, -1.0, 0.4]))
OLD_POLICY = jax.nn.log_softmax(jnp.array([0.1, -0.9, 1.1, 0.2, -0.6]))


def _exact_reverse_kl(theta):
    logp = jax.nn.log_softmax(theta)
    return jnp.sum(jnp.exp(logp) * (logp - REF))


def _exact_forward_kl(theta):
    return jnp.sum(jnp.exp(REF) * (REF - jax.nn.log_softmax(theta)))


def _expected_gradient(kind, sampler=None):
    """E_{a ~ sampler}[grad loss(a)], exactly: sum_a sampler(a) grad loss(a) (no sampling)."""

    def weighted(theta):
        logp = jax.nn.log_softmax(theta)
        probs = jax.lax.stop_gradient(jnp.exp(logp if sampler is None else sampler))
        return jnp.sum(probs * L.kl_estimate(logp, REF, kind, old_logp=sampler))

    return jax.grad(weighted)(THETA)


def test_kl_loss_gradients_against_the_true_kl_gradient():
    true = jax.grad(_exact_reverse_kl)(THETA)
    assert float(jnp.abs(true).max()) > 0.1
    close(_expected_gradient("k2"), true)
    close(_expected_gradient("k3+"), true)
    close(_expected_gradient("k1"), jnp.zeros(5))  # E[grad log pi] = 0: no signal
    # k3's gradient descends the *forward* KL(ref || pi), not KL(pi || ref).
    close(_expected_gradient("k3"), jax.grad(_exact_forward_kl)(THETA))
    assert float(jnp.abs(_expected_gradient("k3") - true).max()) > 0.05


def test_kl_off_policy_importance_weight_keeps_value_and_gradient_unbiased():
    true = jax.grad(_exact_reverse_kl)(THETA)
    close(_expected_gradient("k3+", sampler=OLD_POLICY), true)
    close(_expected_gradient("k2", sampler=OLD_POLICY), true)
    logp = jax.nn.log_softmax(THETA)
    for kind in ("k1", "k3", "k3+"):  # unbiased values under the sampler's distribution
        value = jnp.sum(jnp.exp(OLD_POLICY) * L.kl_estimate(logp, REF, kind, old_logp=OLD_POLICY))
        close(value, _exact_reverse_kl(THETA))


def test_kl_in_reward_is_penalised_without_gradient():
    rewards = jnp.array([[0.0, 1.0, 0.0]])
    logp, ref = jnp.array([[-1.0, -0.5, -3.0]]), jnp.array([[-2.0, -1.0, -1.0]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    out = L.kl_penalised_rewards(rewards, logp, ref, mask, "k1", 0.1)
    close(out, [[-0.1, 1.0 - 0.05, 0.0]])
    grad = jax.grad(lambda lp: jnp.sum(L.kl_penalised_rewards(rewards, lp, ref, mask, "k3", 0.1)))(
        logp
    )
    close(grad, jnp.zeros((1, 3)))


# ============================================================================== entropy
def test_entropy_bonus_and_its_gradient():
    h = jnp.array([[0.5, 2.0]])
    close(L.entropy_bonus(h, 0.01), [[-0.005, -0.02]])
    close(jax.grad(lambda x: jnp.sum(L.entropy_bonus(x, 0.01)))(h), [[-0.01, -0.01]])


def test_high_entropy_mask_top_fraction_with_deterministic_ties():
    ent = jnp.array([[0.5, 0.9, 0.1, 0.9], [0.9, 0.3, 7.0, 0.2]])
    mask = jnp.array([[1, 1, 1, 1], [1, 1, 0, 1]], bool)  # 7 tokens; 7.0 is padding
    # rho 0.3: round(2.1) = 2 of the three tied 0.9s, the earliest positions first.
    close(L.high_entropy_mask(ent, mask, 0.3), [[0, 1, 0, 1], [0, 0, 0, 0]])
    # rho 0.5: round(3.5) = 4 -> the three 0.9s and the 0.5.
    close(L.high_entropy_mask(ent, mask, 0.5), [[1, 1, 0, 1], [1, 0, 0, 0]])
    close(L.high_entropy_mask(ent, mask, 0.01), [[0, 1, 0, 0], [0, 0, 0, 0]])  # at least one
    close(L.high_entropy_mask(ent, mask, 1.0), mask)
    jitted = jax.jit(L.high_entropy_mask)(ent, mask, jnp.float32(0.3))  # a traced rho
    close(jitted, [[0, 1, 0, 1], [0, 0, 0, 0]])
    assert not np.any(np.asarray(L.high_entropy_mask(ent, jnp.zeros_like(mask), 0.5)))
    for rho in (0.0, 1.5):
        with pytest.raises(ConfigError, match="rho"):
            L.high_entropy_mask(ent, mask, rho)


# ================================================================ DAPO overlong shaping
def test_overlong_penalty_dapo_eq13():
    lengths = jnp.array([10, 15, 16, 18, 20, 21])
    # L_max 20, L_cache 5: free up to 15, then (15 - |y|) / 5, and -1 past 20.
    close(L.overlong_penalty(lengths, 20, 5), [0.0, 0.0, -0.2, -0.6, -1.0, -1.0])
    close(L.overlong_penalty(lengths, 20, 5, penalty_factor=0.5), [0, 0, -0.1, -0.3, -0.5, -0.5])
    for cache_len in (0, 21, 2.5):
        with pytest.raises(ConfigError, match="cache_len"):
            L.overlong_penalty(lengths, 20, cache_len)
    with pytest.raises(ConfigError, match="max_len"):
        L.overlong_penalty(lengths, 0, 1)


# ============================================================================ GiGPO
def test_step_group_advantages_hand_computed():
    """Feng et al. 2025, eq. 7: within each anchor-state group, (G - mean) / (std + eps)
    with the unbiased std; a group of one, or unplayed turns, get 0."""
    returns = jnp.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.5, 0.0]])
    groups = jnp.array([[0, 1], [0, 1], [0, 2], [0, 3]])  # turn 1: rows 0, 1 share a state
    mask = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    out = L.step_group_advantages(returns, groups, mask)
    first = np.array([1.0, 0.0, 1.0, 0.5])
    std = first.std(ddof=1)
    expected = np.zeros((4, 2))
    expected[:, 0] = (first - first.mean()) / (std + 1e-6)
    expected[0, 1], expected[1, 1] = 0.5 / (np.sqrt(0.5) + 1e-6), -0.5 / (np.sqrt(0.5) + 1e-6)
    close(out, expected)  # rows 2 and 3's second turns: groups of one, or not played
    per_token = L.turn_token_advantages(out[:2], jnp.array([[0, 0, -1, 1], [-1, 1, 1, -1]]))
    close(per_token, [[out[0, 0], out[0, 0], 0.0, out[0, 1]], [0.0, out[1, 1], out[1, 1], 0.0]])
