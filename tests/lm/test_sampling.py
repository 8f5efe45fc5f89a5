"""Tests for jaxrl.lm.sampling: logit filters, generate and token_logprobs.

Tiny random Llama-style models are built in the test (nothing downloaded). Their
weights are scaled up from the default init so logits are well separated and
greedy ties (which would make cached vs uncached comparisons flaky) do not occur.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.lm import sampling
from jaxrl.lm.config import ModelConfig
from jaxrl.lm.model import Transformer
from jaxrl.lm.sampling import (
    generate,
    sample_logits,
    token_logprobs,
    top_k_filter,
    top_p_filter,
)

VOCAB = 32


def _config(**overrides):
    fields = dict(
        model_type="llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        attention_bias=False,
        qk_norm=False,
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def _build(config, seed=0):
    model = Transformer(config)
    params = jax.jit(model.init)(jax.random.key(seed), jnp.zeros((1, 4), jnp.int32))
    # 0.02-std init gives near-uniform logits; scale matrices up to separate them.
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * 15.0 if path[-1].key in ("kernel", "embedding") else x, params
    )
    return model, params


@pytest.fixture(scope="module")
def tiny():
    return _build(_config())


@pytest.fixture(scope="module")
def tiny_one_layer():
    """One layer is enough where cache depth does not matter (cheaper to compile)."""
    return _build(_config(num_hidden_layers=1), seed=2)


@pytest.fixture(scope="module")
def prompts():
    """Three left-padded prompts of lengths 5, 2 and 4 (P = 5)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, VOCAB, size=(3, 5)).astype(np.int32)
    mask = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 1, 1, 1, 1]], dtype=bool)
    tokens[~mask] = 0
    return jnp.asarray(tokens), jnp.asarray(mask)


def _naive_greedy(model, params, tokens, mask, steps, eos_id=None):
    """Greedy decoding by re-running the full uncached forward on the growing sequence.

    Uses one fixed-size buffer (future slots are zeros; causality hides them) so the
    forward compiles once.
    """
    b, p = tokens.shape
    buf = jnp.concatenate([tokens, jnp.zeros((b, steps), jnp.int32)], axis=1)
    full_mask = jnp.concatenate([mask, jnp.ones((b, steps), bool)], axis=1)
    forward = jax.jit(lambda t: model.apply(params, t, attention_mask=full_mask))
    for t in range(steps):
        nxt = jnp.argmax(forward(buf)[:, p + t - 1], axis=-1).astype(jnp.int32)
        buf = buf.at[:, p + t].set(nxt)
    out = np.array(buf[:, p:])
    comp_mask = np.ones_like(out, dtype=bool)
    if eos_id is not None:
        for row in range(b):
            hits = np.flatnonzero(out[row] == eos_id)
            if hits.size:
                comp_mask[row, hits[0] + 1 :] = False
                out[row, hits[0] + 1 :] = 0
    return out, comp_mask


@functools.partial(jax.jit, static_argnames="model")
def _naive_logprobs(model, params, tokens, mask, temperature=1.0):
    """log p(tokens[:, t+1] | prefix) and entropy from the full float32 logits."""
    logits = model.apply(params, tokens, attention_mask=mask)[:, :-1] / temperature
    logp = jax.nn.log_softmax(logits, axis=-1)
    lp = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    valid = mask[:, 1:]
    return jnp.where(valid, lp, 0.0), jnp.where(valid, ent, 0.0)


# --------------------------------------------------------------------------- filters


def test_top_k_filter_keeps_k_largest():
    logits = jnp.array([[0.1, 3.0, -1.0, 2.0, 0.5], [5.0, 4.0, 3.0, 2.0, 1.0]])
    out = top_k_filter(logits, 2)
    np.testing.assert_array_equal(np.isfinite(out), [[0, 1, 0, 1, 0], [1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(out[np.isfinite(out)], logits[np.isfinite(out)])


@pytest.mark.parametrize(
    "p, kept",
    [
        (0.3, {0}),  # the top token alone already reaches p
        (0.55, {0, 3}),  # 0.5 < 0.55: the token crossing the threshold (0.2) is kept
        (0.75, {0, 3, 1}),  # 0.5 + 0.2 < 0.75 -> add 0.15 (mass 0.85)
        (0.9, {0, 3, 1, 4}),
        (1.0, {0, 1, 2, 3, 4}),
    ],
)
def test_top_p_filter_keeps_nucleus(p, kept):
    probs = np.array([0.5, 0.15, 0.05, 0.2, 0.1])
    logits = jnp.log(jnp.asarray(probs))[None].repeat(2, axis=0) + jnp.array([[0.0], [3.0]])
    out = np.asarray(jax.jit(top_p_filter)(logits, p))
    for row in out:
        assert set(np.flatnonzero(np.isfinite(row)).tolist()) == kept


def test_sample_logits_greedy_and_logprob_convention():
    logits = jax.random.normal(jax.random.key(0), (4, 7)) * 3
    tok, lp = jax.jit(functools.partial(sample_logits, greedy=True))(jax.random.key(1), logits)
    np.testing.assert_array_equal(tok, jnp.argmax(logits, -1))
    ref = jnp.take_along_axis(jax.nn.log_softmax(logits), tok[:, None], -1)[:, 0]
    np.testing.assert_allclose(lp, ref, rtol=1e-6, atol=1e-6)
    # Sampled with temperature and filters: log-prob is the full tempered log-softmax.
    fn = functools.partial(sample_logits, temperature=0.5, top_k=3, top_p=0.8)
    tok, lp = jax.jit(fn)(jax.random.key(2), logits)
    ref = jnp.take_along_axis(jax.nn.log_softmax(logits / 0.5), tok[:, None], -1)[:, 0]
    np.testing.assert_allclose(lp, ref, rtol=1e-6, atol=1e-6)


def test_categorical_draws_the_tokens_jax_random_categorical_draws():
    """The CPU-friendly Gumbel-max argmax picks exactly jax's tokens, ties and NaN included."""
    logits = jax.random.normal(jax.random.key(0), (256, 50)) * 3
    logits = logits.at[:, 7].set(-jnp.inf).at[3].set(-jnp.inf)  # masked token, masked row
    logits = logits.at[5, 11].set(jnp.nan)  # NaN wins, as in jnp.argmax
    logits = logits.at[6].set(jnp.inf).at[8, 40:].set(jnp.inf)  # ties at +inf: first index
    for seed in range(3):
        key = jax.random.key(seed)
        ours = jax.jit(sampling._categorical)(key, logits)
        ref = jax.jit(lambda k, z: jax.random.categorical(k, z, axis=-1))(key, logits)
        np.testing.assert_array_equal(ours, ref)
        assert ours.dtype == jnp.int32
    assert ours[5] == 11 and ours[6] == 0 and ours[8] == 40


def _expected_probs(base, temperature=1.0, top_k=None, top_p=None):
    """Reference: temperature, top-k, then nucleus over the renormalised rest."""
    z = np.log(base) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p)
    keep = np.zeros_like(p, dtype=bool)
    keep[order[: top_k or len(p)]] = True
    q = np.where(keep, p, 0.0)
    q /= q.sum()
    if top_p is not None:
        sq = q[order]
        before = np.cumsum(sq) - sq
        nucleus = order[(before < top_p) & (sq > 0)]
        keep = np.zeros_like(keep)
        keep[nucleus] = True
        q = np.where(keep, q, 0.0)
        q /= q.sum()
    return q


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(temperature=2.0), dict(top_k=3), dict(top_p=0.7), dict(top_k=4, top_p=0.8)],
)
def test_sample_frequencies_match_distribution(kwargs):
    base = np.array([0.35, 0.25, 0.15, 0.1, 0.08, 0.05, 0.02])
    n = 20_000
    logits = jnp.broadcast_to(jnp.log(jnp.asarray(base, jnp.float32)), (n, base.size))
    # logits passed as an argument: as a closure constant XLA would constant-fold the sort.
    tok, _ = jax.jit(lambda k, z: sample_logits(k, z, **kwargs))(jax.random.key(42), logits)
    counts = np.bincount(np.asarray(tok), minlength=base.size)
    expected = _expected_probs(base, **kwargs) * n
    assert np.all(counts[expected == 0] == 0), "sampled a filtered-out token"
    support = expected > 0
    chi2 = np.sum((counts[support] - expected[support]) ** 2 / expected[support])
    # 99.9% quantile of chi-square with <= 6 degrees of freedom is 22.5.
    assert chi2 < 22.5, (chi2, counts, expected)


# --------------------------------------------------------------------------- generate


def test_greedy_cached_equals_uncached_with_eos(tiny, prompts):
    model, params = tiny
    tokens, mask = prompts
    steps = 8
    ref, _ = _naive_greedy(model, params, tokens, mask, steps)
    eos = int(ref[0, 3])  # row 0 stops at its first occurrence of this token
    first = int(np.flatnonzero(ref[0] == eos)[0])
    ref, ref_mask = _naive_greedy(model, params, tokens, mask, steps, eos_id=eos)
    out = generate(
        model,
        params,
        tokens,
        jax.random.key(0),
        max_new_tokens=steps,
        temperature=0.0,
        prompt_mask=mask,
        eos_id=eos,
    )
    np.testing.assert_array_equal(out.tokens, ref)
    np.testing.assert_array_equal(out.completion_mask, ref_mask)
    np.testing.assert_array_equal(out.lengths, ref_mask.sum(1))
    assert out.completion_mask[0, first] and not out.completion_mask[0, first + 1 :].any()
    np.testing.assert_array_equal(out.finished, (ref == eos).any(1))
    assert np.all(np.asarray(out.logprobs)[~ref_mask] == 0.0)
    assert out.tokens.dtype == jnp.int32 and out.logprobs.dtype == jnp.float32


def test_left_padded_batch_matches_each_prompt_alone(tiny, prompts):
    model, params = tiny
    tokens, mask = prompts
    batched = generate(
        model,
        params,
        tokens,
        jax.random.key(0),
        max_new_tokens=6,
        temperature=0.0,
        prompt_mask=mask,
    )
    for row in (1,):  # the most padded row, run unpadded on its own
        alone = tokens[row : row + 1, np.asarray(mask[row])]
        single = generate(
            model, params, alone, jax.random.key(0), max_new_tokens=6, temperature=0.0
        )
        np.testing.assert_array_equal(single.tokens[0], batched.tokens[row])
        np.testing.assert_allclose(single.logprobs[0], batched.logprobs[row], atol=2e-5)


def test_generate_logprobs_match_token_logprobs(tiny, prompts):
    model, params = tiny
    tokens, mask = prompts
    temp = 0.7
    out = generate(
        model,
        params,
        tokens,
        jax.random.key(3),
        max_new_tokens=7,
        temperature=temp,
        top_k=12,
        top_p=0.9,
        eos_id=5,
        prompt_mask=mask,
        num_samples=2,
    )
    seq, seq_mask = out.sequences()
    p = tokens.shape[1]
    lp, ent = token_logprobs(
        model,
        params,
        seq,
        attention_mask=seq_mask,
        targets_start=p,
        temperature=temp,
        chunk_size=5,
        return_entropy=True,
    )
    assert lp.shape == ent.shape == (6, p + 7 - 1)
    assert np.all(np.asarray(lp[:, : p - 1]) == 0.0)
    np.testing.assert_allclose(lp[:, p - 1 :], out.logprobs, atol=2e-5)
    ref_lp, ref_ent = _naive_logprobs(model, params, seq, seq_mask, temp)
    np.testing.assert_allclose(lp[:, p - 1 :], ref_lp[:, p - 1 :], atol=2e-5)
    np.testing.assert_allclose(ent[:, p - 1 :], ref_ent[:, p - 1 :], atol=2e-5)
    # Groups are prompt-major: rows [2i, 2i+1] carry prompt i.
    np.testing.assert_array_equal(out.prompt_tokens, np.repeat(tokens, 2, axis=0))
    np.testing.assert_array_equal(out.prompt_mask, np.repeat(mask, 2, axis=0))


def test_determinism_and_groups(tiny, prompts):
    model, params = tiny
    tokens, mask = prompts
    kw = dict(
        max_new_tokens=7,
        temperature=0.7,
        top_k=12,
        top_p=0.9,
        eos_id=5,
        prompt_mask=mask,
        num_samples=2,
    )  # same statics as above: no recompile
    a = generate(model, params, tokens, jax.random.key(3), **kw)
    b = generate(model, params, tokens, jax.random.key(3), **kw)
    c = generate(model, params, tokens, jax.random.key(4), **kw)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.tokens, c.tokens)
    # Samples within a group differ (same prompt, independent draws).
    assert not np.array_equal(a.tokens[0::2], a.tokens[1::2])


def test_greedy_groups_and_top_k_one(tiny, prompts):
    model, params = tiny
    tokens, mask = prompts
    greedy = generate(
        model,
        params,
        tokens,
        jax.random.key(0),
        max_new_tokens=6,
        temperature=0.0,
        prompt_mask=mask,
    )
    # Also with a fixed, larger cache than needed: same completions.
    groups = generate(
        model,
        params,
        tokens,
        jax.random.key(0),
        max_new_tokens=6,
        temperature=0.0,
        prompt_mask=mask,
        num_samples=3,
        cache_len=20,
    )
    np.testing.assert_array_equal(groups.tokens, np.repeat(greedy.tokens, 3, axis=0))
    top1 = generate(
        model,
        params,
        tokens,
        jax.random.key(9),
        max_new_tokens=6,
        temperature=1.0,
        top_k=1,
        prompt_mask=mask,
    )
    np.testing.assert_array_equal(top1.tokens, greedy.tokens)


def test_decode_windows():
    assert sampling.decode_windows(8, 136) == (64, 136)
    assert sampling.decode_windows(8, 520) == (64, 128, 256, 520)
    assert sampling.decode_windows(100, 600) == (128, 256, 600)  # windows <= P skipped
    assert sampling.decode_windows(5, 45) == (45,)
    assert sampling.decode_windows(5, 45, min_window=8) == (8, 16, 45)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=0.7, top_k=12, top_p=0.9, eos_id=5, num_samples=2),
        dict(temperature=1.0),
        dict(temperature=0.0, eos_id=7),
    ],
)
def test_segmented_decode_equals_full_window(tiny, prompts, monkeypatch, kwargs):
    """Decoding in growing cache windows gives the same rollouts as one full-size cache.

    Small windows (8, 16, then the full 45 slots) so the 40 steps cross two segment
    boundaries; slots past the write index are masked either way, so tokens must be
    identical and log-probs equal up to float reassociation.
    """
    model, params = tiny
    tokens, mask = prompts
    run = functools.partial(
        generate,
        model,
        params,
        tokens,
        jax.random.key(11),
        max_new_tokens=40,
        prompt_mask=mask,
        **kwargs,
    )
    windows = sampling.decode_windows
    monkeypatch.setattr(sampling, "decode_windows", lambda p, n: windows(p, n, min_window=8))
    assert sampling.decode_windows(5, 45) == (8, 16, 45)
    segmented = run()
    monkeypatch.setattr(sampling, "decode_windows", lambda p, n: (n,))
    full = run()
    np.testing.assert_array_equal(segmented.tokens, full.tokens)
    np.testing.assert_array_equal(segmented.completion_mask, full.completion_mask)
    np.testing.assert_array_equal(segmented.finished, full.finished)
    np.testing.assert_allclose(segmented.logprobs, full.logprobs, atol=2e-5)
    assert int(full.lengths.max()) > 12  # some row decoded into the third segment


def test_token_logprobs_matches_naive_and_gradients(tiny_one_layer):
    model, params = tiny_one_layer
    tokens = jax.random.randint(jax.random.key(5), (3, 9), 0, VOCAB)
    mask = jnp.array([[1] * 9, [0, 0, 0] + [1] * 6, [0] + [1] * 8], bool)
    lp, ent = token_logprobs(
        model, params, tokens, attention_mask=mask, chunk_size=7, return_entropy=True
    )
    ref_lp, ref_ent = _naive_logprobs(model, params, tokens, mask)
    np.testing.assert_allclose(lp, ref_lp, atol=2e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=2e-5)

    # return_top: the log-probability of the argmax token; a target equal to the argmax
    # has exactly that log-probability, any other target less.
    lp_top, ent_top, top = token_logprobs(
        model,
        params,
        tokens,
        attention_mask=mask,
        chunk_size=7,
        return_entropy=True,
        return_top=True,
    )
    np.testing.assert_array_equal(lp_top, lp)
    np.testing.assert_array_equal(ent_top, ent)
    logp = jax.nn.log_softmax(model.apply(params, tokens, attention_mask=mask)[:, :-1], axis=-1)
    valid = np.asarray(mask[:, 1:])
    np.testing.assert_allclose(top, np.where(valid, logp.max(-1), 0.0), atol=2e-5)
    is_argmax = np.asarray(logp.argmax(-1) == tokens[:, 1:])
    np.testing.assert_array_equal((lp >= top)[valid], is_argmax[valid])
    # Make every row's last token the argmax (its context, all earlier tokens, is
    # unchanged), so both cases occur: then the log-probability equals `top` exactly.
    last = tokens.at[:, -1].set(logp[:, -1].argmax(-1))
    lp_l, top_l = token_logprobs(model, params, last, attention_mask=mask, return_top=True)
    np.testing.assert_array_equal(lp_l[:, -1], top_l[:, -1])
    np.testing.assert_array_equal(lp_l[:, :-1] >= top_l[:, :-1], is_argmax[:, :-1] | ~valid[:, :-1])

    def loss(fn):
        return lambda p: jnp.sum(fn(p) * mask[:, 1:])

    g = jax.jit(
        jax.grad(
            loss(lambda p: token_logprobs(model, p, tokens, attention_mask=mask, chunk_size=4))
        )
    )(params)
    g_ref = jax.jit(jax.grad(loss(lambda p: _naive_logprobs(model, p, tokens, mask)[0])))(params)
    for x, y in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-4, rtol=1e-4)


def test_value_head_and_tied_models_work():
    config = _config(value_head=True, tie_word_embeddings=True, num_hidden_layers=1)
    model, params = _build(config, seed=1)
    tokens = jax.random.randint(jax.random.key(0), (2, 4), 0, VOCAB)
    out = generate(model, params, tokens, jax.random.key(0), max_new_tokens=3, temperature=0.0)
    ref, _ = _naive_greedy_plain(model, params, tokens, 3)
    np.testing.assert_array_equal(out.tokens, ref)
    seq, seq_mask = out.sequences()
    lp = token_logprobs(model, params, seq, attention_mask=seq_mask, targets_start=4)
    np.testing.assert_allclose(lp[:, 3:], out.logprobs, atol=2e-5)


def _naive_greedy_plain(model, params, tokens, steps):
    """Greedy reference for a value-head model (the forward returns (logits, values))."""
    b, p = tokens.shape
    buf = jnp.concatenate([tokens, jnp.zeros((b, steps), jnp.int32)], axis=1)
    forward = jax.jit(lambda t: model.apply(params, t)[0])
    for t in range(steps):
        buf = buf.at[:, p + t].set(jnp.argmax(forward(buf)[:, p + t - 1], -1).astype(jnp.int32))
    return np.asarray(buf[:, p:]), None


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(max_new_tokens=60), r"5 \+ 60 = 65.*max_position_embeddings=64"),
        (dict(max_new_tokens=10, cache_len=12), r"5 \+ 10 = 15.*cache_len=12"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=4, temperature=-1.0), "temperature"),
        (dict(max_new_tokens=4, temperature=float("nan")), "temperature"),
        (dict(max_new_tokens=4, top_k=0), "top_k"),
        (dict(max_new_tokens=4, top_k=VOCAB + 1), "top_k"),
        (dict(max_new_tokens=4, top_p=0.0), "top_p"),
        (dict(max_new_tokens=4, top_p=1.5), "top_p"),
        (dict(max_new_tokens=4, num_samples=0), "num_samples"),
        (dict(max_new_tokens=4, eos_id=VOCAB), "eos_id"),
        (dict(max_new_tokens=4, prompt_mask=np.ones((3, 4), bool)), "prompt_mask"),
        (
            dict(max_new_tokens=4, prompt_mask=np.array([[1] * 5, [0] * 5, [0] * 5], bool)),
            r"prompt_mask has rows with no real token \(rows 1, 2\)",
        ),
    ],
)
def test_bad_arguments_raise_before_compiling(tiny, prompts, monkeypatch, kwargs, match):
    model, params = tiny
    tokens, _ = prompts

    def must_not_compile(*args, **kw):
        raise AssertionError("compiled before validating")

    monkeypatch.setattr(sampling, "_generate", must_not_compile)
    with pytest.raises(ValueError, match=match):
        generate(model, params, tokens, jax.random.key(0), **kwargs)


def test_token_logprobs_bad_arguments(tiny):
    model, params = tiny
    tokens = jnp.zeros((2, 6), jnp.int32)
    with pytest.raises(ValueError, match="targets_start"):
        token_logprobs(model, params, tokens, targets_start=6)
    with pytest.raises(ValueError, match="chunk_size"):
        token_logprobs(model, params, tokens, chunk_size=0)


def test_stop_sequences_end_a_row_where_they_end_and_change_nothing_before(tiny_one_layer, prompts):
    """Issue 33: a tool call's end marker stops decoding like EOS (kept in the row,
    `finished` True). At temperature 0 the rows are the unstopped rows cut just after the
    first occurrence of the sequence; rows where it never occurs are unchanged."""
    model, params = tiny_one_layer
    tokens, mask = prompts
    kwargs = dict(max_new_tokens=12, temperature=0.0, prompt_mask=mask)
    free = generate(model, params, tokens, jax.random.key(0), **kwargs)
    free_tokens = np.asarray(free.tokens)
    stop = free_tokens[0, 3:5].tolist()  # two tokens row 0 emits at steps 3 and 4
    stopped = generate(model, params, tokens, jax.random.key(0), stop_sequences=[stop], **kwargs)
    for row in range(free_tokens.shape[0]):
        seq = free_tokens[row].tolist()
        ends = [t + 2 for t in range(len(seq) - 1) if seq[t : t + 2] == stop]
        end = ends[0] if ends else len(seq)
        kept = np.asarray(stopped.completion_mask[row])
        assert kept.tolist() == [True] * end + [False] * (len(seq) - end), row
        np.testing.assert_array_equal(np.asarray(stopped.tokens[row])[:end], seq[:end])
        np.testing.assert_array_equal(
            np.asarray(stopped.logprobs[row])[:end], np.asarray(free.logprobs[row])[:end]
        )
        assert bool(stopped.finished[row]) == (bool(ends) or bool(free.finished[row]))
    assert int(stopped.lengths[0]) == 5
    # A one-token stop sequence; and bad ones are refused before compiling.
    one = generate(model, params, tokens, jax.random.key(0), stop_sequences=[[seq[0]]], **kwargs)
    assert int(one.lengths[-1]) == 1
    with pytest.raises(ValueError, match="empty sequence"):
        generate(model, params, tokens, jax.random.key(0), stop_sequences=[[]], **kwargs)
    with pytest.raises(ValueError, match="stop token 99 is outside the vocabulary"):
        generate(model, params, tokens, jax.random.key(0), stop_sequences=[[99]], **kwargs)
