"""KV-cache reuse across the turns of multi-turn episodes (jaxrl/algorithms/lm_multiturn.py,
`jaxrl.lm.prefill` and `jaxrl.lm.sample_from_cache`).

Exactness: episodes played with one cache kept between turns (only the new tokens
prefilled, the host's `CacheSlots` masking padding and dropped tokens) give the same
next-token logits, the same sampled tokens and the same log-probs (within float
rounding) as re-reading each row's whole context with `generate` every turn; for a GQA
model and the same model with LoRA adapters merged, with left padding, ragged prompts,
replies that stop at different lengths, a reply cut short (as a tool call cuts it),
feedback of different lengths and an episode that ends early. Then the algorithm's own
turns (`play`) with and without reuse, and the host's books over one update's rounds.
"""

from __future__ import annotations

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import grpo
from jaxrl.algorithms import lm_multiturn as lmt
from jaxrl.algorithms.lm_common import left_pad
from jaxrl.lm import (
    LoRAConfig,
    Transformer,
    apply_lora,
    generate,
    init_cache,
    init_lora,
    prefill,
    sample_from_cache,
)
from jaxrl.lm.config import ModelConfig

VOCAB, PAD = 32, 0
EOS = tuple(range(1, 11))  # a third of the vocabulary ends a reply: ragged turn lengths
P, T, F, N = 6, 4, 3, 3  # longest prompt, reply budget, longest feedback, turns
BLOCK = F + 1
SLOTS = P + (N - 1) * BLOCK + N * (T - 1)  # S, as MultiTurnRollout sizes it
CONTEXT = P + N * T + (N - 1) * F - T  # C: the longest context before a turn


def _model(lora: bool):
    """A 2-layer GQA model (4 query heads on 2 kv heads), weights scaled up so the
    logits are far from uniform; with `lora`, all-linear rank-4 adapters with non-zero
    B merged in (what `model_params` gives a LoRA run)."""
    config = ModelConfig(
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
    model = Transformer(config)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * 4.0 if path[-1].key in ("kernel", "embedding") else x, params
    )
    if lora:
        lora_config = LoRAConfig("all-linear", rank=4)
        adapters = flax.traverse_util.flatten_dict(
            init_lora(jax.random.key(1), config, lora_config, params)
        )
        keys = iter(jax.random.split(jax.random.key(2), len(adapters)))
        adapters = {
            p: (0.3 * jax.random.normal(next(keys), v.shape) if p[-1] == "b" else v)
            for p, v in adapters.items()
        }
        params = apply_lora(params, flax.traverse_util.unflatten_dict(adapters), lora_config)
    return model, params


@functools.partial(jax.jit, static_argnames=("model", "width"))
def reused(model, params, cache, inputs, key, width):
    """One turn from the kept cache: prefill the last `width` columns, decode T tokens."""
    cache = cache.replace(mask=inputs["cache_mask"])
    tokens, mask = inputs["tokens"][:, -width:], inputs["mask"][:, -width:]
    logits, cache = prefill(model, params, tokens, cache, mask=mask)
    start = cache.index
    out, cache = sample_from_cache(
        model, params, cache, logits, key, max_new_tokens=T, eos_id=EOS, pad_id=PAD
    )
    return logits, out, cache, start


@functools.partial(jax.jit, static_argnames="model")
def reread(model, params, tokens, mask, key):
    """The same turn re-reading the whole contexts: the next-token logits and `generate`."""
    logits = model.apply(params, tokens, attention_mask=mask)[:, -1]
    out = generate(
        model,
        params,
        tokens,
        key,
        max_new_tokens=T,
        eos_id=EOS,
        prompt_mask=mask,
        pad_id=PAD,
        cache_len=CONTEXT + T,
    )
    return logits, out


def _row(prompt: list[int]) -> lmt.EpisodeRow:
    n = len(prompt)
    return lmt.EpisodeRow(
        None, n, list(prompt), [False] * n, [0.0] * n, [0.0] * n, [-1] * n, [], []
    )


@pytest.mark.parametrize("lora", [False, True], ids=["gqa", "gqa-lora"])
def test_a_reused_cache_matches_rereading_the_whole_context(lora):
    model, params = _model(lora)
    rng = np.random.default_rng(0)
    rows = [_row(rng.integers(11, VOCAB, n).tolist()) for n in (3, 6, 5)]  # left padding
    slots = lmt.CacheSlots.empty(len(rows), SLOTS)
    cache = init_cache(model.config, len(rows), SLOTS)

    lengths_seen = set()
    for turn in range(N):
        key = jax.random.key(10 + turn)
        block = P if turn == 0 else BLOCK
        inputs = slots.next_inputs(rows, block, max(P, BLOCK), T - 1, PAD)
        logits, out, cache, start = reused(model, params, cache, inputs, key, width=block)
        tokens, mask = left_pad([row.tokens for row in rows], CONTEXT, PAD)
        ref_logits, ref = reread(model, params, tokens, mask, key)
        live = np.asarray([not row.done for row in rows])
        np.testing.assert_allclose(logits[live], ref_logits[live], rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(out.tokens[live], ref.tokens[live])
        np.testing.assert_array_equal(out.completion_mask[live], ref.completion_mask[live])
        np.testing.assert_allclose(out.logprobs[live], ref.logprobs[live], atol=1e-5)
        # The host's part: what each row keeps, then the environment's answer.
        kept = []
        for i, row in enumerate(rows):
            ids = np.asarray(out.tokens[i])[np.asarray(out.completion_mask[i])].tolist()
            if row.done:
                kept.append(0)
                continue
            if (turn, i) == (1, 1):
                assert len(ids) > 1  # so the cut drops tokens the cache holds
                ids = ids[:1]  # cut after its first token, as a tool call's end cuts a reply
            lengths_seen.add(len(ids))
            kept.append(len(ids))
            row.tokens += ids
            if (turn, i) == (1, 2):
                row.done = True  # this episode ends after its second turn
            elif turn < N - 1:
                row.tokens += rng.integers(11, VOCAB, 1 + (i + turn) % F).tolist()
        slots.record(kept, int(start), int(cache.index))
    assert len(lengths_seen) > 1, lengths_seen  # the turns were ragged


def test_the_algorithms_turns_with_and_without_reuse_agree():
    """`play` (held-out episodes: the algorithm's own turns, first-turn prefill and all)
    samples the same episodes from one key with the cache kept between turns as with the
    whole contexts re-read every turn."""
    tiny = dict(
        task="addition_retry",
        digits=2,
        num_eval=4,
        num_layers=1,
        hidden_size=32,
        num_heads=4,
        num_kv_heads=2,
        mlp_size=64,
        eval_batch_size=8,
        eval_samples=2,
    )
    reuse = grpo.make(cfg.replace(grpo.default_config(), **tiny))
    plain = grpo.make(cfg.replace(grpo.default_config(), **tiny, reuse_kv_cache=False))
    state = jax.eval_shape(reuse.init, jax.random.key(0), reuse.hyperparams())
    assert state.episode_cache.mask.shape == (16 * 8, reuse.cache_len)  # the default rows
    params = reuse.model_params(*reuse.init_model(jax.random.key(0)))
    examples = reuse.task.eval_examples()
    a = reuse.play(params, examples, jax.random.key(1), 2)
    b = plain.play(params, examples, jax.random.key(1), 2)
    assert max(len(row.rewards) for row in a) == 2  # episodes went past their first turn
    for x, y in zip(a, b, strict=True):
        assert x.tokens == y.tokens and x.model == y.model and x.rewards == y.rewards
        np.testing.assert_allclose(x.sampler_logp, y.sampler_logp, atol=1e-5)


def test_rounds_with_reuse_send_only_the_new_tokens():
    """One update's rounds on the host (made-up turns: every row says "1", so a game
    whose number is 1 ends at once and the others hear " higher:" four times). The
    first turn sends the prompts and an empty slot mask; each later one the reply's last
    token (never written by decoding) and the feedback, 9 tokens, with the prompt and
    the written reply tokens marked in the slot mask."""
    algo = grpo.make(
        cfg.replace(
            grpo.default_config(),
            task="guess",
            max_number=8,
            num_eval=8,
            num_layers=1,
            hidden_size=32,
            num_heads=2,
            num_kv_heads=2,
            mlp_size=64,
            num_prompts=2,
            group_size=2,
        )
    )
    tok = algo.tokenizer
    # P = 17, T = 2 ("1", eos), F + 1 = 9; S = 17 + 3 * 9 + 4 * 1.
    assert (algo.block_len, algo.block_width, algo.cache_len) == (9, 17, 48)
    inputs, host = algo.prepare(algo.init_host_state(seed=0, num_agents=1))
    rows = host["rollout"]["episodes"][0]
    assert inputs["tokens"].shape == (1, 4, 17) and inputs["cache_mask"].shape == (1, 4, 48)
    assert not inputs["cache_mask"].any()
    assert inputs["tokens"][0, 0].tolist() == rows[0].tokens
    one = [*tok.encode("1"), tok.eos_id]
    turn = {
        "tokens": np.asarray([[one] * 4], np.int32),
        "completion_mask": np.ones((1, 4, 2), bool),
        "finished": np.ones((1, 4), bool),
        "sampler_logp": np.zeros((1, 4, 2), np.float32),
    }
    live = [r.example.answer != "1" for r in rows]
    index = 0
    for t in range(4):
        start = index + (17 if t == 0 else 9)
        collected = {
            **turn,
            "decode_start": np.asarray([start]),
            "cache_index": np.asarray([start + 1]),
        }
        inputs, host = algo.respond(collected, host)
        index = start + 1
        if t == 3:
            break
        higher = [tok.eos_id, *tok.encode(" higher:")]
        for i in range(len(rows)):
            sent = inputs["tokens"][0, i][inputs["mask"][0, i]].tolist()
            assert sent == (higher if live[i] else [])
            cached = inputs["cache_mask"][0, i]
            # The prompt, then per turn the block (9 slots) and the "1" decoding wrote.
            expected = np.zeros(48, bool)
            expected[:18] = True
            for k in range(1, t + 1):
                expected[18 + 10 * (k - 1) : 18 + 10 * k] = live[i]
            np.testing.assert_array_equal(cached, expected)
    assert inputs is None and host["rollout"]["turn"] == 4


def test_bad_continuations_are_refused_before_compiling():
    model, params = _model(False)
    cache = init_cache(model.config, 2, 8)
    with pytest.raises(ValueError, match="free slots"):
        prefill(model, params, jnp.ones((2, 9), jnp.int32), cache)
    with pytest.raises(ValueError, match="batch 2"):
        prefill(model, params, jnp.ones((3, 4), jnp.int32), cache)
    logits = jnp.zeros((2, VOCAB))
    with pytest.raises(ValueError, match="too few for max_new_tokens - 1"):
        sample_from_cache(model, params, cache, logits, jax.random.key(0), max_new_tokens=10)
    with pytest.raises(ValueError, match="temperature"):
        sample_from_cache(
            model, params, cache, logits, jax.random.key(0), max_new_tokens=2, temperature=-1
        )
