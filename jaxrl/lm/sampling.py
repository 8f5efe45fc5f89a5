"""Token sampling and teacher-forced log-probabilities for LM policies.

What lives here:
- Logit filters (``top_k_filter``, ``top_p_filter``) and ``sample_logits``:
  pure functions on a ``(..., vocab)`` array, usable on their own.
- ``generate``: batched autoregressive sampling with a KV cache -- left-padded
  prompts, ``num_samples`` completions per prompt (GRPO groups), per-row EOS
  stop, greedy at ``temperature=0``. One jitted program: prefill, then a
  ``lax.while_loop`` decode that stops early once every row has finished.
- ``prefill`` and ``sample_from_cache``: the same two halves on a KV cache kept by the caller, so
  a multi-turn rollout continues each sequence where it stopped: the environment's new
  tokens are prefilled into the cache of the turns before, then the model decodes (no
  re-reading of the whole context every turn; jaxrl/algorithms/lm_multiturn.py).
- ``token_logprobs``: log p(tokens[:, t+1] | tokens[:, :t+1]) (and optionally
  entropy) for given sequences, computed from the final hidden states in chunks
  so the float32 ``(batch, seq, vocab)`` logits are never materialised at once.

Log-probability convention (shared by ``generate`` and ``token_logprobs``):
the log-probability of a token is ``log_softmax(logits / temperature)[token]``
over the *full* vocabulary -- temperature-scaled, but before top-k / top-p
filtering (as TRL and verl use for the behaviour policy). Greedy decoding
(``temperature=0``) reports the raw model's log-probabilities (temperature 1).
So ``generate(..., temperature=T).logprobs`` equals
``token_logprobs(..., temperature=T)`` on the completion tokens, and with
``top_k`` / ``top_p`` the reported values are *not* the log-probabilities of the
truncated distribution actually sampled from.

What does not live here: losses, advantages and the RL loop.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl import prng
from jaxrl.lm.model import KVCache, init_cache, lm_head_weight
from jaxrl.lm.sharding import cache_sharding

__all__ = [
    "SampleOutput",
    "sample_from_cache",
    "generate",
    "prefill",
    "sample_logits",
    "sample_logits_with",
    "token_logprobs",
    "top_k_filter",
    "top_p_filter",
]

_NEG_INF = -jnp.inf


# --------------------------------------------------------------------------- filters


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
    """Keep the ``k`` largest logits on the last axis; the rest become ``-inf``.

    Values tied with the k-th largest are kept too (so >= k may survive).
    """
    kth = lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits < kth, _NEG_INF, logits)


def _nucleus_keep(sorted_logits: jax.Array, p: jax.Array | float) -> jax.Array:
    """Boolean keep-mask over logits sorted in descending order (last axis).

    A token is kept when the probability mass strictly before it is ``< p``,
    i.e. the smallest prefix whose mass reaches ``p`` -- including the token
    that crosses the threshold. The most likely token is always kept.
    """
    probs = jax.nn.softmax(sorted_logits.astype(jnp.float32), axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < p
    return keep.at[..., 0].set(True)


def top_p_filter(logits: jax.Array, p: jax.Array | float) -> jax.Array:
    """Nucleus filter: keep the smallest top set whose probability reaches ``p``.

    Tokens outside the set become ``-inf``; values tied with the last kept one
    are kept too. ``p >= 1`` keeps everything.
    """
    sorted_logits = -jnp.sort(-logits, axis=-1)
    keep = _nucleus_keep(sorted_logits, p)
    # Smallest kept logit: everything at or above it is in the nucleus.
    cutoff = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits < cutoff, _NEG_INF, logits)


def sample_logits(
    key: jax.Array,
    logits: jax.Array,
    *,
    temperature: jax.Array | float = 1.0,
    top_k: int | None = None,
    top_p: jax.Array | float | None = None,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Draw one token per row of ``logits (..., vocab)``; return ``(tokens, logprobs)``.

    Order: temperature, then top-k, then top-p on the top-k-renormalised
    distribution (as Hugging Face does). ``greedy`` takes the argmax and ignores
    the rest. ``logprobs`` follow the module convention: the full-vocabulary
    ``log_softmax(logits / temperature)`` (temperature 1 when greedy).
    """
    return sample_logits_with(
        lambda shape: prng.gumbel(key, shape, "jax"),
        logits,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        greedy=greedy,
    )


def sample_logits_with(
    gumbel: Callable[[tuple[int, ...]], jax.Array],
    logits: jax.Array,
    *,
    temperature: jax.Array | float = 1.0,
    top_k: int | None = None,
    top_p: jax.Array | float | None = None,
    greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """`sample_logits` with its Gumbel noise from `gumbel(shape)`, standard Gumbel numbers
    of `shape` (the logits' or, with top-k / top-p, the candidates' `(..., k)`): the
    continuous-batching sampler draws each row's own (`prng.gumbel_rows`), so that its
    tokens are those of one batch (jaxrl/lm/continuous.py)."""
    logits = logits.astype(jnp.float32)
    if greedy:
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return tokens, _gather_logprob(logits, tokens)
    scaled = logits / temperature
    if top_k is None and top_p is None:
        tokens = _gumbel_argmax(gumbel(scaled.shape), scaled)
        return tokens, _gather_logprob(scaled, tokens)
    # Sample in "candidate space": the top-k (or all, sorted) logits, descending.
    k = scaled.shape[-1] if top_k is None else top_k
    cand_logits, cand_ids = lax.top_k(scaled, k)
    if top_p is not None:
        cand_logits = jnp.where(_nucleus_keep(cand_logits, top_p), cand_logits, _NEG_INF)
    choice = _gumbel_argmax(gumbel(cand_logits.shape), cand_logits)
    tokens = jnp.take_along_axis(cand_ids, choice[..., None], axis=-1)[..., 0].astype(jnp.int32)
    return tokens, _gather_logprob(scaled, tokens)


def _categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """``jax.random.categorical(key, logits, axis=-1)``, the same tokens, cheaper on CPU.

    The Gumbel-max draw ``argmax(logits + gumbel)`` as jax does it, with jax's Gumbel
    numbers bit for bit from straight-line Threefry code (``jaxrl.prng``, layout "jax"),
    because on CPU ``jax.random`` runs its hash as a 5-iteration loop of tiny kernels in
    every decode step; and the argmax as a max followed by the first index holding it
    (NaN counts as the maximum, as in ``jnp.argmax``), because XLA's CPU argmax is a
    variadic (value, index) reduction that does not vectorise. benchmarks/grpo_step.py
    measures the sampling phase.
    """
    return _gumbel_argmax(prng.gumbel(key, logits.shape, "jax"), logits)


def _gumbel_argmax(gumbel: jax.Array, logits: jax.Array) -> jax.Array:
    """The Gumbel-max draw `argmax(logits + gumbel)` of `_categorical`, on given noise."""
    z = gumbel.astype(logits.dtype) + logits
    nan = jnp.isnan(z)
    hit = jnp.where(jnp.any(nan, axis=-1, keepdims=True), nan, z == jnp.max(z, -1, keepdims=True))
    index = jnp.arange(z.shape[-1], dtype=jnp.int32)
    return jnp.min(jnp.where(hit, index, z.shape[-1] - 1), axis=-1)


def _gather_logprob(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """``log_softmax(logits)[tokens]`` without building the full log-softmax."""
    picked = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


# --------------------------------------------------------------------------- output


@flax.struct.dataclass
class SampleOutput:
    """Completions from ``generate``; rows are prompt-major groups.

    Row ``i * num_samples + j`` is sample ``j`` of prompt ``i``.

    Fields:
      tokens: (B*n, max_new_tokens) int32 sampled tokens; ``pad_id`` after the first EOS.
      logprobs: (B*n, max_new_tokens) float32 log-probs of ``tokens`` (module
        convention: full-vocab, temperature-scaled, before top-k/top-p); 0 where masked.
      completion_mask: (B*n, max_new_tokens) bool, True up to and including the first EOS.
      lengths: (B*n,) int32 number of True entries of ``completion_mask``.
      finished: (B*n,) bool, True when the row emitted EOS (False = cut at max_new_tokens).
      prompt_tokens: (B*n, P) int32 prompts, repeated per sample.
      prompt_mask: (B*n, P) bool, repeated per sample.
    """

    tokens: jax.Array
    logprobs: jax.Array
    completion_mask: jax.Array
    lengths: jax.Array
    finished: jax.Array
    prompt_tokens: jax.Array
    prompt_mask: jax.Array

    def sequences(self) -> tuple[jax.Array, jax.Array]:
        """``(tokens, mask)`` of prompt + completion, (B*n, P + max_new_tokens).

        Feed these to ``token_logprobs(..., targets_start=P)`` to re-score the
        completions (e.g. under the current or a reference policy).
        """
        tokens = jnp.concatenate([self.prompt_tokens, self.tokens], axis=1)
        mask = jnp.concatenate([self.prompt_mask, self.completion_mask], axis=1)
        return tokens, mask


# --------------------------------------------------------------------------- helpers


def _apply(model: Any, params: Any, tokens: jax.Array, **kwargs: Any) -> Any:
    """``model.apply`` without the value-head output (sampling never needs it)."""
    out = model.apply(params, tokens, **kwargs)
    if getattr(model.config, "value_head", False):
        out = out[:-1]
        return out[0] if len(out) == 1 else out
    return out


def _positions(mask: jax.Array) -> jax.Array:
    """Left-padding-aware positions: the first real token of every row is position 0."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


def _project(hidden: jax.Array, head: jax.Array) -> jax.Array:
    """Logits in float32 from final hidden states and the ``(hidden, vocab)`` head."""
    return jnp.dot(hidden, head.astype(hidden.dtype), preferred_element_type=jnp.float32)


def _repeat_rows(x: jax.Array, n: int, axis: int = 0) -> jax.Array:
    return x if n == 1 else jnp.repeat(x, n, axis=axis)


def _repeat_cache(cache: Any, n: int) -> Any:
    """Repeat every batch row of a ``KVCache`` ``n`` times (prompt-major)."""
    if n == 1:
        return cache
    return cache.replace(
        k=tuple(_repeat_rows(k, n) for k in cache.k),
        v=tuple(_repeat_rows(v, n) for v in cache.v),
        mask=_repeat_rows(cache.mask, n, axis=0),
    )


def _grow_cache(cache: KVCache, length: int) -> KVCache:
    """Zero-pad every layer's K^T / V and the slot mask to ``length`` cache slots."""

    def pad(x: jax.Array, axis: int) -> jax.Array:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, length - x.shape[axis])
        return jnp.pad(x, widths)

    return cache.replace(
        k=tuple(pad(k, 3) for k in cache.k),
        v=tuple(pad(v, 2) for v in cache.v),
        mask=pad(cache.mask, 1),
    )


MIN_WINDOW = 64


def decode_windows(
    prompt_len: int, cache_len: int, min_window: int = MIN_WINDOW
) -> tuple[int, ...]:
    """Static attention windows (cache sizes) for the decode segments of ``generate``.

    Powers of two from ``min_window`` up, each kept only if it holds more than the
    prompt and is at most half of ``cache_len``, then ``cache_len`` itself: e.g.
    (64, 136) for prompt 8 + 128 new tokens, (64, 128, 256, 520) for 8 + 512. A step
    whose cache index is below ``w`` only needs the first ``w`` slots, so decoding in
    these segments makes step ``t`` attend over at most ``max(2 (P + t), 64)`` slots
    instead of all ``cache_len``: the per-step attention cost follows the sequence
    length. Each segment compiles its own decode body, so the number of segments
    (about log2(cache_len / 64)) is kept small.
    """
    windows = []
    w = min_window
    while 2 * w <= cache_len:
        if w > prompt_len:
            windows.append(w)
        w *= 2
    return (*windows, cache_len)


def _params_mesh(params: Any) -> jax.sharding.Mesh | None:
    """The mesh the params are sharded over (``NamedSharding`` on >1 device), else None."""
    for leaf in jax.tree.leaves(params):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding) and sharding.mesh.size > 1:
            return sharding.mesh
    return None


def _place_cache(cache: KVCache, config: Any, mesh: jax.sharding.Mesh | None) -> KVCache:
    """Constrain the cache onto ``mesh``: batch over data x fsdp, kv heads over tensor.

    Axes that do not divide the dimension stay replicated (``sharding.spec_for``).
    """
    if mesh is None:
        return cache
    rows = cache.mask.shape[0]
    kv = cache_sharding(config, mesh, rows)
    mask_spec = kv.spec[0] if len(kv.spec) else None
    mask = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mask_spec, None))
    constrain = jax.lax.with_sharding_constraint
    return cache.replace(
        k=tuple(constrain(k, kv) for k in cache.k),
        v=tuple(constrain(v, kv) for v in cache.v),
        mask=constrain(cache.mask, mask),
    )


def _check_prompt_rows(prompt_mask: Any) -> None:
    """Raise if a prompt row has no real token (skipped when the mask is traced)."""
    if isinstance(prompt_mask, jax.core.Tracer):
        return
    empty = np.flatnonzero(~np.asarray(prompt_mask).any(axis=-1))
    if empty.size:
        rows = ", ".join(str(int(i)) for i in empty[:10]) + (", ..." if empty.size > 10 else "")
        raise ValueError(
            f"prompt_mask has rows with no real token (rows {rows}): every prompt needs at "
            "least one token to condition on (e.g. BOS); an all-padding prompt has no "
            "next-token distribution"
        )


def _as_eos_array(eos_id: int | Sequence[int] | None, vocab_size: int) -> np.ndarray:
    if eos_id is None:
        ids: list[int] = []
    elif isinstance(eos_id, int | np.integer):
        ids = [int(eos_id)]
    else:
        ids = [int(i) for i in eos_id]
    for i in ids:
        if not 0 <= i < vocab_size:
            raise ValueError(f"eos_id {i} is outside the vocabulary [0, {vocab_size})")
    return np.asarray(ids, dtype=np.int32)


def _as_stop_array(stop_sequences: Sequence[Sequence[int]] | None, vocab_size: int) -> np.ndarray:
    """Stop sequences as one `(S, L)` int32 array, each right-aligned and left-padded with
    -1 (which no token equals: a shorter sequence matches its own last tokens only)."""
    sequences = [[int(i) for i in s] for s in (stop_sequences or ())]
    for s in sequences:
        if not s:
            raise ValueError("stop_sequences must not contain an empty sequence")
        for i in s:
            if not 0 <= i < vocab_size:
                raise ValueError(f"stop token {i} is outside the vocabulary [0, {vocab_size})")
    width = max((len(s) for s in sequences), default=0)
    return np.asarray([[-1] * (width - len(s)) + s for s in sequences], np.int32).reshape(
        len(sequences), width
    )


def _check_number(name: str, value: Any, *, low: float, high: float, low_open: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    ok_low = v > low if low_open else v >= low
    if not (math.isfinite(v) and ok_low and v <= high):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}], got {value!r}")
    return v


class _Options(NamedTuple):
    """Validated sampling options, as the compiled sampler takes them."""

    greedy: bool
    temperature: float  # 1 when greedy (the log-probs are the raw model's)
    top_k: int | None
    top_p: float  # 1 when unused
    use_top_p: bool
    eos: np.ndarray  # (E,) int32
    stops: np.ndarray  # (S, L) int32, see `_as_stop_array`


def _options(
    config: Any,
    max_new_tokens: Any,
    temperature: Any,
    top_k: Any,
    top_p: Any,
    eos_id: Any,
    stop_sequences: Any,
) -> _Options:
    """The options `generate` and `sample_from_cache` share, checked; a `ValueError` names the first
    bad one."""
    if not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    temperature = _check_number("temperature", temperature, low=0.0, high=math.inf, low_open=False)
    greedy = temperature == 0.0
    if top_k is not None and (
        not isinstance(top_k, int | np.integer) or not 1 <= top_k <= config.vocab_size
    ):
        raise ValueError(f"top_k must be an int in [1, {config.vocab_size}], got {top_k!r}")
    if top_p is not None:
        top_p = _check_number("top_p", top_p, low=0.0, high=1.0, low_open=True)
        if top_p == 1.0:
            top_p = None  # keeps everything: skip the sort
    return _Options(
        greedy=greedy,
        temperature=1.0 if greedy else temperature,
        top_k=None if top_k is None else int(top_k),
        top_p=1.0 if top_p is None else top_p,
        use_top_p=top_p is not None,
        eos=_as_eos_array(eos_id, config.vocab_size),
        stops=_as_stop_array(stop_sequences, config.vocab_size),
    )


def _checked_inputs(
    config: Any,
    prompt_tokens: Any,
    prompt_mask: Any,
    num_samples: Any,
    options: tuple[Any, ...],
) -> tuple[jax.Array, jax.Array, _Options]:
    """The prompts (int32), their mask (bool; default all True) and the sampling
    `options` (max_new_tokens, temperature, top_k, top_p, eos_id, stop_sequences) that
    `generate` and `generate_continuous` (jaxrl/lm/continuous.py) take, checked: a
    `ValueError` names the first bad one, and says when the prompt and the completion
    do not fit the model's context."""
    prompt_tokens = jnp.asarray(prompt_tokens)
    if prompt_tokens.ndim != 2:
        raise ValueError(f"prompt_tokens must be (batch, prompt_len), got {prompt_tokens.shape}")
    batch, prompt_len = prompt_tokens.shape
    if prompt_len < 1 or batch < 1:
        raise ValueError(f"prompt_tokens must be non-empty, got shape {prompt_tokens.shape}")
    if prompt_mask is None:
        prompt_mask = jnp.ones(prompt_tokens.shape, dtype=bool)
    prompt_mask = jnp.asarray(prompt_mask, dtype=bool)
    if prompt_mask.shape != prompt_tokens.shape:
        raise ValueError(
            f"prompt_mask shape {prompt_mask.shape} != prompt_tokens shape {prompt_tokens.shape}"
        )
    _check_prompt_rows(prompt_mask)
    if not isinstance(num_samples, int | np.integer) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    opts = _options(config, *options)
    needed = prompt_len + options[0]
    if needed > config.max_position_embeddings:
        raise ValueError(
            f"prompt_len + max_new_tokens = {prompt_len} + {options[0]} = {needed} "
            f"exceeds the model's max_position_embeddings={config.max_position_embeddings}"
        )
    return prompt_tokens.astype(jnp.int32), prompt_mask, opts


# --------------------------------------------------------------------------- generate


def generate(
    model: Any,
    params: Any,
    prompt_tokens: jax.Array,
    key: jax.Array,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | Sequence[int] | None = None,
    prompt_mask: jax.Array | None = None,
    num_samples: int = 1,
    cache_len: int | None = None,
    pad_id: int = 0,
    stop_sequences: Sequence[Sequence[int]] | None = None,
) -> SampleOutput:
    """Sample ``num_samples`` completions of ``max_new_tokens`` for each prompt.

    Args:
      model: a ``jaxrl.lm.model.Transformer`` (hashable; a static jit argument).
      params: its variables, as returned by ``model.init``.
      prompt_tokens: (B, P) int32, LEFT-padded (see ``encode_batch_left_padded``).
      key: PRNG key; the output is a deterministic function of it.
      max_new_tokens: completion length (static).
      temperature: 0 means greedy (argmax); otherwise logits are divided by it.
      top_k / top_p: optional filters, combinable (top-k first, then nucleus).
      eos_id: token id(s) that end a completion; ``None`` never stops early.
      prompt_mask: (B, P) bool, True on real tokens; default all True.
      num_samples: completions per prompt; rows are prompt-major groups.
      cache_len: KV-cache length; default ``P + max_new_tokens`` (a fixed value
        lets prompts of different lengths share one compiled program).
      pad_id: token written after a row's first EOS.
      stop_sequences: token sequences that also end a completion, kept in it (a tool
        call's end marker: the row stops as soon as its last tokens are one of them,
        ``finished`` True, as after EOS). ``None`` or empty: only EOS stops.

    Raises ValueError (before compiling) for bad arguments, naming the argument,
    when ``P + max_new_tokens`` exceeds ``cache_len`` or the model's
    ``max_position_embeddings``, or when a ``prompt_mask`` row has no real token.

    When ``params`` are sharded over a mesh (``NamedSharding`` on several devices,
    e.g. from ``shard_params``), the KV cache is placed on the same mesh: batch rows
    over the data/fsdp axes and kv heads over ``tensor`` where they divide.
    """
    prompt_tokens, prompt_mask, opts = _checked_inputs(
        model.config,
        prompt_tokens,
        prompt_mask,
        num_samples,
        (max_new_tokens, temperature, top_k, top_p, eos_id, stop_sequences),
    )
    prompt_len = prompt_tokens.shape[1]
    needed = prompt_len + max_new_tokens
    if cache_len is None:
        cache_len = needed
    if not isinstance(cache_len, int | np.integer) or needed > cache_len:
        raise ValueError(
            f"prompt_len + max_new_tokens = {prompt_len} + {max_new_tokens} = {needed} "
            f"exceeds cache_len={cache_len}"
        )
    return _generate(
        model,
        params,
        prompt_tokens.astype(jnp.int32),
        prompt_mask,
        key,
        jnp.float32(opts.temperature),
        jnp.float32(opts.top_p),
        jnp.asarray(opts.eos),
        jnp.int32(pad_id),
        max_new_tokens=int(max_new_tokens),
        top_k=opts.top_k,
        use_top_p=opts.use_top_p,
        greedy=opts.greedy,
        num_samples=int(num_samples),
        windows=decode_windows(prompt_len, int(cache_len)),
        mesh=_params_mesh(params),
        stops=jnp.asarray(opts.stops),
    )


# --------------------------------------------------------------------------- continuing


def prefill(
    model: Any, params: Any, tokens: jax.Array, cache: KVCache, *, mask: jax.Array | None = None
) -> tuple[jax.Array, KVCache]:
    """Append a block of new tokens to the sequences ``cache`` holds and return the
    next-token logits after it: the prefill of the new tokens only.

    ``tokens`` (B, L) int32 are LEFT-padded (``mask`` (B, L) bool, True on real tokens;
    default all True), so every row's newest token is in the last column. They are
    written at the cache's ``index`` (slots ``index .. index + L - 1``; padding marked
    unused in the cache's ``mask``), with rotary positions that continue each row's
    count of real tokens in the cache (``KVCache.mask``). So the keys, values and logits
    are those of running each row's real tokens, the cached ones then these, as one
    sequence, up to float rounding: attention also sums over the masked slots (each
    weighing exactly 0), and in another order. A row with no real token in the block
    gets the logits of its padding, which mean nothing.

    Returns ``(logits, cache)``: (B, vocab) float32 and the cache advanced by L slots.
    Meant for use inside ``jax.jit``, with ``sample_from_cache`` after it (a multi-turn rollout's
    turn: the environment's answer, then the model's reply; jaxrl/algorithms/
    lm_multiturn.py). Raises ``ValueError`` when the block does not fit in the cache
    (checked when the cache's index is known, i.e. outside ``jit``).
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    if tokens.ndim != 2 or tokens.shape[0] != cache.mask.shape[0] or tokens.shape[1] < 1:
        raise ValueError(
            f"tokens must be (batch, length) with the cache's batch {cache.mask.shape[0]} "
            f"and length >= 1, got {tokens.shape}"
        )
    mask = jnp.ones(tokens.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if mask.shape != tokens.shape:
        raise ValueError(f"mask shape {mask.shape} != tokens shape {tokens.shape}")
    _check_room(cache, tokens.shape[1], "the block of new tokens")
    seen = jnp.sum(cache.mask, axis=-1, dtype=jnp.int32)  # real tokens cached per row
    positions = _positions(mask) + seen[:, None]
    return _prefill_block(model, params, tokens, mask, positions, cache)


def sample_from_cache(
    model: Any,
    params: Any,
    cache: KVCache,
    logits: jax.Array,
    key: jax.Array,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | Sequence[int] | None = None,
    pad_id: int = 0,
    stop_sequences: Sequence[Sequence[int]] | None = None,
) -> tuple[SampleOutput, KVCache]:
    """Sample ``max_new_tokens`` tokens per row after what ``cache`` holds, ``logits``
    (B, vocab) being the next-token logits there (``prefill``'s): ``generate``'s decode
    loop (the same keys per step, filters, EOS and stop sequences, log-prob convention)
    on a cache that already holds each row's context, so the same key and context give
    ``generate``'s tokens (up to float rounding of the logits, see ``prefill``).

    Returns ``(out, cache)``. ``out`` is a ``SampleOutput`` with no prompt
    (``prompt_tokens`` and ``prompt_mask`` are (B, 0)). The cache holds every sampled
    token but the last one of the loop (a decode step writes the token it consumes), in
    the slots from its old index on, all marked real in its mask, including the
    padding that rows which already stopped keep consuming while others decode: the
    caller marks those slots unused before continuing (``KVCache.mask``). Only one
    cache size: the whole cache is attended to at every step (``generate`` grows its
    cache in windows instead). Needs ``max_new_tokens - 1`` free slots after the
    cache's index (checked outside ``jit``).
    """
    config = model.config
    logits = jnp.asarray(logits)
    rows = cache.mask.shape[0]
    if logits.shape != (rows, config.vocab_size):
        raise ValueError(
            f"logits must be (batch, vocab) = {(rows, config.vocab_size)}, got {logits.shape}"
        )
    opts = _options(config, max_new_tokens, temperature, top_k, top_p, eos_id, stop_sequences)
    _check_room(cache, max_new_tokens - 1, f"max_new_tokens - 1 = {max_new_tokens - 1} tokens")
    tokens, logprobs, mask, done, cache = _decode_steps(
        model,
        params,
        cache,
        logits,
        jnp.sum(cache.mask, axis=-1, dtype=jnp.int32),  # next position: real tokens so far
        key,
        jnp.float32(opts.temperature),
        jnp.float32(opts.top_p),
        jnp.asarray(opts.eos),
        jnp.int32(pad_id),
        jnp.asarray(opts.stops),
        max_new_tokens=int(max_new_tokens),
        top_k=opts.top_k,
        use_top_p=opts.use_top_p,
        greedy=opts.greedy,
        segments=((cache.mask.shape[1], int(max_new_tokens)),),
        mesh=_params_mesh(params),
    )
    out = SampleOutput(
        tokens=tokens,
        logprobs=logprobs,
        completion_mask=mask,
        lengths=jnp.sum(mask, axis=-1, dtype=jnp.int32),
        finished=done,
        prompt_tokens=jnp.zeros((rows, 0), jnp.int32),
        prompt_mask=jnp.zeros((rows, 0), bool),
    )
    return out, cache


def _check_room(cache: KVCache, needed: int, what: str) -> None:
    """Raise if ``needed`` slots from the cache's index run past its end (skipped when
    the index is traced: the caller sized the cache)."""
    if isinstance(cache.index, jax.core.Tracer):
        return
    index, slots = int(cache.index), cache.mask.shape[1]
    if index + needed > slots:
        raise ValueError(
            f"the KV cache has {slots - index} free slots (index {index} of {slots}), too "
            f"few for {what}"
        )


@functools.partial(
    jax.jit,
    static_argnames=(
        "model",
        "max_new_tokens",
        "top_k",
        "use_top_p",
        "greedy",
        "num_samples",
        "windows",
        "mesh",
    ),
)
def _generate(
    model: Any,
    params: Any,
    prompt_tokens: jax.Array,
    prompt_mask: jax.Array,
    key: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    eos_ids: jax.Array,
    pad_id: jax.Array,
    *,
    max_new_tokens: int,
    top_k: int | None,
    use_top_p: bool,
    greedy: bool,
    num_samples: int,
    windows: tuple[int, ...],
    mesh: jax.sharding.Mesh | None = None,
    stops: jax.Array | None = None,
) -> SampleOutput:
    """The compiled sampler: prefill once per prompt, repeat, then decode.

    Decoding runs in segments, one per entry of ``windows`` (increasing cache
    sizes, the last being ``cache_len``; see ``decode_windows``). Segment ``j``
    carries a cache of ``windows[j]`` slots and decodes the steps whose cache
    index fits in it; between segments the cache is zero-padded to the next
    size. All segments are in this one program. Slots beyond the write index are
    masked out, so a smaller window computes the same attention as the full cache.
    Each segment is a ``while_loop`` rather than a ``scan`` so decoding exits as
    soon as every row has emitted EOS (RL completions are often much shorter
    than ``max_new_tokens``); outputs are preallocated and written in place.
    """
    batch, prompt_len = prompt_tokens.shape
    if stops is None:  # stop sequences (S, L): none
        stops = jnp.zeros((0, 0), jnp.int32)

    # Prefill: run the prompt once per *prompt* (not per sample) and keep only
    # the last position's logits; all rows end at the last column (left padding).
    positions = _positions(prompt_mask)
    cache = _place_cache(init_cache(model.config, batch, windows[0]), model.config, mesh)
    logits, cache = _prefill_block(model, params, prompt_tokens, prompt_mask, positions, cache)
    cache = _place_cache(_repeat_cache(cache, num_samples), model.config, mesh)
    logits = _repeat_rows(logits, num_samples)
    next_pos = _repeat_rows(positions[:, -1] + 1, num_samples)

    # Step t writes cache slot prompt_len + t - 1, which must be < window.
    segments = tuple((w, min(max_new_tokens, w - prompt_len + 1)) for w in windows)
    tokens, logprobs, mask, done, _ = _decode_steps(
        model,
        params,
        cache,
        logits,
        next_pos,
        key,
        temperature,
        top_p,
        eos_ids,
        pad_id,
        stops,
        max_new_tokens=max_new_tokens,
        top_k=top_k,
        use_top_p=use_top_p,
        greedy=greedy,
        segments=segments,
        mesh=mesh,
    )
    return SampleOutput(
        tokens=tokens,
        logprobs=logprobs,
        completion_mask=mask,
        lengths=jnp.sum(mask, axis=-1, dtype=jnp.int32),
        finished=done,
        prompt_tokens=_repeat_rows(prompt_tokens, num_samples),
        prompt_mask=_repeat_rows(prompt_mask, num_samples),
    )


def _prefill_block(
    model: Any,
    params: Any,
    tokens: jax.Array,
    mask: jax.Array,
    positions: jax.Array,
    cache: KVCache,
) -> tuple[jax.Array, KVCache]:
    """Write a left-padded block of tokens into ``cache`` at its index; the float32
    logits (B, vocab) of its last column, where every row's newest real token is."""
    length = tokens.shape[1]
    hidden, cache = _apply(
        model,
        params,
        tokens,
        positions=positions,
        attention_mask=mask,
        cache=cache,
        return_hidden=True,
        output_span=(length - 1, length),
    )
    return _project(hidden[:, -1], lm_head_weight(params)), cache


def _decode_steps(
    model: Any,
    params: Any,
    cache: KVCache,
    logits: jax.Array,
    next_pos: jax.Array,
    key: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    eos_ids: jax.Array,
    pad_id: jax.Array,
    stops: jax.Array,
    *,
    max_new_tokens: int,
    top_k: int | None,
    use_top_p: bool,
    greedy: bool,
    segments: tuple[tuple[int, int], ...],
    mesh: jax.sharding.Mesh | None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, KVCache]:
    """Sample ``max_new_tokens`` tokens per row from ``logits`` (the next-token logits
    after what ``cache`` holds) on: step 0 samples from ``logits``, step t > 0 writes
    token t - 1 into the cache at its index (rotary position ``next_pos + t - 1``) and
    samples from the model's output. ``segments`` are (cache slots, steps before which
    the segment ends) pairs: the cache is grown to each size in turn (see
    ``_generate``). Returns ``(tokens, logprobs, mask, finished, cache)``; the cache
    holds every token sampled but the last (a step writes the token it consumes)."""
    rows = logits.shape[0]

    def sample(t: jax.Array, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        return sample_logits(
            prng.fold_in(key, t),
            logits,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p if use_top_p else None,
            greedy=greedy,
        )

    def record(t, tok, lp, done, out):
        """Write step ``t``; rows already done get pad / 0 / False. A row is done after
        EOS, or once its last tokens (``recent``) are a stop sequence."""
        tokens, logprobs, mask, recent = out
        live = ~done
        tok = jnp.where(live, tok, pad_id)
        tokens = tokens.at[:, t].set(tok)
        logprobs = logprobs.at[:, t].set(jnp.where(live, lp, 0.0))
        mask = mask.at[:, t].set(live)
        done = done | (live & jnp.any(tok[:, None] == eos_ids[None, :], axis=-1))
        if stops.shape[0]:  # static: without stop sequences, exactly the EOS sampler
            recent = jnp.concatenate([recent[:, 1:], tok[:, None]], axis=1)
            same = (recent[:, None, :] == stops[None]) | (stops[None] < 0)
            done = done | (live & jnp.any(jnp.all(same, axis=-1), axis=-1))
        return tok, done, (tokens, logprobs, mask, recent)

    out = (
        jnp.full((rows, max_new_tokens), pad_id, jnp.int32),
        jnp.zeros((rows, max_new_tokens), jnp.float32),
        jnp.zeros((rows, max_new_tokens), bool),
        jnp.full((rows, stops.shape[1]), -1, jnp.int32),  # the last tokens, for stops
    )
    tok, lp = sample(jnp.int32(0), logits)
    tok, done, out = record(0, tok, lp, jnp.zeros((rows,), bool), out)
    step_mask = jnp.ones((rows, 1), bool)

    def body(state):
        t, tok, pos, cache, done, out = state
        logits, cache = _apply(
            model,
            params,
            tok[:, None],
            positions=pos[:, None],
            attention_mask=step_mask,
            cache=cache,
        )
        new_tok, lp = sample(t, logits[:, -1])
        new_tok, done, out = record(t, new_tok, lp, done, out)
        return t + 1, new_tok, pos + 1, cache, done, out

    state = (jnp.int32(1), tok, next_pos, cache, done, out)
    for window, limit in segments:

        def cond(state, limit=limit):
            t, _, _, _, done, _ = state
            return (t < limit) & ~jnp.all(done)

        t, tok, pos, cache, done, out = state
        if cache.mask.shape[1] < window:
            cache = _place_cache(_grow_cache(cache, window), model.config, mesh)
        state = lax.while_loop(cond, body, (t, tok, pos, cache, done, out))
    _, _, _, cache, done, (tokens, logprobs, mask, _) = state
    return tokens, logprobs, mask, done, cache


# --------------------------------------------------------------------------- scoring


def token_logprobs(
    model: Any,
    params: Any,
    tokens: jax.Array,
    *,
    attention_mask: jax.Array | None = None,
    targets_start: int | None = None,
    chunk_size: int = 512,
    temperature: float | jax.Array = 1.0,
    return_entropy: bool = False,
    return_top: bool = False,
) -> jax.Array | tuple[jax.Array, ...]:
    """Teacher-forced ``log p(tokens[:, t+1] | tokens[:, :t+1])``, shape (B, T-1).

    Runs the model for final hidden states, then projects them onto the vocabulary
    ``chunk_size`` tokens at a time (a rematerialised ``lax.map``), so peak memory
    holds one ``(chunk_size, vocab)`` float32 block instead of ``(B, T, vocab)``
    -- in the backward pass too. Differentiable in ``params``.

    Args:
      attention_mask: (B, T) bool, True on real tokens (left padding allowed).
        Entries whose target is padding are 0.
      targets_start: only score targets at positions >= this (static int), e.g.
        the prompt length to score completions only; entries before are 0 and
        their vocabulary projection is skipped.
      temperature: logits are divided by it (module convention; match the
        sampling temperature to reproduce ``generate``'s logprobs).
      return_entropy: also return the per-token entropy of the (tempered)
        next-token distribution, same shape and masking.
      return_top: also return the log-probability of the most likely next token,
        same shape and masking. A target is the greedy (argmax) token exactly when
        its log-probability equals it (both are ``z - logsumexp(z)`` of the same
        ``z``), so a completion is what greedy decoding would produce from its
        prompt when that holds at every one of its tokens.

    Returns ``logprobs``, or the tuple ``(logprobs[, entropy][, top])`` of those
    asked for, in that order.
    """
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be (batch, seq) with seq >= 2, got {tokens.shape}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    start = 1 if targets_start is None else int(targets_start)
    if not 1 <= start < tokens.shape[1]:
        raise ValueError(f"targets_start must be in [1, {tokens.shape[1]}), got {targets_start!r}")
    if attention_mask is None:
        attention_mask = jnp.ones(tokens.shape, dtype=bool)
    lp, ent, top = _token_logprobs(
        model,
        params,
        tokens.astype(jnp.int32),
        jnp.asarray(attention_mask, dtype=bool),
        jnp.asarray(temperature, jnp.float32),
        start=start,
        chunk_size=chunk_size,
        with_entropy=return_entropy,
        with_top=return_top,
    )
    extra = [x for x, asked in ((ent, return_entropy), (top, return_top)) if asked]
    return (lp, *extra) if extra else lp


@functools.partial(
    jax.jit, static_argnames=("model", "start", "chunk_size", "with_entropy", "with_top")
)
def _token_logprobs(
    model: Any,
    params: Any,
    tokens: jax.Array,
    mask: jax.Array,
    temperature: jax.Array,
    *,
    start: int,
    chunk_size: int,
    with_entropy: bool,
    with_top: bool = False,
) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """Jitted body of ``token_logprobs`` (targets at positions ``start..T-1``)."""
    batch, seq = tokens.shape
    # Hidden state at t predicts token t+1: pair hidden[start-1:T-1] with tokens[start:T].
    # Only those positions leave the model (its last layer skips the others).
    hidden = _apply(
        model,
        params,
        tokens,
        positions=_positions(mask),
        attention_mask=mask,
        return_hidden=True,
        output_span=(start - 1, seq - 1),
    )
    head = lm_head_weight(params)
    h = hidden.reshape(-1, hidden.shape[-1])
    targets = tokens[:, start:].reshape(-1)
    n = h.shape[0]
    chunk = min(chunk_size, n)
    pad = (-n) % chunk
    h = jnp.pad(h, ((0, pad), (0, 0))).reshape(-1, chunk, h.shape[-1])
    targets = jnp.pad(targets, (0, pad)).reshape(-1, chunk)

    @jax.checkpoint
    def score(args):
        h_c, t_c = args
        z = _project(h_c, head) / temperature  # (chunk, vocab) float32
        lse = jax.nn.logsumexp(z, axis=-1)
        out = {"lp": jnp.take_along_axis(z, t_c[:, None], axis=-1)[:, 0] - lse}
        if with_entropy:  # H = logsumexp(z) - sum_v softmax(z)_v z_v
            out["ent"] = lse - jnp.sum(jax.nn.softmax(z, axis=-1) * z, axis=-1)
        if with_top:
            out["top"] = jax.lax.stop_gradient(jnp.max(z, axis=-1) - lse)
        return out

    scored = lax.map(score, (h, targets))  # only the quantities asked for
    valid = mask[:, start:]

    def unflatten(x: jax.Array) -> jax.Array:
        x = x.reshape(-1)[:n].reshape(batch, seq - start)
        x = jnp.where(valid, x, 0.0)
        return jnp.pad(x, ((0, 0), (start - 1, 0)))

    return tuple(
        unflatten(scored[name]) if name in scored else None for name in ("lp", "ent", "top")
    )
