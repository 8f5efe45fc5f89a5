"""Losses shared across algorithm families (pure functions).

A loss lives here when algorithms of different families use it, so that neither
imports the other's package: `value_error`, the (optionally clipped) critic
regression of PPO (`jaxrl/algorithms/ppo/`) and of PPO-LM's critic
(`jaxrl/algorithms/ppo_lm/`). Losses of one algorithm stay in its `losses.py`;
returns and advantages are in `jaxrl/returns.py`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["value_error"]


def value_error(
    value: jax.Array,
    old_value: jax.Array,
    returns: jax.Array,
    clip_eps: jax.Array | float,
    clip: bool,
) -> tuple[jax.Array, jax.Array]:
    """Per-element 0.5 (V - R)^2, or with clipping 0.5 max((V - R)^2, (V_clip - R)^2).

    V_clip = V_old + clip(V - V_old, -eps, eps): the value-clipping variant of
    OpenAI baselines' PPO2, as in PureJaxRL and CleanRL (and verl's and OpenRLHF's
    critics for language models). Returns `(loss, clipped)`, both shaped like `value`;
    `clipped` (bool) marks where the clipped term is the larger one, so the gradient
    there is 0 (all False without clipping). Reduce it with the caller's mean: PPO's
    `value_loss` (`jaxrl/algorithms/ppo/losses.py`), a masked token aggregation in
    PPO-LM (`jaxrl/algorithms/ppo_lm`).
    """
    unclipped = (value - returns) ** 2
    if not clip:
        return 0.5 * unclipped, jnp.zeros(value.shape, bool)
    value_clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    clipped_error = (value_clipped - returns) ** 2
    return 0.5 * jnp.maximum(unclipped, clipped_error), clipped_error > unclipped
