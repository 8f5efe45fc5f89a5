"""The gradient update of the rollout-based learners: PPO, IPPO/MAPPO, PQN and PQN-VDN.

All four learn the same way after their rollout: a linearly annealed learning rate, an
optimiser that clips the gradient and then scales it (Adam or RAdam), and `num_epochs`
passes of shuffled minibatch gradient steps over the rollout. Only the loss differs,
so the loss is the argument:

* `annealed_lr_scale`: `1 - update_step / num_updates` (PPO's linear decay to 0 at the
  end of the run; Schulman et al. 2017, as OpenAI baselines' PPO2 and PureJaxRL), or 1;
* `clipped_optimizer`: `clip -> scale_by -> -lr`, run on one flat vector of all the
  parameters (`optax.flatten`): for these small networks the per-leaf kernels, not the
  arithmetic, are the cost on CPU;
* `gradient_epochs`: `jaxrl.minibatches.run_epochs` with a step that takes the loss's
  gradient and applies the optimiser.

What lives elsewhere: the losses (each algorithm's `losses.py`, `jaxrl/losses.py`), the
data order (`jaxrl/minibatches.py`), the family's own pieces (`jaxrl/algorithms/
ppo_common.py`, `pqn_common.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxrl.minibatches import run_epochs

__all__ = ["annealed_lr_scale", "clipped_optimizer", "gradient_epochs"]

# `loss(params, minibatch) -> (loss, aux)`: what `gradient_epochs` differentiates.
Loss = Callable[[Any, Any], tuple[jax.Array, Any]]


def annealed_lr_scale(update_step: jax.Array, num_updates: int, anneal: bool) -> jax.Array | float:
    """The learning rate's factor at `update_step`: `1 - update_step / num_updates`
    (linear to 0 at the end of the run) with `anneal`, else 1.0."""
    return 1.0 - update_step / num_updates if anneal else 1.0


def clipped_optimizer(
    clip: optax.GradientTransformation,
    scale_by: optax.GradientTransformation,
    step_size: jax.Array | float,
) -> optax.GradientTransformation:
    """`clip`, then `scale_by` (Adam, RAdam), then `-step_size`, on one flat vector of
    the parameters. Built from the (possibly traced, per-agent) hyperparameters every
    update: its state's structure does not depend on their values, so the state made by
    one built with `step_size = lr` at init continues under any later one."""
    return optax.flatten(optax.chain(clip, scale_by, optax.scale(-step_size)))


def gradient_epochs(
    loss: Loss,
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    batch: Any,
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
) -> tuple[Any, Any, tuple[jax.Array, Any]]:
    """`num_epochs` passes over `batch` in `num_minibatches` shuffled minibatches
    (`run_epochs`), one gradient step of `loss` per minibatch.

    Args:
      loss: `(params, minibatch) -> (loss, aux)`; the gradient is taken in `params`.
      optimizer: the update rule (e.g. `clipped_optimizer`); `opt_state` its state.
      batch: a pytree whose leaves share a leading axis of rows.
      key: the shuffles' randomness.

    Returns:
      `(params, opt_state, (losses, aux))`, the losses and every leaf of `aux` stacked
      `(num_epochs, num_minibatches, ...)`.
    """
    grad_fn = jax.value_and_grad(loss, has_aux=True)

    def step(carry: tuple[Any, Any], minibatch: Any) -> tuple[tuple[Any, Any], Any]:
        params, opt_state = carry
        (value, aux), grads = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (value, aux)

    (params, opt_state), out = run_epochs(
        step,
        (params, opt_state),
        batch,
        key,
        num_epochs=num_epochs,
        num_minibatches=num_minibatches,
    )
    return params, opt_state, out
