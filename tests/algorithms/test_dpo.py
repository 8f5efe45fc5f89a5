"""DPO (jaxrl.algorithms.dpo): bad input, the pair sources, the batch layout and exact
gradient accumulation.

A tiny model (1 layer, hidden 32) keeps each compile to a few seconds; learning runs,
the reward model, LoRA, resume and the CLI are in test_dpo_learning.py (slow tier).
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.algorithms import dpo
from jaxrl.algorithms.dpo import losses
from jaxrl.config import ConfigError
from jaxrl.tasks import preferences

TINY = dict(
    digits=2,
    num_eval=16,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    batch_size=8,
    total_steps=8 * 4,
    lr=3e-3,
    warmup=0.0,
    eval_batch_size=16,
)


def make(**overrides):
    return dpo.make(cfg.replace(dpo.default_config(), **{**TINY, **overrides}))


def write_pairs(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"preference_loss": "kto"},
            r"invalid preference_loss='kto'.*\['dpo', 'ipo', 'simpo', 'bt'\]",
        ),
        ({"beta": 0.0}, "invalid beta=0.0"),
        ({"beta": -1.0}, "invalid beta=-1.0"),
        ({"gamma": 0.5}, r"invalid gamma=0.5: .*preference_loss='simpo'"),
        ({"label_smoothing": 0.5}, "invalid label_smoothing=0.5"),
        ({"preference_loss": "ipo", "label_smoothing": 0.1}, "invalid label_smoothing=0.1"),
        ({"epochs": 1.0}, r"invalid epochs=1.0: .*0 without data"),
        ({"micro_batches": 3}, r"invalid micro_batches=3: .*a divisor of batch_size=8"),
        ({"total_steps": 4}, r"invalid total_steps=4"),
        ({"data": ""}, "invalid data=''"),
        ({"nll_weight": -1.0}, r"invalid nll_weight=-1.0: must be >= 0"),
        ({"preference_loss": "bt", "nll_weight": 1.0}, r"invalid nll_weight=1.0: .*'bt'"),
        ({"max_len": 5}, r"invalid max_len=5: task 'addition' has an example"),
    ],
)
def test_bad_config_raises_a_config_error_naming_the_field(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make(**overrides)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"prompt": "a", "chosen": "1"}'], r":1: missing key 'rejected'"),
        (['{"prompt": "a", "chosen": "1", "rejected": "2"}', '{"chosen": "1"}'], r":2: missing"),
        (['{"prompt": "a", "chosen": 1, "rejected": "2"}'], r":1: 'chosen' must be a string"),
        (['{"prompt": "", "chosen": "1", "rejected": "2"}'], r":1: 'prompt' must not be empty"),
        (['{"prompt": "a", "chosen": "1", "rejected": "2"'], r":1: not valid JSON"),
        (["", "  "], r"the file has no preference pairs"),
        (['{"prompt": "a", "chosen": "1", "rejected": "2"}'], r"at least 2 distinct prompts"),
    ],
)
def test_a_bad_pairs_file_names_the_file_and_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        make(data=str(path))
    assert str(path) in str(err.value)


def test_a_missing_pairs_file_names_the_data_field(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match=rf"invalid data='{missing}': no such file"):
        make(data=missing)


# ---------------------------------------------------------------------- pair sources
def test_a_pairs_file_is_split_by_prompt_and_walked_in_epochs(tmp_path):
    records = [{"prompt": f"q{i % 20}", "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(40)]
    data = preferences.PairFile(write_pairs(tmp_path / "p.jsonl", records), num_eval=3)
    held = {p.prompt for p in data.eval_pairs()}
    assert len(held) == 3 and len(data.eval_pairs()) == 6  # every pair of a held-out prompt
    train = [preferences.Pair(r["prompt"], r["chosen"], r["rejected"]) for r in records]
    train = [p for p in train if p.prompt not in held]
    assert data.num_train == len(train) == 34
    # Batches of 10 from one stream: each epoch is a permutation of the training pairs.
    stream = [p for k in range(7) for p in data.train_batch(5, 1, k, 10)]
    assert sorted(stream[:34]) == sorted(train) == sorted(stream[34:68])
    assert data.train_batch(5, 1, 3, 10) == stream[30:40]  # a pure function of its args
    assert data.train_batch(5, 0, 0, 10) != stream[:10]  # streams (agents) differ
    # As a Task: the prompts with their chosen completions, every character in its alphabet.
    assert all(e.prompt not in held for e in data.sample_train(np.random.default_rng(0), 50))
    assert set("qcr0123456789") == set(data.alphabet)


def test_task_pairs_prefer_the_answer_over_a_wrong_one_of_the_same_length():
    task = tasks.make_task("addition", digits=2, num_eval=50)
    data = preferences.make_pairs(task, split_seed=0)
    held = {p.prompt for p in data.eval_pairs()}
    assert held == {e.prompt for e in task.eval_examples()}
    assert data.eval_pairs() == preferences.make_pairs(task).eval_pairs()  # fixed by the seed
    batches = [data.train_batch(0, i, k, 64) for i in range(2) for k in range(4)]
    for pair in [p for b in batches for p in b] + data.eval_pairs():
        a, b = pair.prompt[:-1].split("+")
        assert pair.chosen == str(int(a) + int(b))  # the reference answer
        assert not task.is_correct(pair.rejected, pair.chosen)
        assert len(pair.rejected) == len(pair.chosen) and pair.rejected[0] != "0"
    assert not held & {p.prompt for b in batches for p in b}
    assert data.train_batch(0, 1, 2, 64) == batches[6]
    # Both kinds of corruption occur: off by a small number and one digit changed.
    offsets = [abs(int(p.rejected) - int(p.chosen)) for b in batches for p in b]
    assert any(1 <= d <= 9 for d in offsets) and any(d >= 10 for d in offsets)


@pytest.mark.parametrize("name", ["countdown", "strings"])
def test_task_pairs_corrupt_any_task_into_wrong_answers(name):
    task = tasks.make_task(name)
    for pair in preferences.make_pairs(task).train_batch(0, 0, 0, 64):
        assert task.is_correct(pair.chosen, pair.chosen)
        assert not task.is_correct(pair.rejected, pair.chosen)
        assert len(pair.rejected) == len(pair.chosen)
        assert set(pair.rejected) <= set(tasks.BASE_ALPHABET)


def test_an_answer_that_cannot_be_made_wrong_is_a_config_error():
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="cannot make a wrong answer for ''"):
        preferences.corrupt_answer("", rng, "abc", lambda text: False)
    with pytest.raises(ConfigError, match="cannot make a wrong answer for '7'"):
        preferences.corrupt_answer("7", rng, "0123456789", lambda text: True)


# ---------------------------------------------------------------------- batches and learning
@pytest.fixture(scope="module")
def algo():
    return make()


@pytest.fixture(scope="module")
def start(algo):
    """The initial state and agent 0's first batch (seed 0), shared by the tests below."""
    state = jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())
    batch, _, _ = algo.process(None, algo.init_host_state(0, 1))
    return state, jax.tree.map(lambda x: jnp.asarray(x[0]), batch)


def test_a_batch_holds_each_pair_as_a_chosen_and_a_rejected_row(algo):
    batch, host, _ = algo.process(None, algo.init_host_state(3, 2))
    assert host["batches"] == 1
    assert batch["tokens"].shape == (2, 8, 2, algo.max_len)
    pairs = algo.pairs.train_batch(3, 1, 0, 8)
    for j, pair in enumerate(pairs):
        for column, completion in enumerate((pair.chosen, pair.rejected)):
            tokens = batch["tokens"][1, j, column]
            mask, loss_mask = batch["mask"][1, j, column], batch["loss_mask"][1, j, column]
            text = algo.tokenizer.decode(tokens[mask].tolist())
            assert pair.prompt + completion in text
            scored = tokens[loss_mask].tolist()
            assert scored[-1] == algo.tokenizer.eos_id
            assert algo.tokenizer.decode(scored[:-1]) == completion


def test_micro_batches_give_the_same_update_and_the_first_loss_is_log_2(algo, start):
    """One batch of 8 pairs equals 4 accumulated micro-batches of 2; a policy equal to
    its reference has DPO loss log 2, margin 0 and reward accuracy 1/2 (ties count half)."""
    state, batch = start
    whole, metrics = jax.jit(algo.learn)(state, batch)
    accumulated, acc_metrics = jax.jit(make(micro_batches=4).learn)(state, batch)
    # Adam's first step is lr * g / (|g| + eps): an element whose gradient is near eps
    # moves by a fraction of lr that depends on the order of the float32 sums, so the
    # parameters agree to 10% of one step (the gradient norms below agree to 1e-5).
    step = algo.config.lr
    for a, b in zip(
        jax.tree.leaves(whole.params), jax.tree.leaves(accumulated.params), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=0.1 * step)
    assert float(metrics["loss"]) == pytest.approx(math.log(2), abs=1e-6)
    assert float(metrics["reward_accuracy"]) == 0.5 and float(metrics["reward_margin"]) == 0.0
    for name in ("loss", "tokens", "logp_chosen", "reward_margin", "grad_norm"):
        assert float(acc_metrics[name]) == pytest.approx(float(metrics[name]), rel=1e-5), name
    assert whole.ref_params is not None and whole.base_params is None
    simpo = make(preference_loss="simpo")  # reference-free: no frozen copy is kept
    assert jax.eval_shape(simpo.init, jax.random.key(0), simpo.hyperparams()).ref_params is None


def test_label_smoothing_and_ties_by_hand():
    """Conservative DPO: -(1 - eps) log sigmoid(z) - eps log sigmoid(-z); a tie in the
    rewards counts half a correct ranking."""
    chosen, rejected = jnp.array([-1.0, -2.0]), jnp.array([-3.0, -2.0])
    ref = jnp.array([-2.0, -2.0])
    loss, stats = losses.dpo_loss(chosen, rejected, ref, ref, beta=0.5, label_smoothing=0.2)
    z = 0.5 * 2.0  # pair 0: u_w - u_l = 0.5 * (1 - (-1)); pair 1: a tie, z = 0
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731  (-log sigmoid(-x))
    expected = [0.8 * softplus(-z) + 0.2 * softplus(z), math.log(2)]
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    assert float(stats["reward_accuracy"]) == 0.75
    bt, _ = losses.bradley_terry_loss(jnp.array([1.0]), jnp.array([0.0]), label_smoothing=0.1)
    assert float(bt[0]) == pytest.approx(0.9 * softplus(-1.0) + 0.1 * softplus(1.0), rel=1e-6)


def test_ipo_and_simpo_score_a_batch_of_the_model(algo, start):
    """The other objectives on the same model: at the start (policy = reference) IPO's
    loss is its target margin squared, (1 / (2 beta))^2; SimPO's rewards are beta times
    the length-normalised log-probs and need no reference."""
    state, batch = start
    ipo = make(preference_loss="ipo", beta=0.25)
    per_pair, _ = ipo.pair_losses(state.params, state.replace(hparams=ipo.hyperparams()), batch)
    np.testing.assert_allclose(per_pair, np.full(8, (1 / 0.5) ** 2), rtol=1e-5)
    simpo = make(preference_loss="simpo", beta=2.0, gamma=0.5)
    reference_free = state.replace(hparams=simpo.hyperparams(), ref_params=None)
    per_pair, stats = simpo.pair_losses(state.params, reference_free, batch)
    lengths = batch["loss_mask"].sum(-1)  # (pairs, 2): completion + eos tokens
    logp, _ = algo._sequence_logprobs(  # noqa: SLF001 - the summed log-probs it uses
        state.params,
        batch["tokens"].reshape(16, -1),
        batch["mask"].reshape(16, -1),
        batch["loss_mask"].reshape(16, -1),
    )
    rewards = 2.0 * logp / lengths
    assert float(stats["reward_chosen"]) == pytest.approx(float(rewards[:, 0].mean()), rel=1e-5)
    margin = rewards[:, 0] - rewards[:, 1] - 0.5
    np.testing.assert_allclose(per_pair, np.log1p(np.exp(-margin)), rtol=1e-5)


def test_rpo_adds_the_chosen_completions_per_token_nll(algo, start):
    """RPO (Pang et al. 2024): the preference loss plus nll_weight times the chosen
    completion's NLL per scored token; with nll_weight 0 the term adds exact zeros."""
    state, batch = start
    plain, _ = algo.pair_losses(state.params, state, batch)
    rpo = make(nll_weight=0.5)
    per_pair, stats = rpo.pair_losses(state.params, state.replace(hparams=rpo.hyperparams()), batch)
    logp, length = algo._sequence_logprobs(  # noqa: SLF001 - the summed log-probs it uses
        state.params,
        batch["tokens"].reshape(16, -1),
        batch["mask"].reshape(16, -1),
        batch["loss_mask"].reshape(16, -1),
    )
    nll = -logp[:, 0] / length[:, 0]
    assert float(jnp.min(nll)) > 0
    np.testing.assert_allclose(per_pair, plain + 0.5 * nll, rtol=1e-5)
    assert float(stats["nll_chosen"]) == pytest.approx(float(nll.mean()), rel=1e-5)
