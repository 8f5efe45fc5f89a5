"""SFT (jaxrl.algorithms.sft): the loss, the data loader, learn, LoRA, export and bad input.

A tiny model (1 layer, hidden 32) keeps each compile to a few seconds; the learning run
that reaches >= 0.9 on 3-digit addition is the slow test in test_sft_learning.py.
"""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import sft
from jaxrl.algorithms.sft import losses
from jaxrl.algorithms.sft.train import encode_example, lr_schedule
from jaxrl.config import ConfigError
from jaxrl.lm import CharTokenizer, from_pretrained, load_tokenizer
from jaxrl.objectives import masked_token_mean

TINY = dict(
    digits=2,
    num_eval=16,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    batch_size=8,
    total_steps=8 * 40,
    lr=3e-3,
    warmup=0.0,
    lr_schedule="constant",
    eval_batch_size=16,
    stop_at_train_accuracy=None,  # tests of the warm-start stop set it themselves
)


def make(**overrides):
    return sft.make(cfg.replace(sft.default_config(), **{**TINY, **overrides}))


def first_batch(algo, seed=0):
    batch, _, _ = algo.process(None, algo.init_host_state(seed, 1))
    return jax.tree.map(lambda x: jnp.asarray(x[0]), batch)


@pytest.fixture(scope="module")
def algo():
    return make()


@pytest.fixture(scope="module")
def learn(algo):
    return jax.jit(algo.learn)


# ---------------------------------------------------------------------- loss
def test_masked_token_nll_by_hand():
    logprobs = jnp.array([[-1.0, -2.0, -3.0, -9.0], [-0.5, -4.0, -7.0, -9.0]])
    mask = jnp.array([[False, True, True, False], [True, False, False, False]])
    loss, n = losses.masked_token_nll(logprobs, mask)
    assert n == 3
    np.testing.assert_allclose(loss, (2.0 + 3.0 + 0.5) / 3, rtol=1e-6)
    np.testing.assert_allclose(
        losses.answer_probability(logprobs, mask), (np.exp(-5.0) + np.exp(-0.5)) / 2, rtol=1e-6
    )
    np.testing.assert_allclose(masked_token_mean(logprobs, mask), -5.5 / 3, rtol=1e-6)
    empty = jnp.zeros_like(mask)
    assert losses.masked_token_nll(logprobs, empty) == (0.0, 0.0)
    assert masked_token_mean(logprobs, empty) == 0.0


def test_greedy_exact_match_by_hand():
    logprobs = jnp.array([[-0.1, -0.2, -3.0], [-0.1, -0.9, -0.3], [-2.0, -0.4, -0.4]])
    top = jnp.array([[-0.1, -0.2, -0.5], [-0.1, -0.7, -0.3], [-0.5, -0.4, -0.4]])
    mask = jnp.array([[True, True, False], [True, True, True], [False, True, True]])
    # row 0: masked tokens are the argmax (token 2 is not, but unmasked); row 1: token 1
    # is not; row 2: the unmasked token 0 is not, the masked ones are.
    np.testing.assert_allclose(losses.greedy_exact_match(logprobs, top, mask), 2 / 3)


def test_loss_equals_full_logits_cross_entropy_on_the_answer_tokens(algo, learn):
    """The chunked path (token_logprobs) with the shifted loss mask is exactly the
    cross-entropy of the full logits at the answer and eos positions."""
    state = algo.init(jax.random.key(0), algo.hyperparams())
    batch = first_batch(algo)
    logits = algo.model.apply(state.params, batch["tokens"], attention_mask=batch["mask"])
    logp = jax.nn.log_softmax(logits, axis=-1)
    by_hand = []
    for b in range(batch["tokens"].shape[0]):
        for t in np.flatnonzero(np.asarray(batch["loss_mask"][b])):
            by_hand.append(-logp[b, t - 1, batch["tokens"][b, t]])  # position t-1 predicts t
    _, metrics = learn(state, batch)
    np.testing.assert_allclose(metrics["loss"], np.mean(by_hand), rtol=1e-5)
    assert metrics["tokens"] == len(by_hand) == int(batch["loss_mask"].sum())


# ---------------------------------------------------------------------- data
def test_encode_batch_right_pads_and_masks_answer_and_eos(algo):
    tok = algo.tokenizer
    rows = algo.encode_batch([("12+3=", "15"), ("9+9=", "18")])
    ids = lambda s: tok.encode(s)  # noqa: E731
    expected = [tok.bos_id, *ids("12+3="), *ids("15"), tok.eos_id]
    assert algo.max_len == 1 + len("99+99=") + len("198") + 1  # bos + prompt + answer + eos
    np.testing.assert_array_equal(rows["tokens"][0, : len(expected)], expected)
    assert (rows["tokens"][0, len(expected) :] == tok.pad_id).all()
    np.testing.assert_array_equal(rows["mask"][0], np.arange(algo.max_len) < len(expected))
    np.testing.assert_array_equal(np.flatnonzero(rows["loss_mask"][0]), [6, 7, 8])  # "1" "5" eos
    np.testing.assert_array_equal(np.flatnonzero(rows["loss_mask"][1]), [5, 6, 7])


def test_process_is_a_pure_function_of_the_host_state(algo):
    host = algo.init_host_state(seed=5, num_agents=3)
    batch, host2, _ = algo.process(None, host)
    assert batch["tokens"].shape == (3, 8, algo.max_len) and batch["tokens"].dtype == np.int32
    assert host2 == {"seed": 5, "num_agents": 3, "batches": 1}
    again, _, _ = algo.process(None, json.loads(json.dumps(host)))  # as saved in a checkpoint
    np.testing.assert_array_equal(batch["tokens"], again["tokens"])
    next_batch, _, _ = algo.process(None, host2)
    assert not np.array_equal(next_batch["tokens"], batch["tokens"])
    assert not np.array_equal(batch["tokens"][0], batch["tokens"][1])  # agents differ
    held = {e.prompt for e in algo.task.eval_examples()}
    rows = zip(
        batch["tokens"].reshape(-1, algo.max_len),
        batch["mask"].reshape(-1, algo.max_len),
        strict=True,
    )
    texts = [algo.tokenizer.decode(row[mask]) for row, mask in rows]
    assert len(texts) == 24 and all(t[t.index("=") + 1 :] for t in texts)
    texts = {t[: t.index("=") + 1] for t in texts}
    assert not held & texts  # no held-out prompt in training


# ---------------------------------------------------------------------- learn
def test_learn_fits_a_fixed_batch_and_reports_metrics(algo, learn):
    state = algo.init(jax.random.key(0), algo.hyperparams())
    batch = first_batch(algo)
    state, first = learn(state, batch)
    for _ in range(30):
        state, metrics = learn(state, batch)
    assert set(first) == {
        *("loss", "tokens", "entropy", "answer_prob", "grad_norm", "lr"),
        *("exact_match", "train_accuracy", "stopped"),
    }
    assert metrics["loss"] < 0.5 * first["loss"]
    assert metrics["answer_prob"] > first["answer_prob"]
    assert int(state.update_step) == 31
    np.testing.assert_allclose(metrics["lr"], 3e-3, rtol=1e-6)


def test_training_exact_match_is_what_greedy_decoding_scores(algo):
    """`losses.greedy_exact_match` under teacher forcing equals the exact match of
    greedy decoding (`algo.accuracy`), example by example, on a model that gets some
    of a batch right and some wrong."""
    from jaxrl.lm import token_logprobs

    examples = algo.task.sample_train(np.random.default_rng((0, 0, 0)), 8)
    batch = jax.tree.map(jnp.asarray, algo.encode_batch(examples))
    state = algo.init(jax.random.key(0), algo.hyperparams())
    learn = jax.jit(algo.learn)
    for _ in range(25):
        state, _ = learn(state, batch)
    lp, top = token_logprobs(
        algo.model, state.params, batch["tokens"], attention_mask=batch["mask"], return_top=True
    )
    loss_mask = batch["loss_mask"][:, 1:]
    by_forward = [
        float(losses.greedy_exact_match(lp[i : i + 1], top[i : i + 1], loss_mask[i : i + 1]))
        for i in range(8)
    ]
    by_decoding = [
        algo.accuracy(state.params, [example], algo.prompt_len, algo.answer_len)
        for example in examples
    ]
    assert by_forward == by_decoding
    assert 0 < sum(by_forward) < 8, by_forward  # both kinds of example occur


def test_an_agent_stops_at_its_training_accuracy_and_then_keeps_its_parameters():
    algo = make(stop_at_train_accuracy=0.5, train_accuracy_decay=0.5)
    learn = jax.jit(algo.learn)
    batch = first_batch(algo)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    assert int(state.stopped_at) == -1
    state, metrics = learn(state, batch)  # a random model: nothing exact, no stop
    assert float(metrics["exact_match"]) == 0.0 and int(state.stopped_at) == -1
    assert algo.early_stop(jax.tree.map(lambda x: x[None], state))[1] is False

    # Running accuracy 1 before this update: 0.5 * 1 + 0.5 * 0 >= 0.5 stops it.
    before = state.replace(train_accuracy=jnp.asarray(1.0, jnp.float32))
    stopped, metrics = learn(before, batch)
    assert int(stopped.stopped_at) == 2 and float(metrics["stopped"]) == 1.0
    np.testing.assert_allclose(metrics["train_accuracy"], 0.5 + 0.5 * metrics["exact_match"])
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), before.params, stopped.params)
    assert any(jax.tree.leaves(changed))  # the update that reached it is applied

    after, _ = learn(stopped, batch)  # later updates change nothing but the step count
    assert int(after.update_step) == 3 and int(after.stopped_at) == 2
    for name in ("params", "opt_state", "train_accuracy"):
        jax.tree.map(np.testing.assert_array_equal, getattr(after, name), getattr(stopped, name))
    _, done = algo.early_stop(jax.tree.map(lambda x: x[None], after))
    assert done is True
    assert make().early_stop(jax.tree.map(lambda x: x[None], after))[1] is False  # None: never


def test_lr_schedule_warmup_then_cosine():
    scales = np.asarray([lr_schedule(s, 100, 0.1, "cosine") for s in range(100)])
    np.testing.assert_allclose(scales[:10], np.arange(1, 11) / 10, rtol=1e-6)
    np.testing.assert_allclose(scales[54], 0.5 * (1 + np.cos(np.pi * 45 / 90)), rtol=1e-5)
    assert scales[-1] == pytest.approx(0.0, abs=1e-6) and np.all(np.diff(scales[9:]) <= 0)
    np.testing.assert_allclose(lr_schedule(50, 100, 0.1, "constant"), 1.0)


@pytest.mark.parametrize(
    ("schedule", "warmup", "needs_reschedule"),
    [("cosine", 0.0, True), ("constant", 0.1, True), ("constant", 0.0, False)],
)
def test_extending_a_run_whose_schedule_follows_the_total_needs_reschedule(
    schedule, warmup, needs_reschedule
):
    """A cosine decay (to 0 at the last update) or a warmup (a fraction of the updates)
    changes when total_steps grows: `--resume --total-steps LARGER` must say so."""
    saved = cfg.to_dict(make(lr_schedule=schedule, warmup=warmup).config)
    extended = make(lr_schedule=schedule, warmup=warmup, total_steps=2 * TINY["total_steps"])
    if needs_reschedule:
        with pytest.raises(ConfigError, match=r"invalid total_steps=640.*--reschedule"):
            extended.check_resume(saved)
    else:
        extended.check_resume(saved)
    extended.check_resume(saved, reschedule=True)


def test_lora_trains_only_the_adapters_and_skips_the_frozen_base_in_checkpoints():
    algo = make(lora_rank=4, lora_targets=("q_proj", "v_proj"), lr=1e-2)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    assert sft.SFT.checkpoint_exclude == ("base_params",)
    assert set(state.params["layers_0"]["self_attn"]) == {"q_proj", "v_proj"}
    batch = first_batch(algo)
    learn = jax.jit(algo.learn)
    new, first = learn(state, batch)
    for _ in range(10):
        new, metrics = learn(new, batch)
    assert metrics["loss"] < first["loss"]
    jax.tree.map(np.testing.assert_array_equal, new.base_params, state.base_params)
    b = new.params["layers_0"]["self_attn"]["q_proj"]["b"]
    assert float(jnp.abs(b).max()) > 0  # B starts at zero and has moved
    merged = algo.merged_params(new)["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"]
    a = new.params["layers_0"]["self_attn"]["q_proj"]["a"]
    base = state.base_params["params"]["layers_0"]["self_attn"]["q_proj"]["kernel"]
    np.testing.assert_allclose(merged, base + algo.lora.scale * a @ b, rtol=1e-5, atol=1e-6)


def test_warm_start_uses_the_given_params_and_rejects_a_different_model(algo):
    donor = make(hidden_size=32).init(jax.random.key(9), algo.hyperparams())
    state = algo.init(jax.random.key(0), algo.hyperparams(), jax.device_get(donor.params))
    jax.tree.map(np.testing.assert_array_equal, state.params, donor.params)
    other = make(hidden_size=64).init(jax.random.key(0), algo.hyperparams())
    with pytest.raises(ConfigError, match="warm-start parameters do not match"):
        algo.init(jax.random.key(0), algo.hyperparams(), jax.device_get(other.params))


# ---------------------------------------------------------------------- finish / export
def test_finish_exports_a_loadable_model_and_measures_held_out_accuracy(tmp_path):
    """Every answer is "ok": after a few updates greedy decoding gets every held-out
    prompt right, and the exported model in run_dir/model/ decodes the same."""
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"w{i}", "answer": "ok"}) + "\n" for i in range(40))
    )
    algo = make(task=f"jsonl:{data}", num_eval=8, lr=1e-2)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    host = algo.init_host_state(0, 1)
    learn = jax.jit(algo.learn)
    for _ in range(40):
        batch, host, _ = algo.process(None, host)
        state, _ = learn(state, jax.tree.map(lambda x: x[0], batch))
    stacked = jax.tree.map(lambda x: x[None], state)
    summary = algo.finish(stacked, tmp_path / "run")
    assert summary["eval_accuracy"] == 1.0 and summary["eval_accuracy_per_agent"] == [1.0]
    assert algo.evaluate(stacked, jax.random.key(0), 3)["eval_accuracy"].tolist() == [1.0]

    model_dir = tmp_path / "run" / "model"
    assert summary["model_dir"] == str(model_dir)
    model, params = from_pretrained(model_dir)
    jax.tree.map(np.testing.assert_array_equal, params, jax.device_get(state.params))
    tok = load_tokenizer(model_dir)
    assert isinstance(algo.tokenizer, CharTokenizer)
    assert tok.encode("w7 ok") == algo.tokenizer.encode("w7 ok", add_bos=True)
    assert (tok.eos_id, tok.pad_id) == (algo.tokenizer.eos_id, algo.tokenizer.pad_id)

    # The exported run directory is a model another run can start from (--model RUN_DIR).
    again = make(task=f"jsonl:{data}", num_eval=8, model=str(tmp_path / "run"))
    assert again.model_dir == model_dir and again.model.config == model.config
    warm = again.init(jax.random.key(1), again.hyperparams(), again.load_params())
    assert again.eval_accuracy(warm.params, again.task.eval_examples()) == 1.0
    assert encode_example(again.tokenizer, "w1", "ok") == encode_example(algo.tokenizer, "w1", "ok")


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"task": "nosuch"}, r"invalid task='nosuch'.*available: addition, .*countdown"),
        ({"task": "jsonl:/no/such.jsonl"}, r"/no/such\.jsonl': no such file"),
        ({"max_len": 5}, r"invalid max_len=5: task 'addition' has an example of 11 tokens"),
        ({"context_len": 8}, r"invalid context_len=8: the model's context is 8 tokens"),
        ({"batch_size": 0}, r"invalid batch_size=0"),
        ({"lr": -1.0}, r"invalid lr=-1.0"),
        ({"num_heads": 3}, r"invalid num_heads=3: must be a divisor of hidden_size=32"),
        ({"total_steps": 4}, r"invalid total_steps=4: must be >= batch_size=8"),
        ({"lr_schedule": "linear"}, r"invalid lr_schedule='linear': must be one of"),
        ({"lora_targets": ("qproj",)}, r"invalid lora_targets"),
        ({"warmup": 1.0}, r"invalid warmup=1.0"),
        ({"stop_at_train_accuracy": 0.0}, r"invalid stop_at_train_accuracy=0.0: must be None or"),
        ({"stop_at_train_accuracy": 1.5}, r"invalid stop_at_train_accuracy=1.5"),
        ({"train_accuracy_decay": 1.0}, r"invalid train_accuracy_decay=1.0: must be in \[0, 1\)"),
    ],
)
def test_bad_config_raises_a_config_error_naming_the_field(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make(**overrides)


def test_bad_model_directory_names_the_model(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid model=.*does not exist"):
        make(model=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"invalid model=.*has no config.json"):
        make(model=str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"has no \*\.safetensors"):
        make(model=str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"bad config.json \(unsupported model_type None"):
        make(model=str(tmp_path))


def test_mesh_sizes_must_fit_the_devices_and_the_batch(algo):
    with pytest.raises(ConfigError, match=r"invalid mesh_fsdp=2"):
        make(mesh_fsdp=2).make_mesh(None)
    assert dict(algo.make_mesh(1).shape) == {"data": 1, "fsdp": 1, "tensor": 1}


# ---------------------------------------------------------------------- through the driver
def test_driver_trains_checkpoints_and_resumes_exactly(tmp_path):
    """Two LoRA agents through `driver.train`; a copy of the run stopped after its first
    checkpoint and resumed ends with the uninterrupted run's parameters (so the data
    cursor and the frozen base, rebuilt by `init`, came back exactly)."""
    from jaxrl.training.driver import RunConfig, train

    options = dict(total_steps=48, lora_rank=4, lr=1e-2)  # 6 updates of 8 samples
    run = dict(num_seeds=2, checkpoint_every=24, keep_checkpoints=5, log_every=24)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(make(**options), RunConfig(run_dir=str(full_dir), progress=False, **run))
    steps = sorted(int(p.name) for p in (full_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [3, 6]

    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after checkpoint 3
    shutil.rmtree(stopped_dir / "checkpoints" / "6")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(
        make(**options), RunConfig(run_dir=str(stopped_dir), resume=True, progress=False, **run)
    )
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    timing = {"steps_per_second", "seconds", "tokens_per_second"}
    learned = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert learned(resumed.metrics) == learned(full.metrics)

    summary = json.loads((full_dir / "summary.json").read_text())
    assert summary["progress_unit"] == "samples" and summary["samples_per_agent"] == 48
    assert summary["tokens_per_second"] > 0
    assert len(summary["eval_accuracy_per_agent"]) == 2
    assert summary["eval_accuracy"] == pytest.approx(np.mean(summary["eval_accuracy_per_agent"]))
    tokens = [row["tokens"] for row in full.metrics]
    assert all(len(t) == 2 and 8 * 3 * 3 <= t[0] <= 8 * 3 * 4 for t in tokens)  # 3-4 per row
    model, params = from_pretrained(full_dir / "model")  # agent 0, LoRA merged
    merged = resumed.algorithm.merged_params(jax.tree.map(lambda x: x[0], resumed.state))
    jax.tree.map(np.testing.assert_allclose, params, jax.device_get(merged))


def test_a_run_directory_resolves_to_its_model_folder(tmp_path):
    """A run directory has a config.json of its own (the run's): `model` must look in
    `model/` first (a driver-made run directory once failed as "no *.safetensors")."""
    from jaxrl.algorithms.lm_common import resolve_model_dir

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "model" / "config.json").write_text("{}")
    (run / "model" / "model.safetensors").write_bytes(b"")
    assert resolve_model_dir(str(run)) == run / "model"
    assert resolve_model_dir(str(run / "model")) == run / "model"
