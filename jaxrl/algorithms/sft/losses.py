"""The SFT loss: masked token cross-entropy under teacher forcing, and its statistics.

Inputs are per-token log-probabilities `log p(x_{t+1} | x_{<=t})` of the sequence's own
next tokens (`jaxrl.lm.token_logprobs`, computed in vocabulary chunks so the
`(batch, length, vocab)` logits never exist at once) and a mask that is True on the
tokens the loss counts: the answer and its eos, never the prompt or padding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def masked_token_nll(logprobs: jax.Array, loss_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Token-mean negative log-likelihood over the masked tokens, and their count.

        L = - sum_{b,t} m_{b,t} log p_{b,t} / max(1, sum_{b,t} m_{b,t})

    Every answer token of the batch weighs the same (the causal-LM loss of Hugging Face's
    Trainer and TRL's SFTTrainer); a longer answer counts for more than a short one. The
    mean is over the whole update's batch: where the batch is computed in slices (the
    devices' row shards, `SFT._loss`), each slice's sum is divided by the whole batch's
    count, so the slices do not fall into the per-micro-batch normalisation pitfall
    (verl #5625).

    Args:
      logprobs: (batch, length) float log-probabilities of the target tokens.
      loss_mask: (batch, length) bool, True where the token is a loss token.
    Returns:
      (loss, num_tokens): float32 scalars.
    """
    mask = loss_mask.astype(jnp.float32)
    num_tokens = jnp.sum(mask)
    loss = -jnp.sum(jnp.where(loss_mask, logprobs, 0.0)) / jnp.maximum(num_tokens, 1.0)
    return loss, num_tokens


def answer_probability(logprobs: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """Mean over sequences of the teacher-forced probability of the whole answer.

        P_b = exp(sum_t m_{b,t} log p_{b,t})

    The probability that sampling at temperature 1 reproduces the answer and its eos: a
    smooth training-time proxy for exact-match accuracy.
    """
    per_sequence = jnp.sum(jnp.where(loss_mask, logprobs, 0.0), axis=-1)
    return jnp.mean(jnp.exp(per_sequence))


def greedy_exact_match(
    logprobs: jax.Array, top_logprobs: jax.Array, loss_mask: jax.Array
) -> jax.Array:
    """Fraction of sequences whose every loss token is the model's most likely token.

        EM = mean_b prod_t [m_{b,t} => log p_{b,t} = max_v log p_{b,t}(v)]

    Under teacher forcing this *is* greedy decoding's exact match on these prompts:
    greedy decoding reproduces the answer and its eos exactly when, at each of their
    positions, the argmax given the correct prefix is the correct token (ties, of
    measure zero, count as matches). So it comes free with the loss's forward pass,
    on every training batch, with no decoding.

    Args:
      logprobs: (batch, length) log-probabilities of the target tokens.
      top_logprobs: (batch, length) log-probability of the most likely token
        (`token_logprobs(..., return_top=True)`).
      loss_mask: (batch, length) bool, True on the answer and eos tokens.
    """
    greedy = (logprobs >= top_logprobs) | ~loss_mask
    return jnp.mean(jnp.all(greedy, axis=-1).astype(jnp.float32))
