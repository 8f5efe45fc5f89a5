"""The PRM loss: binary cross-entropy on the head's logit at step-end tokens only.

Inputs: the value head's output z_t at every token of right-padded `prompt + solution +
eos` rows, a `label_mask` that is True on the tokens that end a step (the separator, and
the eos for the last step) and the step labels y_t (1 correct, 0 not) there. Every other
token (prompt, the inside of a step, padding) is out of the loss, as TRL's `PRMTrainer`
sets their labels to -100.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.objectives.process import binary_cross_entropy_with_logits


def step_bce(logits: jax.Array, labels: jax.Array, label_mask: jax.Array) -> jax.Array:
    """Summed binary cross-entropy over the labelled step tokens (Lightman et al. 2023,
    "Let's verify step by step": the PRM predicts each step's label at its last
    token; Uesato et al. 2022):

        L_sum = sum_{b,t} m_{b,t} [softplus(z_{b,t}) - y_{b,t} z_{b,t}]

    A sum, not a mean: the trainer divides by the whole batch's number of labelled steps,
    so the slices of an accumulated gradient add up to the batch's mean (verl #5625).

    Args:
      logits: (batch, length) float head outputs z.
      labels: (batch, length) float step labels in {0, 1} (read where `label_mask`).
      label_mask: (batch, length) bool, True at step-end tokens.
    Returns:
      float32 scalar.
    """
    per_token = binary_cross_entropy_with_logits(logits, labels)
    return jnp.sum(jnp.where(label_mask, per_token, 0.0))


def step_accuracy(logits: jax.Array, labels: jax.Array, label_mask: jax.Array) -> jax.Array:
    """The number of labelled steps whose prediction (z > 0, i.e. probability > 0.5)
    matches the label (a sum; divide by the number of labelled steps)."""
    predicted = (logits > 0).astype(jnp.float32)
    right = (predicted == labels.astype(jnp.float32)) & label_mask
    return jnp.sum(right.astype(jnp.float32))


def solution_accuracy(logits: jax.Array, labels: jax.Array, label_mask: jax.Array) -> jax.Array:
    """(batch,) float: 1 for a row whose every labelled step is predicted right."""
    predicted = (logits > 0).astype(jnp.float32)
    wrong = (predicted != labels.astype(jnp.float32)) & label_mask
    return 1.0 - jnp.any(wrong, axis=1).astype(jnp.float32)


__all__ = ["solution_accuracy", "step_accuracy", "step_bce"]
