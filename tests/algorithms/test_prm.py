"""The process reward model (jaxrl.algorithms.prm): its loss by hand, the step rows,
learning on a fixed batch, export and scoring through `PRMScorer`, resume and bad input.

A tiny model (1 layer, hidden 32) keeps each compile to a few seconds; the learning run
to the held-out step-accuracy target is test_prm_learning.py (slow and full tiers).
"""

from __future__ import annotations

import dataclasses
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.algorithms import prm, sft
from jaxrl.algorithms.prm import losses
from jaxrl.algorithms.process_rewards import PRMScorer, encode_step_rows, step_end_positions
from jaxrl.config import ConfigError
from jaxrl.lm import CharTokenizer, from_pretrained

TINY = dict(
    digits=1,
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
    lr_schedule="constant",
    eval_batch_size=16,
)


SFT_FIELDS = {f.name for f in dataclasses.fields(sft.SFTConfig)}


def make(**overrides):
    return prm.PRM.make(cfg.replace(prm.default_config(), **{**TINY, **overrides}))


@pytest.fixture(scope="module")
def algo():
    return make()


# ---------------------------------------------------------------------- the loss
def test_step_bce_and_accuracy_by_hand():
    logits = jnp.array([[0.0, 2.0, -1.0, 5.0]])
    labels = jnp.array([[1.0, 0.0, 0.0, 1.0]])
    label_mask = jnp.array([[False, True, True, False]])
    # Only the two labelled steps count: softplus(2) - 0 and softplus(-1) - 0.
    expected = math.log1p(math.exp(2.0)) + math.log1p(math.exp(-1.0))
    assert float(losses.step_bce(logits, labels, label_mask)) == pytest.approx(expected, rel=1e-6)
    # z = 2 predicts "correct" for a wrong step; z = -1 predicts "wrong" rightly.
    assert float(losses.step_accuracy(logits, labels, label_mask)) == 1.0
    assert losses.solution_accuracy(logits, labels, label_mask).tolist() == [0.0]
    right = jnp.array([[0.0, -2.0, -1.0, 5.0]])
    assert losses.solution_accuracy(right, labels, label_mask).tolist() == [1.0]


def test_step_bce_gradient_is_sigmoid_minus_label_at_labelled_steps_only():
    logits = jnp.array([[0.5, -0.3, 1.2]])
    labels = jnp.array([[1.0, 0.0, 1.0]])
    label_mask = jnp.array([[True, False, True]])
    grad = jax.grad(lambda z: losses.step_bce(z, labels, label_mask))(logits)
    sigmoid = 1 / (1 + np.exp(-np.asarray(logits)))
    np.testing.assert_allclose(grad, (sigmoid - labels) * label_mask, rtol=1e-6)


# ---------------------------------------------------------------------- step rows
def test_step_end_positions_by_hand():
    tok = CharTokenizer("0123456789+=;")
    assert step_end_positions(tok, tok.encode("13;14", add_eos=True), ";") == [2, 5]
    assert step_end_positions(tok, tok.encode("1;;", add_eos=True), ";") == [1, 2, 3]
    assert step_end_positions(tok, tok.encode("", add_eos=True), ";") == [0]
    assert step_end_positions(tok, [], ";") == []


def test_encode_step_rows_labels_the_step_end_tokens():
    tok = CharTokenizer("0123456789+=;")
    example = tasks.StepExample("1+2=", ("03", "3"), (True, False))
    rows = encode_step_rows(tok, [example], ";", 12)
    # [bos 1 + 2 =] [0 3 ; 3 eos] pad pad: the steps end at ";" (7) and at the eos (9).
    assert rows["tokens"][0].tolist() == [1, *tok.encode("1+2=03;3"), 2, 0, 0]
    assert rows["mask"][0].tolist() == [True] * 10 + [False] * 2
    assert np.flatnonzero(rows["label_mask"][0]).tolist() == [7, 9]
    assert rows["labels"][0, [7, 9]].tolist() == [1.0, 0.0]
    assert rows["labels"][0].sum() == 1.0
    with pytest.raises(ConfigError, match="3 labels for 2 steps"):
        encode_step_rows(tok, [example._replace(labels=(True, True, True))], ";", 12)


def test_process_draws_labelled_rows_as_a_pure_function_of_the_host_state(algo):
    host = algo.init_host_state(5, 2)
    batch, host_after, metrics = algo.process(None, host)
    again, _, _ = algo.process(None, algo.init_host_state(5, 2))
    assert host_after["batches"] == 1 and metrics == {}
    assert set(batch) == {"tokens", "mask", "label_mask", "labels"}
    assert batch["tokens"].shape == (2, 8, algo.max_len)
    jax.tree.map(np.testing.assert_array_equal, batch, again)
    # digits=1: two steps (the column, the sum) per solution, each labelled once.
    assert (batch["label_mask"].sum(-1) == 2).all()
    assert not np.array_equal(batch["tokens"][0], batch["tokens"][1])  # agents differ


# ---------------------------------------------------------------------- learning
def test_learn_fits_a_fixed_batch(algo):
    state = algo.init(jax.random.key(0), algo.hyperparams(lr=1e-2))
    batch, _, _ = algo.process(None, algo.init_host_state(0, 1))
    batch = jax.tree.map(lambda x: jnp.asarray(x[0]), batch)
    learn = jax.jit(algo.learn)
    _, first = learn(state, batch)
    # A zero head: every step at probability 1/2, a loss of log 2 whatever the labels.
    assert float(first["loss"]) == pytest.approx(math.log(2.0), rel=1e-6)
    for _ in range(60):
        state, metrics = learn(state, batch)
    assert float(metrics["loss"]) < 0.2 and float(metrics["step_accuracy"]) == 1.0
    assert set(metrics) >= {"loss", "step_accuracy", "positive_fraction", "grad_norm", "lr"}


def test_micro_batches_give_the_same_update(algo):
    batch, _, _ = algo.process(None, algo.init_host_state(0, 1))
    batch = jax.tree.map(lambda x: jnp.asarray(x[0]), batch)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    whole, m1 = jax.jit(algo.learn)(state, batch)
    split = make(micro_batches=4)
    pieces, m4 = jax.jit(split.learn)(state, batch)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
        whole.params,
        pieces.params,
    )
    assert float(m1["loss"]) == pytest.approx(float(m4["loss"]), rel=1e-5)


def test_driver_trains_exports_and_resumes_exactly_and_the_export_scores_steps(tmp_path):
    """Two agents through `driver.train`; a copy stopped after its first checkpoint and
    resumed ends with the uninterrupted run's parameters. The exported model is a PRM
    that `PRMScorer` (GRPO's `--process-reward RUN_DIR`) loads and scores with."""
    from jaxrl.training.driver import RunConfig, train

    options = dict(total_steps=48, lr=1e-2)  # 6 updates of 8 solutions
    run = dict(num_seeds=2, checkpoint_every=24, keep_checkpoints=5, log_every=24)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(make(**options), RunConfig(run_dir=str(full_dir), progress=False, **run))
    shutil.copytree(full_dir, stopped_dir)
    shutil.rmtree(stopped_dir / "checkpoints" / "6")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(
        make(**options), RunConfig(run_dir=str(stopped_dir), resume=True, progress=False, **run)
    )
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    summary = full.summary
    assert len(summary["eval_step_accuracy_per_agent"]) == 2
    assert 0 <= summary["eval_step_accuracy"] <= 1 and "eval_solution_accuracy" in summary

    model, params = from_pretrained(full_dir / "model")
    assert model.config.value_head
    agent0 = jax.tree.map(lambda x: x[0], full.state)
    jax.tree.map(np.testing.assert_array_equal, params, jax.device_get(agent0.params))
    scorer = PRMScorer(str(full_dir), ";", max_len=16)
    algo = full.algorithm
    solutions = algo.step_task.prm_eval_examples()[:4]
    scores = scorer.step_scores(
        [s.prompt for s in solutions], [";".join(s.steps) for s in solutions]
    )
    rows = algo.encode(solutions)
    logits = np.asarray(algo.step_logits(agent0.params, rows["tokens"], rows["mask"]))
    for row, score in enumerate(scores):
        expected = 1 / (1 + np.exp(-logits[row][rows["label_mask"][row]]))
        np.testing.assert_allclose(score, expected, rtol=1e-5)
    # A completion that does not fit the PRM's rows scores 0 on its steps, without failing.
    assert scorer.step_scores(["1+2="], ["1" * 30]) == [[0.0]]


def test_warm_start_from_an_sft_run_adds_a_zero_head(tmp_path):
    from jaxrl.training.driver import RunConfig, train

    sft_options = {k: v for k, v in TINY.items() if k in SFT_FIELDS}
    config = cfg.replace(
        sft.default_config(),
        **{**sft_options, "task": "addition_steps", "stop_at_train_accuracy": None},
    )
    train(sft.make(config), RunConfig(run_dir=str(tmp_path / "sft"), progress=False))
    algo = make(model=str(tmp_path / "sft"))
    params = algo.load_params()
    assert not np.any(params["params"]["value_head"]["kernel"])
    state = algo.init(jax.random.key(0), algo.hyperparams(), params)
    _, sft_params = from_pretrained(tmp_path / "sft" / "model")
    np.testing.assert_array_equal(
        state.params["params"]["embed_tokens"]["embedding"],
        sft_params["params"]["embed_tokens"]["embedding"],
    )


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"task": "addition"}, r"invalid task='addition': .*no step verifier"),
        ({"corrupt_fraction": 1.5}, r"invalid corrupt_fraction=1.5: must be a fraction"),
        ({"lora_rank": 4}, r"invalid lora_rank=4: must be 0"),
        ({"micro_batches": 3}, r"invalid micro_batches=3: .*a divisor of batch_size=8"),
        ({"total_steps": 4}, r"invalid total_steps=4"),
        ({"max_len": 5}, r"invalid max_len=5: task 'addition_steps' has an example"),
    ],
)
def test_bad_config_raises_a_config_error_naming_the_field(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make(**overrides)


def test_a_model_without_a_value_head_is_not_a_prm(tmp_path):
    from jaxrl.training.driver import RunConfig, train

    sft_options = {k: v for k, v in TINY.items() if k in SFT_FIELDS}
    config = cfg.replace(
        sft.default_config(),
        **{
            **sft_options,
            "task": "addition_steps",
            "total_steps": 8,
            "stop_at_train_accuracy": None,
        },
    )
    train(sft.make(config), RunConfig(run_dir=str(tmp_path / "sft"), progress=False))
    with pytest.raises(ConfigError, match=r"invalid process_reward=.*has no value head"):
        PRMScorer(str(tmp_path / "sft"), ";", max_len=16)
    with pytest.raises(ConfigError, match=r"invalid process_reward='/nonexistent'"):
        PRMScorer("/nonexistent", ";", max_len=16)
