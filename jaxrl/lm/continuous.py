"""Continuous batching: a fixed pool of decode slots, each refilled with the next queued
completion as soon as its own one ends; and partial rollouts, completions cut by a
token budget and continued by a later call.

The static sampler (``sampling.generate``) decodes all its rows together until the
longest one has ended; on a workload whose completions vary in length (most short, a
few long), most rows sit finished while the longest decodes, and every decode step
still pays for them. Here ``num_slots`` rows decode at a time out of a queue of all
``B * num_samples`` completions (prompt-major, as ``generate`` orders them). When a
slot's completion ends (EOS, a stop sequence, or ``max_new_tokens``), the slot takes the
next queued completion within the same compiled loop: that completion's prompt is
prefilled into the slot's rows of the KV cache (the whole row is overwritten: keys,
values and the slot mask) and its first token is sampled from the prefill's logits; the
slot then decodes on with the others. Each slot keeps its own step, rotary position and
cache write index (the decode step is the model ``vmap``ped over slots, each with a
batch-1 cache and its own index), so slots at different points of their completions
share one decode step. The loop ends when the queue is empty and every slot has ended.

Layout: every completion sits in its slot's cache row exactly where ``generate`` puts
it: the left-padded prompt in slots ``[0, P)``, token ``t - 1`` at slot ``P + t - 1``.

Exactness. At temperature 0 the tokens of every completion are the static sampler's
(greedy on the same logits, which differ only by float rounding: the cache is attended
in another width and the products have other shapes). At temperature > 0, completion
``r`` (row ``r`` of ``generate``'s output) draws at step ``t`` the Gumbel noise of row
``r`` of ``generate``'s draw at step ``t`` (``prng.gumbel_rows``: the key
``fold_in(key, t)``, the row's own counters), so with the same ``key`` the samples are
``generate``'s too, up to that rounding (a draw flips only where two candidates' noisy
logits tie to within it); ``tests/lm/test_continuous.py`` checks both, tokens equal
and log-probabilities to 1e-5. Which slot decodes a completion, and when, does not
change what it samples.

Partial rollouts (Kimi k1.5, sec. 2.6.2). With ``token_budget`` a completion samples at
most that many tokens in one call; one cut there (``finished`` False, shorter than
``max_new_tokens``) frees its slot. A later call given the earlier output as ``prefix``
continues each row where it stopped: the prompt and the row's tokens but the last are
prefilled into the slot's cache row (right-padded after them, the padding masked), and
the slot's first decode step consumes the last token and samples the next, with the
noise of that row and step. Rows that had ended are copied through untouched; their
tokens and the log-probabilities of every earlier token are the prefix's, bit for bit
(the behaviour policy's, kept). So a completion cut and continued under the same key
is the one decoded in one go (tested); under the next update's key it goes on with
fresh noise.

What does not live here: the model, the static sampler and the pieces reused from it
(prefill, the sampling of one step, options and their checks: sampling.py), and the
RL loop (jaxrl/algorithms/lm_rollout.py calls this with ``--continuous-batching``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl import prng
from jaxrl.lm.model import KVCache, init_cache
from jaxrl.lm.sampling import (
    SampleOutput,
    _apply,
    _checked_inputs,
    _params_mesh,
    _place_cache,
    _positions,
    _prefill_block,
    _repeat_rows,
    sample_logits_with,
)

__all__ = ["Prefix", "generate_continuous"]


class Prefix(NamedTuple):
    """Completions so far, to continue (`generate_continuous`'s `prefix`; a `SampleOutput`
    serves too): (rows, max_new_tokens) `tokens` and `logprobs`, (rows,) `lengths` (0: a
    new row) and `finished` (ended by EOS or a stop sequence)."""

    tokens: Any
    logprobs: Any
    lengths: Any
    finished: Any


@flax.struct.dataclass
class _Slots:
    """What each of the S decode slots is doing (arrays of S entries).

    row: the queued completion it decodes (the number of completions when it has none).
    step: the step it samples next (tokens of the completion so far).
    start: the step it started from in this call (0, or a continued row's length).
    token: its last token, which the next decode step consumes.
    position: that token's rotary position (real tokens before it).
    live: whether its completion is still going.
    recent: (S, L) its last L tokens, for stop sequences of up to L tokens.
    """

    row: jax.Array
    step: jax.Array
    start: jax.Array
    token: jax.Array
    position: jax.Array
    live: jax.Array
    recent: jax.Array


@flax.struct.dataclass
class _Out:
    """The completions, one row each in queue order (``SampleOutput``'s fields)."""

    tokens: jax.Array
    logprobs: jax.Array
    mask: jax.Array
    finished: jax.Array


def generate_continuous(
    model: Any,
    params: Any,
    prompt_tokens: jax.Array,
    key: jax.Array,
    *,
    max_new_tokens: int,
    num_slots: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | Sequence[int] | None = None,
    prompt_mask: jax.Array | None = None,
    num_samples: int = 1,
    pad_id: int = 0,
    stop_sequences: Sequence[Sequence[int]] | None = None,
    token_budget: int | None = None,
    prefix: Prefix | SampleOutput | None = None,
) -> SampleOutput:
    """``generate``'s completions (same arguments, same ``SampleOutput``), decoded by
    continuous batching in ``num_slots`` slots (see the module docstring).

    ``num_slots`` (static) is the decode batch and the KV cache's rows: at most the
    number of completions, ``B * num_samples``. Each slot's cache holds one prompt and
    its completion (``P + max_new_tokens`` slots).

    Partial rollouts: ``token_budget`` (static; None: none) caps the tokens a completion
    samples in this call; ``prefix``, an earlier call's output for the same prompts and
    shapes (its ``tokens``, ``logprobs``, ``lengths`` and ``finished``; a row of length
    0 is new), is continued: a row that ended (``finished``, or ``max_new_tokens``
    long) is copied, any other goes on from its last token.

    Raises ``ValueError`` (before compiling) for bad arguments, naming the argument, as
    ``generate`` does.
    """
    config = model.config
    prompt_tokens, prompt_mask, opts = _checked_inputs(
        config,
        prompt_tokens,
        prompt_mask,
        num_samples,
        (max_new_tokens, temperature, top_k, top_p, eos_id, stop_sequences),
    )
    rows = prompt_tokens.shape[0] * int(num_samples)
    if not isinstance(num_slots, int | np.integer) or not 1 <= num_slots <= rows:
        raise ValueError(
            f"num_slots must be an int in [1, {rows}] (the prompts x num_samples "
            f"completions), got {num_slots!r}"
        )
    if token_budget is not None and (
        not isinstance(token_budget, int | np.integer) or token_budget < 1
    ):
        raise ValueError(
            f"token_budget must be None or an int >= 1 (tokens a completion samples per "
            f"call), got {token_budget!r}"
        )
    continued = None
    if prefix is not None:
        shape = (rows, int(max_new_tokens))
        continued = (
            jnp.asarray(prefix.tokens, jnp.int32),
            jnp.asarray(prefix.logprobs, jnp.float32),
            jnp.asarray(prefix.lengths, jnp.int32),
            jnp.asarray(prefix.finished, bool),
        )
        shapes = tuple(x.shape for x in continued)
        if shapes != (shape, shape, shape[:1], shape[:1]):
            raise ValueError(
                f"prefix must hold {rows} rows of max_new_tokens={max_new_tokens} tokens "
                f"(tokens and logprobs {shape}, lengths and finished {shape[:1]}), got "
                f"{shapes}"
            )
    return _generate_continuous(
        model,
        params,
        prompt_tokens,
        prompt_mask,
        key,
        jnp.float32(opts.temperature),
        jnp.float32(opts.top_p),
        jnp.asarray(opts.eos),
        jnp.int32(pad_id),
        jnp.asarray(opts.stops),
        continued,
        max_new_tokens=int(max_new_tokens),
        top_k=opts.top_k,
        use_top_p=opts.use_top_p,
        greedy=opts.greedy,
        num_samples=int(num_samples),
        num_slots=int(num_slots),
        token_budget=None if token_budget is None else int(token_budget),
        mesh=_params_mesh(params),
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
        "num_slots",
        "token_budget",
        "mesh",
    ),
)
def _generate_continuous(
    model: Any,
    params: Any,
    prompt_tokens: jax.Array,
    prompt_mask: jax.Array,
    key: jax.Array,
    temperature: jax.Array,
    top_p: jax.Array,
    eos_ids: jax.Array,
    pad_id: jax.Array,
    stops: jax.Array,
    continued: tuple[jax.Array, ...] | None,
    *,
    max_new_tokens: int,
    top_k: int | None,
    use_top_p: bool,
    greedy: bool,
    num_samples: int,
    num_slots: int,
    token_budget: int | None,
    mesh: jax.sharding.Mesh | None,
) -> SampleOutput:
    """The compiled sampler: fill every slot, then decode steps, each followed by the
    refill of the slots whose completion ended, until the queue is empty and every slot
    has ended (one ``while_loop``; the refills are a ``while_loop`` inside it that runs
    once per freed slot, none when no slot ended). With ``continued`` (the prefix's
    tokens, log-probs, lengths, finished), the queue is the rows that have not ended."""
    config = model.config
    batch, prompt_len = prompt_tokens.shape
    rows = batch * num_samples
    cache_len = prompt_len + max_new_tokens
    budget = max_new_tokens if token_budget is None else token_budget

    def sample(steps: jax.Array, row: jax.Array, logits: jax.Array):
        """Step ``steps[i]`` of completion ``row[i]`` from ``logits[i]``, with the noise of
        that row in ``generate``'s draw of all ``rows`` rows at that step."""

        def gumbel(shape: tuple[int, ...]) -> jax.Array:
            keys = jax.vmap(lambda t: prng.fold_in(key, t))(steps)
            return prng.gumbel_rows(keys, row, rows, shape[-1])

        return sample_logits_with(
            gumbel,
            logits,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p if use_top_p else None,
            greedy=greedy,
        )

    def record(out: _Out, row, step, tok, lp, live, recent):
        """Write step ``step[i]`` of completion ``row[i]`` where ``live[i]``; return the
        output, the tokens as consumed next (pad where not live), whether each completion
        ended (EOS or a stop sequence: ``finished``) and the recent tokens."""
        tok = jnp.where(live, tok, pad_id)
        at = (jnp.where(live, row, rows), step)  # not live: out of range, dropped
        out = out.replace(
            tokens=out.tokens.at[at].set(tok, mode="drop"),
            logprobs=out.logprobs.at[at].set(lp, mode="drop"),
            mask=out.mask.at[at].set(True, mode="drop"),
        )
        ended = live & jnp.any(tok[:, None] == eos_ids[None, :], axis=-1)
        if stops.shape[0]:  # static: as `sampling._decode_steps` does
            recent = jnp.concatenate([recent[:, 1:], tok[:, None]], axis=1)
            same = (recent[:, None, :] == stops[None]) | (stops[None] < 0)
            ended = ended | (live & jnp.any(jnp.all(same, axis=-1), axis=-1))
        finished = out.finished.at[jnp.where(ended, row, rows)].set(True, mode="drop")
        return out.replace(finished=finished), tok, ended, recent

    def going_on(ended, step, start):
        """Whether a completion that just sampled step ``step`` samples another: not
        ended, under ``max_new_tokens`` and under this call's budget."""
        return ~ended & (step + 1 < max_new_tokens) & (step + 1 - start < budget)

    def start(row: jax.Array, out: _Out):
        """Prefill the prompts of new completions ``row`` (R,) into a fresh R-row cache
        and sample their step 0: ``(cache, slot state, out)``."""
        prompt = row // num_samples
        tokens, mask = prompt_tokens[prompt], prompt_mask[prompt]
        positions = _positions(mask)
        fresh = init_cache(config, row.shape[0], cache_len)
        logits, fresh = _prefill_block(model, params, tokens, mask, positions, fresh)
        zeros = jnp.zeros_like(row)
        tok, lp = sample(zeros, row, logits)
        live = jnp.ones(row.shape, bool)
        recent = jnp.full((row.shape[0], stops.shape[1]), -1, jnp.int32)
        out, tok, ended, recent = record(out, row, zeros, tok, lp, live, recent)
        slots = _Slots(
            row=row,
            step=zeros + 1,
            start=zeros,
            token=tok,
            position=positions[:, -1] + 1,
            live=going_on(ended, zeros, zeros),
            recent=recent,
        )
        return fresh, slots, out

    def resume(row: jax.Array, out: _Out):
        """Continue completion ``row`` (1,) of ``t0 > 0`` tokens: prefill its prompt and
        its tokens but the last (right-padded) into a fresh one-row cache; the slot's
        next decode step consumes the last and samples step ``t0``."""
        prefix_tokens, _, lengths, _ = continued
        t0 = lengths[row]
        tokens = jnp.concatenate([prompt_tokens[row // num_samples], prefix_tokens[row]], 1)
        steps = jnp.arange(max_new_tokens)
        mask = jnp.concatenate(
            [prompt_mask[row // num_samples], steps[None] < t0[:, None] - 1], axis=1
        )
        positions = _positions(mask)
        fresh = init_cache(config, 1, cache_len)
        # All but the last column: the cache keeps the slot of the last token free.
        _, fresh = _prefill_block(
            model, params, tokens[:, :-1], mask[:, :-1], positions[:, :-1], fresh
        )
        last = jnp.take_along_axis(prefix_tokens[row], t0[:, None] - 1, axis=1)[:, 0]
        # The last `recent` tokens before step t0 (-1 before the completion's start).
        back = t0[:, None] - stops.shape[1] + jnp.arange(stops.shape[1])
        recent = jnp.where(
            back >= 0, jnp.take_along_axis(prefix_tokens[row], jnp.maximum(back, 0), 1), -1
        )
        slots = _Slots(
            row=row,
            step=t0,
            start=t0,
            token=last,
            position=jnp.sum(mask, axis=1, dtype=jnp.int32),
            live=jnp.ones((1,), bool),
            recent=recent,
        )
        return fresh, slots, out

    def refill(carry):
        """Start (or continue) the next queued completion in the first free slot."""
        cache, slots, next_row, out = carry
        slot = jnp.argmax(~slots.live)
        row = queue[next_row][None]
        if continued is None:
            fresh, new, out = start(row, out)
        else:
            fresh, new, out = lax.cond(continued[2][row[0]] > 0, resume, start, row, out)
        put = lambda x, y: lax.dynamic_update_index_in_dim(x, y[0], slot, 0)  # noqa: E731
        cache = cache.replace(
            k=tuple(put(k, f) for k, f in zip(cache.k, fresh.k, strict=True)),
            v=tuple(put(v, f) for v, f in zip(cache.v, fresh.v, strict=True)),
            mask=put(cache.mask, fresh.mask),
        )
        slots = jax.tree.map(put, slots, new)
        return cache, slots, next_row + 1, out

    def refill_all(carry):
        def free_and_queued(carry):
            _, slots, next_row, _ = carry
            return jnp.any(~slots.live) & (next_row < queued)

        return lax.while_loop(free_and_queued, refill, carry)

    def decode_one(tok, pos, index, k, v, mask):
        """One decode step of one slot: its batch-1 cache, written at its own index."""
        cache = KVCache(
            k=tuple(x[None] for x in k), v=tuple(x[None] for x in v), index=index, mask=mask[None]
        )
        logits, cache = _apply(
            model,
            params,
            tok[None, None],
            positions=pos[None, None],
            attention_mask=jnp.ones((1, 1), bool),
            cache=cache,
        )
        k, v = tuple(x[0] for x in cache.k), tuple(x[0] for x in cache.v)
        return logits[0, -1], k, v, cache.mask[0]

    def step(carry):
        """Decode one token in every slot; record it for the live ones; refill."""
        cache, slots, next_row, out = carry
        # The slot consumes token `step - 1` and writes it at cache slot P + step - 1.
        index = prompt_len + slots.step - 1
        logits, k, v, mask = jax.vmap(decode_one)(
            slots.token, slots.position, index, cache.k, cache.v, cache.mask
        )
        cache = cache.replace(k=k, v=v, mask=mask)
        tok, lp = sample(slots.step, slots.row, logits)
        live = slots.live
        out, tok, ended, recent = record(out, slots.row, slots.step, tok, lp, live, slots.recent)
        slots = slots.replace(
            token=jnp.where(live, tok, slots.token),
            position=slots.position + live,
            step=slots.step + live,
            live=live & going_on(ended, slots.step, slots.start),
            recent=recent,
        )
        return refill_all((cache, slots, next_row, out))

    if continued is None:
        queue, queued = jnp.arange(rows, dtype=jnp.int32), rows
        out = _Out(
            tokens=jnp.full((rows, max_new_tokens), pad_id, jnp.int32),
            logprobs=jnp.zeros((rows, max_new_tokens), jnp.float32),
            mask=jnp.zeros((rows, max_new_tokens), bool),
            finished=jnp.zeros((rows,), bool),
        )
    else:
        prefix_tokens, prefix_logprobs, lengths, finished = continued
        kept = jnp.arange(max_new_tokens)[None] < lengths[:, None]
        out = _Out(
            tokens=jnp.where(kept, prefix_tokens, pad_id),
            logprobs=jnp.where(kept, prefix_logprobs, 0.0),
            mask=kept,
            finished=finished,
        )
        ended = finished | (lengths >= max_new_tokens)
        # The rows that go on, first (in order), then the ended ones.
        queue = jnp.argsort(ended.astype(jnp.int32), stable=True).astype(jnp.int32)
        queued = jnp.sum(~ended, dtype=jnp.int32)
    # Every slot free: the refills fill them one row at a time, as they refill later (one
    # prefill program in the loop, not a second one for a first batch: less to compile).
    none = jnp.zeros((num_slots,), jnp.int32)
    slots = _Slots(
        row=none + rows,
        step=none + 1,  # an idle slot's decode step writes at P, a slot it never reads
        start=none,
        token=none,
        position=none,
        live=jnp.zeros((num_slots,), bool),
        recent=jnp.full((num_slots, stops.shape[1]), -1, jnp.int32),
    )
    cache = _place_cache(init_cache(config, num_slots, cache_len), config, mesh)
    next_row = jnp.int32(0)
    carry = refill_all((cache, slots, next_row, out))
    _, _, _, out = lax.while_loop(lambda carry: jnp.any(carry[1].live), step, carry)
    return SampleOutput(
        tokens=out.tokens,
        logprobs=out.logprobs,
        completion_mask=out.mask,
        lengths=jnp.sum(out.mask, axis=-1, dtype=jnp.int32),
        finished=out.finished,
        prompt_tokens=_repeat_rows(prompt_tokens, num_samples),
        prompt_mask=_repeat_rows(prompt_mask, num_samples),
    )
