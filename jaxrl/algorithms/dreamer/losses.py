"""Dreamer's three losses as pure functions: the world model's, the actor's, the critic's.

All follow DreamerV3 (Hafner et al. 2023, arXiv:2301.04104, sec. 2 and 3); the
robustness tricks they use (symlog, two-hot, KL balancing with free bits, return
normalisation) are the named functions of `tricks.py`, the lambda-return is
`jaxrl.returns.lambda_returns`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl.nn import Categorical, DiagGaussian

from . import tricks
from .networks import WorldModel


class Sequences(NamedTuple):
    """Replayed sequences `[B, T, ...]`: step t holds the observation, whether it starts
    an episode, the action taken in it, and the reward and termination that followed."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    is_first: jax.Array
    terminated: jax.Array


def world_model_loss(
    wm: WorldModel,
    params: Any,
    batch: Sequences,
    key: jax.Array,
    bins: jax.Array,
    *,
    free_nats: float,
    dyn_scale: float,
    rep_scale: float,
) -> tuple[jax.Array, tuple[dict[str, jax.Array], dict[str, Any]]]:
    """DreamerV3 eq. 3-5, averaged over the batch and time:

        L = L_pred + dyn_scale * L_dyn + rep_scale * L_rep
        L_pred = ||dec(h_t, z_t) - symlog(obs_t)||^2                 (summed over dims)
                 - ln p_R(twohot(symlog r_t) | h_{t+1})             two-hot cross-entropy
                 - ln p_C(1 - terminated_t | h_{t+1})               Bernoulli
        L_dyn  = max(free_nats, KL[sg(q(z_t | ...)) || p(z_t | h_t)])
        L_rep  = max(free_nats, KL[q(z_t | ...) || sg(p(z_t | h_t))])

    Returns `(loss, (metrics, posterior states))`; the states start imagination.
    """
    out = wm.observe(params, batch.obs, batch.action, batch.is_first, key)
    recon = wm.decode(params, out["h"], out["z"])
    target = tricks.symlog(batch.obs.astype(jnp.float32))
    obs_axes = tuple(range(2, target.ndim))
    decoder = jnp.sum((recon - jax.lax.stop_gradient(target)) ** 2, axis=obs_axes)
    reward = tricks.twohot_loss(wm.reward_logits(params, out["next_h"]), batch.reward, bins)
    cont_target = 1.0 - batch.terminated.astype(jnp.float32)
    cont = optax.sigmoid_binary_cross_entropy(wm.cont_logit(params, out["next_h"]), cont_target)
    dyn, rep = tricks.kl_balance(out["post"], out["prior"], free_nats)
    loss = jnp.mean(decoder + reward + cont + dyn_scale * dyn + rep_scale * rep)
    metrics = {
        "loss": loss,
        "decoder_loss": decoder.mean(),
        "reward_loss": reward.mean(),
        "cont_loss": cont.mean(),
        # dyn and rep have the same value (they differ only in where gradients flow).
        "kl_free_bits": dyn.mean(),
        "kl": tricks.categorical_kl(out["post"], out["prior"]).mean(),
    }
    return loss, (metrics, out)


def actor_loss(
    policy: Categorical | DiagGaussian,
    actions: jax.Array,
    returns: jax.Array,
    values: jax.Array,
    weights: jax.Array,
    divisor: jax.Array,
    entropy_coef: jax.Array | float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """DreamerV3 eq. 11 (REINFORCE for discrete and continuous actions):

        L = -sum_t w_t [ sg((R_t - v(s_t)) / max(1, S)) ln pi(a_t | s_t) + eta H[pi(. | s_t)] ]

    over imagined steps `[H, N]`; `w_t` is the probability the imagined episode is
    still running at t, `S` the percentile return range (`tricks.return_scale_divisor`).
    """
    advantage = jax.lax.stop_gradient((returns - values) / divisor)
    log_prob = policy.log_prob(actions)
    entropy = policy.entropy()
    loss = -jnp.mean(weights * (advantage * log_prob + entropy_coef * entropy))
    return loss, {
        "actor_loss": loss,
        "actor_entropy": entropy.mean(),
        "advantage": advantage.mean(),
    }


def critic_loss(
    logits: jax.Array,
    returns: jax.Array,
    slow_values: jax.Array,
    weights: jax.Array,
    bins: jax.Array,
    slow_coef: jax.Array | float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """DreamerV3 eq. 10 with its slow-critic regulariser: two-hot symexp regression of
    the critic onto the lambda-returns, plus onto the slow (EMA) critic's prediction:

        L = sum_t w_t [ -ln p_v(twohot(symlog R_t) | s_t)
                        - c * ln p_v(twohot(symlog v_slow(s_t)) | s_t) ]
    """
    to_returns = tricks.twohot_loss(logits, returns, bins)
    to_slow = tricks.twohot_loss(logits, slow_values, bins)
    loss = jnp.mean(weights * (to_returns + slow_coef * to_slow))
    return loss, {"critic_loss": loss}
