"""Tests for jaxrl.lm.continuous: continuous batching samples what the static sampler
does, and partial rollouts continue completions as if never cut.

Tiny random one-layer Llama-style models built here (nothing downloaded), their weights
scaled up as in test_sampling.py so that logits are well separated. End tokens make the
completions end at different steps, so slots are refilled at different times. The
default tier shares one shape (3 prompts x 2 samples, 12 new tokens, 3 slots) so that
its tests reuse compiled programs; the sweeps over mixes, slot counts, filters and stop
sequences are `slow`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.lm import continuous
from jaxrl.lm.config import ModelConfig
from jaxrl.lm.continuous import Prefix, generate_continuous
from jaxrl.lm.model import Transformer
from jaxrl.lm.sampling import generate

VOCAB = 32
EOS = (3, 5, 9)  # sampled at temperature > 0, these end completions at many steps
SHAPE = dict(lengths=[5, 2, 4], width=5, max_new_tokens=12, num_samples=2, slots=3)


def _build(seed: int = 0, layers: int = 1):
    config = ModelConfig(
        model_type="llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
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
    model = Transformer(config)
    params = jax.jit(model.init)(jax.random.key(seed), jnp.zeros((1, 4), jnp.int32))
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * 15.0 if path[-1].key in ("kernel", "embedding") else x, params
    )
    return model, params


@pytest.fixture(scope="module")
def tiny():
    return _build()


def _prompts(lengths: list[int], width: int, seed: int = 0):
    """Left-padded random prompts with `lengths` real tokens, `width` columns."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(10, VOCAB, size=(len(lengths), width)).astype(np.int32)
    mask = np.arange(width)[None, :] >= width - np.asarray(lengths)[:, None]
    tokens[~mask] = 0
    return jnp.asarray(tokens), jnp.asarray(mask)


def _end_token_for_a_mix(tokens: np.ndarray) -> int:
    """The token whose first occurrences in the greedy `tokens` rows (decoded without an
    end token) fall at the most different steps, with some row never reaching it: as
    the end token, greedy completions then end at different steps, some at the budget."""

    def spread(token: int) -> tuple[int, bool]:
        hits = [np.flatnonzero(row == token) for row in tokens]
        firsts = {int(h[0]) for h in hits if h.size}
        return len(firsts), any(h.size == 0 for h in hits)

    scores = {t: spread(t) for t in range(VOCAB)}
    return max((t for t in scores if scores[t][1]), key=lambda t: scores[t][0])


def _assert_same(static, continuous) -> None:
    np.testing.assert_array_equal(continuous.tokens, static.tokens)
    np.testing.assert_array_equal(continuous.completion_mask, static.completion_mask)
    np.testing.assert_array_equal(continuous.lengths, static.lengths)
    np.testing.assert_array_equal(continuous.finished, static.finished)
    np.testing.assert_array_equal(continuous.prompt_tokens, static.prompt_tokens)
    np.testing.assert_array_equal(continuous.prompt_mask, static.prompt_mask)
    np.testing.assert_allclose(continuous.logprobs, static.logprobs, atol=1e-5, rtol=0)


def _ended(out, max_new_tokens: int) -> np.ndarray:
    return np.asarray(out.finished) | (np.asarray(out.lengths) >= max_new_tokens)


# ---------------------------------------------------------------------- continuous batching
def _greedy_case(model, params, lengths, width, max_new_tokens, num_samples, slots):
    tokens, mask = _prompts(lengths, width)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        temperature=0.0,
        prompt_mask=mask,
        num_samples=num_samples,
        pad_id=1,
    )
    endless = generate(model, params, tokens, jax.random.key(0), **kwargs)
    kwargs["eos_id"] = _end_token_for_a_mix(np.asarray(endless.tokens))
    static = generate(model, params, tokens, jax.random.key(0), **kwargs)
    assert len(set(np.asarray(static.lengths).tolist())) >= 2, static.lengths  # a mix
    assert not np.all(static.finished), "some rows should run to max_new_tokens"
    for num_slots in slots:
        out = generate_continuous(
            model, params, tokens, jax.random.key(0), num_slots=num_slots, **kwargs
        )
        _assert_same(static, out)


def test_greedy_tokens_equal_the_static_samplers(tiny):
    _greedy_case(*tiny, **{**SHAPE, "slots": (SHAPE["slots"],)})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lengths", "width", "max_new_tokens", "num_samples", "slots"),
    [
        ([5, 2, 4], 5, 12, 1, (1, 2, 3)),
        ([1, 6, 3, 6, 2, 4], 6, 20, 1, (2, 5)),
        ([4, 3], 4, 16, 4, (3, 8)),
    ],
)
def test_greedy_tokens_equal_the_static_samplers_over_mixes_and_slot_counts(
    lengths, width, max_new_tokens, num_samples, slots
):
    _greedy_case(*_build(layers=2), lengths, width, max_new_tokens, num_samples, slots)


def _sampled_case(model, params, filters: dict, slots: tuple[int, ...]) -> None:
    tokens, mask = _prompts(SHAPE["lengths"], SHAPE["width"], seed=1)
    kwargs = dict(
        max_new_tokens=SHAPE["max_new_tokens"],
        temperature=1.3,
        eos_id=EOS,
        prompt_mask=mask,
        num_samples=SHAPE["num_samples"],
        **filters,
    )
    key = jax.random.key(7)
    static = generate(model, params, tokens, key, **kwargs)
    assert len(set(np.asarray(static.lengths).tolist())) >= 3, static.lengths
    for num_slots in slots:
        out = generate_continuous(model, params, tokens, key, num_slots=num_slots, **kwargs)
        _assert_same(static, out)
    other = generate_continuous(
        model, params, tokens, jax.random.key(8), num_slots=slots[0], **kwargs
    )
    assert not np.array_equal(other.tokens, static.tokens)


def test_sampled_tokens_equal_the_static_samplers_under_the_same_key(tiny):
    """Each completion draws generate's noise for its row and step, whichever slot runs it."""
    _sampled_case(*tiny, {}, (SHAPE["slots"],))


@pytest.mark.slow
@pytest.mark.parametrize(
    "filters", [{"top_k": 5}, {"top_p": 0.7}, {"top_k": 8, "top_p": 0.9}], ids=str
)
def test_sampled_tokens_equal_the_static_samplers_with_filters_and_slot_counts(tiny, filters):
    _sampled_case(*tiny, filters, (1, 4, 6))


@pytest.mark.slow
def test_stop_sequences_end_completions_as_in_the_static_sampler(tiny):
    model, params = tiny
    tokens, mask = _prompts([3, 5, 1, 4], 5, seed=2)
    kwargs = dict(
        max_new_tokens=16,
        temperature=1.0,
        eos_id=4,
        prompt_mask=mask,
        num_samples=2,
        stop_sequences=[[12], [20, 21]],
    )
    key = jax.random.key(3)
    static = generate(model, params, tokens, key, **kwargs)
    assert np.any(static.finished) and not np.all(static.finished)
    _assert_same(static, generate_continuous(model, params, tokens, key, num_slots=3, **kwargs))


@pytest.mark.slow
def test_completions_of_one_token_and_no_end_token(tiny):
    """max_new_tokens = 1 ends every slot at its first token (the refill loop runs the
    whole queue); without an end token every completion runs to its budget."""
    model, params = tiny
    tokens, mask = _prompts([2, 3, 1], 3, seed=3)
    for max_new_tokens, eos in ((1, EOS), (6, None)):
        kwargs = dict(max_new_tokens=max_new_tokens, temperature=1.0, eos_id=eos, prompt_mask=mask)
        static = generate(model, params, tokens, jax.random.key(1), **kwargs)
        out = generate_continuous(model, params, tokens, jax.random.key(1), num_slots=2, **kwargs)
        _assert_same(static, out)


# ---------------------------------------------------------------------- partial rollouts
def _partial_case(model, params, temperature: float, max_new_tokens: int, slots: int) -> None:
    tokens, mask = _prompts(SHAPE["lengths"], SHAPE["width"], seed=4)
    kwargs = dict(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        eos_id=EOS,
        prompt_mask=mask,
        num_samples=SHAPE["num_samples"],
    )
    key = jax.random.key(11)
    whole = generate(model, params, tokens, key, **kwargs)
    out = generate_continuous(model, params, tokens, key, num_slots=slots, token_budget=4, **kwargs)
    assert np.asarray(out.lengths).max() == 4 and not _ended(out, max_new_tokens).all()
    np.testing.assert_array_equal(out.tokens[:, :4], whole.tokens[:, :4])
    calls = 1
    while not _ended(out, max_new_tokens).all():
        before = out
        prefix = Prefix(before.tokens, before.logprobs, before.lengths, before.finished)
        out = generate_continuous(
            model, params, tokens, key, num_slots=slots, token_budget=4, prefix=prefix, **kwargs
        )
        calls += 1
        kept = np.asarray(before.completion_mask)
        np.testing.assert_array_equal(np.asarray(out.tokens)[kept], np.asarray(before.tokens)[kept])
        np.testing.assert_array_equal(
            np.asarray(out.logprobs)[kept], np.asarray(before.logprobs)[kept]
        )
        assert (np.asarray(out.lengths) - np.asarray(before.lengths)).max() <= 4
    assert calls >= 3, calls  # the longest completions were cut several times
    _assert_same(whole, out)


def test_completions_cut_by_a_budget_and_continued_equal_uninterrupted_ones(tiny):
    """Partial rollouts: each call samples at most 4 tokens per completion; the next call
    continues the cut ones from the earlier output. Under one key the result is the
    uninterrupted sampler's, and every earlier token and log-probability is kept as it
    was sampled."""
    _partial_case(*tiny, 1.2, SHAPE["max_new_tokens"], SHAPE["slots"])


@pytest.mark.slow
def test_greedy_completions_cut_and_continued_equal_uninterrupted_ones(tiny):
    _partial_case(*tiny, 0.0, 15, 4)


@pytest.mark.slow
def test_a_prefix_of_new_rows_is_an_uninterrupted_call(tiny):
    """Rows of length 0 in the prefix start from their prompt; with no budget the call
    is the plain continuous sampler's."""
    model, params = tiny
    tokens, mask = _prompts([3, 5], 5, seed=5)
    kwargs = dict(max_new_tokens=10, temperature=1.0, eos_id=EOS, prompt_mask=mask, num_samples=2)
    plain = generate_continuous(model, params, tokens, jax.random.key(2), num_slots=3, **kwargs)
    empty = Prefix(
        tokens=jnp.zeros_like(plain.tokens),
        logprobs=jnp.zeros_like(plain.logprobs),
        lengths=jnp.zeros_like(plain.lengths),
        finished=jnp.zeros_like(plain.finished),
    )
    again = generate_continuous(
        model, params, tokens, jax.random.key(2), num_slots=3, prefix=empty, **kwargs
    )
    _assert_same(plain, again)


# ---------------------------------------------------------------------- bad input
@pytest.fixture
def never_compiled(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("compiled")

    monkeypatch.setattr(continuous, "_generate_continuous", never)


@pytest.mark.parametrize(
    ("num_slots", "match"),
    [(0, "num_slots"), (7, r"num_slots must be an int in \[1, 6\]"), (2.0, "num_slots")],
)
def test_bad_slot_counts_raise_before_compiling(tiny, never_compiled, num_slots, match):
    model, params = tiny
    tokens, mask = _prompts([2, 3, 1], 3)
    kwargs = dict(max_new_tokens=4, prompt_mask=mask, num_samples=2)
    with pytest.raises(ValueError, match=match):
        generate_continuous(model, params, tokens, jax.random.key(0), num_slots=num_slots, **kwargs)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_continuous(model, params, tokens, jax.random.key(0), max_new_tokens=0, num_slots=1)


def test_bad_budget_or_prefix_raises_before_compiling(tiny, never_compiled):
    model, params = tiny
    tokens, mask = _prompts([2, 3], 3)
    kwargs = dict(max_new_tokens=4, prompt_mask=mask, num_slots=2)
    key = jax.random.key(0)
    for budget in (0, -1, 1.5):
        with pytest.raises(ValueError, match=r"token_budget must be None or an int >= 1"):
            generate_continuous(model, params, tokens, key, token_budget=budget, **kwargs)
    rows = np.zeros((2, 5), np.int32)  # 5 tokens, not max_new_tokens = 4
    wrong = Prefix(rows, rows.astype(np.float32), np.zeros(2, np.int32), np.zeros(2, bool))
    with pytest.raises(ValueError, match=r"prefix must hold 2 rows of max_new_tokens=4"):
        generate_continuous(model, params, tokens, key, prefix=wrong, **kwargs)
