"""The A2C loss (Mnih et al. 2016, Algorithm S3), a pure function."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def a2c_loss(
    log_prob: jax.Array,
    entropy: jax.Array,
    value: jax.Array,
    advantages: jax.Array,
    returns: jax.Array,
    vf_coef: jax.Array | float,
    ent_coef: jax.Array | float,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """`(loss, stats)` over a batch of transitions:

        L = -E[log pi(a|s) A] + vf_coef * E[(R - V(s))^2] - ent_coef * E[H(pi(.|s))]

    with the advantages `A` held constant (the policy gradient), `R` the return
    targets, `V` the critic and `H` the policy's entropy (the bonus of Mnih et al.
    2016, sec. 4, that keeps the policy from collapsing early).
    """
    policy_loss = -jnp.mean(log_prob * jax.lax.stop_gradient(advantages))
    value_loss = jnp.mean(jnp.square(returns - value))
    mean_entropy = jnp.mean(entropy)
    loss = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    stats = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": mean_entropy}
    return loss, {"loss": loss, **stats}
