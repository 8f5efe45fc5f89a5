"""DreamerV3's robustness tricks as small pure functions.

Reference: Hafner, Pasukonis, Ba and Lillicrap 2023, "Mastering Diverse Domains
through World Models" (DreamerV3), arXiv:2301.04104. The paper's equation numbers
changed between its versions, so the docstrings name the part of the method
("World Model Learning", "Critic Learning", "Actor Learning", "Robust
Predictions") and give an equation number only for arXiv v1 (eq. 5: the
dynamics and representation losses with free bits; eq. 7: the lambda-return).

Every function is pure `jax.numpy`, accepts arbitrary leading batch dimensions
(the distribution axes are the trailing ones) and is safe under `jit`, `vmap`
and `grad`. The lambda-return used by the actor-critic lives in
`jaxrl.returns.lambda_returns`.

Contents:

- `symlog` / `symexp`: the squashing used for vector inputs, decoder targets
  and the reward and critic heads ("Robust Predictions").
- `twohot_bins` / `twohot_encode` / `twohot_loss` / `twohot_mean`: discrete
  regression of rewards and values ("Robust Predictions", symexp twohot loss).
- `unimix_logits`: the 1% uniform mixture on categoricals ("World Model
  Learning"; the actor uses it too).
- `categorical_kl` / `kl_balance`: the world model's dynamics and
  representation losses with free bits ("World Model Learning", eq. 5).
- `ReturnScale`, `init_return_scale`, `update_return_scale`,
  `return_scale_divisor`: percentile return normalisation for the actor
  ("Actor Learning").
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------------------
# symlog / symexp ("Robust Predictions")
# ---------------------------------------------------------------------------


@jax.custom_jvp
def symlog(x: jax.Array) -> jax.Array:
    """Symmetric logarithm, ``symlog(x) = sign(x) * log(1 + |x|)``.

    DreamerV3, "Robust Predictions": compresses large magnitudes of either
    sign while staying close to the identity around zero. Its inverse is
    `symexp`.

    The derivative is defined as ``1 / (1 + |x|)`` everywhere, so it is 1 at
    zero (plain autodiff of ``sign(x) * log1p(|x|)`` would give 0 there).
    """
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


@symlog.defjvp
def _symlog_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return symlog(x), dx / (1.0 + jnp.abs(x))


@jax.custom_jvp
def symexp(x: jax.Array) -> jax.Array:
    """Symmetric exponential, ``symexp(x) = sign(x) * (exp(|x|) - 1)``.

    DreamerV3, "Robust Predictions": the inverse of `symlog`, used to map
    predictions made in symlog space back to raw values.

    The derivative is defined as ``exp(|x|)`` everywhere (1 at zero).
    """
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


@symexp.defjvp
def _symexp_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return symexp(x), dx * jnp.exp(jnp.abs(x))


# ---------------------------------------------------------------------------
# Two-hot discrete regression ("Robust Predictions", symexp twohot loss)
# ---------------------------------------------------------------------------


def twohot_bins(num_bins: int = 255, low: float = -20.0, high: float = 20.0) -> jax.Array:
    """Evenly spaced bin locations in symlog space, float32 of shape ``[num_bins]``.

    ``B = [low, low + d, ..., high]`` with ``d = (high - low) / (num_bins - 1)``;
    DreamerV3 ("Robust Predictions", ``B = symexp([-20, ..., +20])``, and the
    hyperparameter table) uses 255 bins on ``[-20, 20]`` in symlog space,
    which covers raw values up to about ``±exp(20)``.

    Use an odd ``num_bins`` with ``low == -high`` so that 0 is a bin. The bins
    are built from ``(2i - (K - 1)) / (K - 1)`` so that a symmetric range gives
    exactly antisymmetric bins with an exact 0 in the middle (which lets a
    zero-initialised head predict exactly 0, see `twohot_mean`).

    Raises:
        ValueError: if ``num_bins < 2`` or ``low >= high`` (the message names
            the argument).
    """
    if int(num_bins) != num_bins or num_bins < 2:
        raise ValueError(f"num_bins must be an integer >= 2, got {num_bins!r}")
    if not low < high:
        raise ValueError(f"low must be < high, got low={low!r} and high={high!r}")
    num_bins = int(num_bins)
    # Built on the host in float64 (the arguments are static), then rounded once.
    unit = (2.0 * np.arange(num_bins) - (num_bins - 1)) / (num_bins - 1)  # [-1, 1]
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    bins = mid + half * unit
    bins[0], bins[-1] = low, high
    return jnp.asarray(bins, dtype=jnp.float32)


def twohot_encode(y: jax.Array, bins: jax.Array) -> jax.Array:
    """Two-hot encoding of ``y [...]`` (already in bin space) -> weights ``[..., K]``.

    DreamerV3, "Robust Predictions" (twohot definition): with
    ``b_k <= y < b_{k+1}`` the two neighbouring bins get the
    linear-interpolation weights

        twohot(y)_k     = |b_{k+1} - y| / |b_{k+1} - b_k|
        twohot(y)_{k+1} = |b_k     - y| / |b_{k+1} - b_k|

    and every other bin gets 0, so the weights sum to 1 and their mean
    ``sum_j twohot(y)_j * b_j`` equals ``y``. A value exactly on a bin puts all
    its weight on that bin. Values outside ``[bins[0], bins[-1]]`` are clipped
    to the outermost bin (weight 1 on ``bins[0]`` or ``bins[-1]``); this
    clipping happens only at the two ends, inside the range the encoding is
    exact. ``bins`` must be sorted ascending (they need not be evenly spaced).
    """
    num_bins = bins.shape[-1]
    y = jnp.clip(y, bins[0], bins[-1])
    # Index of the last bin at or below y, kept in [0, K - 2] so that k + 1 exists.
    # A comparison against all bins (the output is [..., K] anyway) instead of a
    # binary search: no loop, cheap to compile and fast on accelerators.
    below = jnp.sum(bins <= y[..., None], axis=-1) - 1
    below = jnp.clip(below, 0, num_bins - 2)
    above = below + 1
    b_below, b_above = bins[below], bins[above]
    w_above = jnp.clip((y - b_below) / (b_above - b_below), 0.0, 1.0)
    w_below = 1.0 - w_above
    return (
        jax.nn.one_hot(below, num_bins, dtype=bins.dtype) * w_below[..., None]
        + jax.nn.one_hot(above, num_bins, dtype=bins.dtype) * w_above[..., None]
    )


def twohot_loss(logits: jax.Array, target: jax.Array, bins: jax.Array) -> jax.Array:
    """Categorical cross-entropy against the two-hot encoded symlog target.

    DreamerV3, "Robust Predictions" (the symexp twohot loss):

        L(theta) = -twohot(symlog(y))^T log softmax(f(x, theta))

    ``logits [..., K]``, ``target [...]`` in RAW space (symlog is applied
    here), ``bins [K]`` in symlog space (see `twohot_bins`). The target is
    wrapped in ``stop_gradient``. Returns the per-element loss ``[...]``; the
    caller averages or sums. As in the authors' implementation, a target is
    split between its two bins linearly in symlog units; the paper writes the
    same bins in raw space, ``B = symexp([-20 ... +20])``.
    """
    target = jax.lax.stop_gradient(target)
    weights = twohot_encode(symlog(target), bins)
    return -jnp.sum(weights * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def twohot_mean(logits: jax.Array, bins: jax.Array) -> jax.Array:
    """The prediction of a two-hot head in raw space, ``[..., K] -> [...]``.

    DreamerV3, "Robust Predictions": ``y_hat = symexp(softmax(logits)^T B)``
    with ``B`` in symlog space, the expected bin location mapped back to raw
    values.

    The sum pairs bin ``j`` with bin ``K - 1 - j`` before adding, so that a
    uniform distribution over symmetric bins (a zero-initialised output layer)
    predicts exactly 0 rather than a rounding residue.
    """
    num_bins = bins.shape[-1]
    terms = jax.nn.softmax(logits, axis=-1) * bins
    half = num_bins // 2
    paired = jnp.flip(terms[..., :half], axis=-1) + terms[..., num_bins - half :]
    mean = jnp.sum(paired, axis=-1)
    if num_bins % 2:
        mean = mean + terms[..., half]
    return symexp(mean)


# ---------------------------------------------------------------------------
# Uniform mixture on categoricals ("World Model Learning", unimix)
# ---------------------------------------------------------------------------


def unimix_logits(logits: jax.Array, mix: float = 0.01) -> jax.Array:
    """Log-probabilities of a categorical mixed with 1% uniform, over the last axis.

    DreamerV3, "World Model Learning" (and "Actor unimix" in the
    hyperparameters): the latent and action categoricals are parameterised
    as a mixture of 1% uniform and 99% network output, which keeps every
    probability at least ``mix / K`` and prevents KL spikes:

        p = (1 - mix) * softmax(logits) + mix / K

    Returns ``log p`` (normalised logits, same shape). Computed as a
    ``logaddexp`` in log space for stability. ``mix == 0`` returns
    ``log_softmax(logits)``.

    Raises:
        ValueError: if ``mix`` is a Python number outside ``[0, 1]``.
    """
    if isinstance(mix, (int, float)):
        if not 0.0 <= mix <= 1.0:
            raise ValueError(f"mix must be in [0, 1], got {mix!r}")
        if mix == 0:
            return jax.nn.log_softmax(logits, axis=-1)
    num_classes = logits.shape[-1]
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    mix = jnp.asarray(mix, dtype=log_probs.dtype)
    return jnp.logaddexp(jnp.log1p(-mix) + log_probs, jnp.log(mix / num_classes))


# ---------------------------------------------------------------------------
# KL balancing with free bits ("World Model Learning", eq. 5)
# ---------------------------------------------------------------------------


def categorical_kl(lhs_logits: jax.Array, rhs_logits: jax.Array) -> jax.Array:
    """``KL(lhs || rhs)`` of factorised categoricals, ``[..., L, C] -> [...]``.

    The world model's latent is ``L`` independent categoricals of ``C`` classes
    (DreamerV3, "World Model Learning", eq. 5), so the KL is summed over
    latents and classes:

        KL = sum_l sum_c p_lc * (log p_lc - log q_lc)

    Both arguments are passed through ``log_softmax`` on the last axis, so
    normalised log-probabilities (e.g. from `unimix_logits`) and raw logits
    are both accepted. Classes with ``p_lc = 0`` contribute 0.
    """
    lhs = jax.nn.log_softmax(lhs_logits, axis=-1)
    rhs = jax.nn.log_softmax(rhs_logits, axis=-1)
    probs = jnp.exp(lhs)
    terms = probs * jnp.where(probs > 0, lhs - rhs, 0.0)
    return jnp.sum(terms, axis=(-2, -1))


def kl_balance(
    post_logits: jax.Array, prior_logits: jax.Array, free_nats: float = 1.0
) -> tuple[jax.Array, jax.Array]:
    """The dynamics and representation losses ``(dyn, rep)``, each ``[...]``.

    DreamerV3, "World Model Learning", eq. 5 (KL balancing with free bits):

        dyn = max(free_nats, KL(sg(post) || prior))
        rep = max(free_nats, KL(post || sg(prior)))

    ``dyn`` trains only the prior (the dynamics predictor) towards the
    posterior, ``rep`` trains only the posterior (the encoder) towards the
    prior. Below ``free_nats`` (1 nat in the paper) a term is constant, so
    its gradient is zero and the model stops minimising an already small KL.
    Logits are ``[..., num_latents, num_classes]`` (see `categorical_kl`).
    The caller weights the terms (arXiv v1: ``beta_dyn = 0.5``,
    ``beta_rep = 0.1``; the later version keeps 0.1 and raises
    ``beta_dyn`` to 1).
    """
    sg = jax.lax.stop_gradient
    dyn = jnp.maximum(free_nats, categorical_kl(sg(post_logits), prior_logits))
    rep = jnp.maximum(free_nats, categorical_kl(post_logits, sg(prior_logits)))
    return dyn, rep


# ---------------------------------------------------------------------------
# Percentile return normalisation ("Actor Learning", return normalization)
# ---------------------------------------------------------------------------


class ReturnScale(NamedTuple):
    """EMAs of the low and high return percentiles (float32 scalars, a pytree)."""

    low: jax.Array
    high: jax.Array


def init_return_scale() -> ReturnScale:
    """A `ReturnScale` with both percentiles at 0 (the EMA's starting point)."""
    return ReturnScale(low=jnp.zeros((), jnp.float32), high=jnp.zeros((), jnp.float32))


def update_return_scale(
    scale: ReturnScale,
    returns: jax.Array,
    decay: float = 0.99,
    low_quantile: float = 0.05,
    high_quantile: float = 0.95,
) -> ReturnScale:
    """One EMA step of the 5th and 95th return percentiles.

    DreamerV3, "Actor Learning", ``S = EMA(Per(R, 95) - Per(R, 5), 0.99)``:

        low  <- decay * low  + (1 - decay) * Per(R, 5)
        high <- decay * high + (1 - decay) * Per(R, 95)

    The percentiles are taken over all elements of ``returns`` (linear
    interpolation, as ``numpy.quantile``) under ``stop_gradient``. The EMA
    starts at 0 and is not debiased; while it warms up ``high - low`` is
    small, and the floor in `return_scale_divisor` keeps advantages from
    being amplified.
    """
    flat = jax.lax.stop_gradient(returns).astype(jnp.float32).reshape(-1)
    low, high = jnp.quantile(flat, jnp.array([low_quantile, high_quantile], jnp.float32))
    return ReturnScale(
        low=(decay * scale.low + (1.0 - decay) * low).astype(jnp.float32),
        high=(decay * scale.high + (1.0 - decay) * high).astype(jnp.float32),
    )


def return_scale_divisor(scale: ReturnScale, limit: float = 1.0) -> jax.Array:
    """``S = max(limit, high - low)``, the divisor of the actor's advantages.

    DreamerV3, "Actor Learning": the actor's REINFORCE weight is
    ``sg((R - v) / max(1, S))``. The floor (``limit = 1``) scales large
    returns down but never scales small ones up, which would amplify noise
    under sparse rewards.
    """
    return jnp.maximum(limit, scale.high - scale.low)
