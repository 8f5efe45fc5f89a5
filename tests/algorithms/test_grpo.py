"""GRPO (jaxrl.algorithms.grpo): the staged step's phases, accumulation, bad input.

A tiny model (1 layer, hidden 32) keeps compiles short. The estimators and losses
(`jaxrl.objectives`) have their own hand-computed tests (test_grpo_losses.py); here: what
the trainer does with them. The learning run (SFT warm start, then GRPO on addition) is in
test_grpo_learning.py.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import grpo, lm_rollout, lm_rollout_rewards
from jaxrl.algorithms.lm_common import encode_example
from jaxrl.config import ConfigError

TINY = dict(
    digits=2,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    num_prompts=4,
    group_size=4,
    total_steps=16 * 4,
    eval_batch_size=32,
    eval_samples=4,
)


def make(**overrides) -> grpo.GRPO:
    return grpo.make(cfg.replace(grpo.default_config(), **{**TINY, **overrides}))


def agent0(tree):
    return jax.tree.map(lambda x: jnp.asarray(x[0]), tree)


@pytest.fixture(scope="module")
def algo():
    return make(kl_coef=0.1)


@pytest.fixture(scope="module")
def learn(algo):
    return jax.jit(algo.learn)


@pytest.fixture(scope="module")
def first_update(algo):
    """(state, collected, batch) of one agent's first update."""
    state = algo.init(jax.random.key(0), algo.hyperparams())
    inputs, host = algo.prepare(algo.init_host_state(0, 1))
    state, collected = jax.jit(algo.collect)(state, agent0(inputs))
    stacked = jax.tree.map(lambda x: np.asarray(x)[None], collected)
    batch, _, metrics = algo.process(stacked, host)
    return state, jax.device_get(collected), batch, metrics


# ---------------------------------------------------------------------- sampling phase
def test_collect_scores_completions_like_the_sampler():
    algo = make(kl_coef=0.1, fuse_rescoring=False)  # re-scores in collect
    assert not algo.config.rescores_in_loss
    state = algo.init(jax.random.key(0), algo.hyperparams())
    inputs, _ = algo.prepare(algo.init_host_state(0, 1))
    _, collected = jax.device_get(jax.jit(algo.collect)(state, agent0(inputs)))
    rows = algo.config.num_prompts * algo.config.group_size
    assert collected["tokens"].shape == (rows, algo.prompt_len + algo.max_new_tokens)
    mask = collected["completion_mask"]
    assert (mask.sum(1) == collected["lengths"]).all()
    # The trainer's re-scoring equals the sampler's log-probs (same parameters; only the
    # order of float sums differs), and the reference is the starting policy.
    np.testing.assert_allclose(collected["old_logp"] * mask, collected["sampler_logp"], atol=1e-5)
    np.testing.assert_allclose(
        collected["ref_logp"] * mask, collected["old_logp"] * mask, atol=1e-6
    )
    assert (collected["old_entropy"][mask] > 0).all()


def test_one_optimiser_step_per_update_rescores_in_the_loss(algo, first_update):
    """By default (one epoch, one minibatch) collect skips the re-scoring pass: the
    loss's forward pass runs on the sampling parameters and provides it."""
    _, collected, batch, _ = first_update
    assert algo.config.rescores_in_loss
    assert "old_logp" not in collected and "old_entropy" not in collected
    assert "ref_logp" in collected and "ref_logp" in batch and "sampler_logp" in batch
    # Anything that reads the trainer's log-probs before the loss needs the separate pass.
    for overrides in (
        {"num_epochs": 2},
        {"num_minibatches": 2},
        {"kl_in_reward": True, "kl_coef": 0.1},
        {"entropy_top_fraction": 0.5},
        {"fuse_rescoring": False},
    ):
        config = cfg.replace(grpo.default_config(), **{**TINY, **overrides})
        assert not config.rescores_in_loss, overrides


def test_rescoring_in_the_loss_gives_the_same_update(algo, learn, first_update):
    """The fused path (ratio against the loss's own stop-gradient log-probs) and the
    separate re-scoring pass give the same parameters, loss and KL."""
    state, _, batch, _ = first_update
    batch = agent0(batch)
    batch = {**batch, "rewards": jnp.asarray(np.arange(16) % 3, jnp.float32)}
    logp, entropy = algo.completion_logprobs(
        state.params, batch["tokens"], batch["mask"], with_entropy=True
    )
    separate = make(kl_coef=0.1, fuse_rescoring=False)
    rescored = {**batch, "old_logp": logp, "old_entropy": entropy}
    fused_state, fused = learn(state, batch)
    separate_state, apart = jax.jit(separate.learn)(state, rescored)
    for a, b in zip(
        jax.tree.leaves(fused_state.params), jax.tree.leaves(separate_state.params), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=2e-6)
    for name in ("loss", "kl", "entropy", "grad_norm"):
        np.testing.assert_allclose(fused[name], apart[name], rtol=1e-4, err_msg=name)
    assert "logp_gap_sum" not in fused
    assert 0 <= float(fused["logp_gap"]) < 1e-4 and float(apart["logp_gap"]) < 1e-4


# ---------------------------------------------------------------------- rewards phase
def test_process_scores_each_completion_against_its_own_prompt(algo):
    """Hand-made completions: the first of every group correct, the rest wrong."""
    c = algo.config
    inputs, host = algo.prepare(algo.init_host_state(0, 1))
    examples = host["rollout"]["examples"][0]  # the drawn prompts, passed on to process
    rows, t = c.num_prompts * c.group_size, algo.max_new_tokens
    tokens = np.full((rows, algo.prompt_len + t), algo.tokenizer.pad_id, np.int32)
    cmask = np.zeros((rows, t), bool)
    for p, example in enumerate(examples):
        for j in range(c.group_size):
            answer = example.answer if j == 0 else "x"
            ids = encode_example(algo.tokenizer, example.prompt, answer)[1]
            tokens[p * c.group_size + j, algo.prompt_len : algo.prompt_len + len(ids)] = ids
            cmask[p * c.group_size + j, : len(ids)] = True
    zeros = np.zeros((rows, t), np.float32)
    collected = {
        "tokens": tokens,
        "mask": np.ones_like(tokens, bool),
        "completion_mask": cmask,
        "lengths": cmask.sum(1).astype(np.int32),
        "finished": np.ones(rows, bool),
        "sampler_logp": zeros,
        "old_logp": zeros,
        "old_entropy": zeros,
        "ref_logp": zeros,
    }
    batch, _, metrics = algo.process(jax.tree.map(lambda x: x[None], collected), host)
    expected = np.tile([1.0, 0.0, 0.0, 0.0], c.num_prompts)
    np.testing.assert_array_equal(batch["rewards"][0], expected)
    assert metrics["accuracy"] == [0.25] and metrics["reward_mean"] == [0.25]
    assert metrics["zero_advantage_groups"] == [0.0]
    assert inputs["tokens"].shape == (1, c.num_prompts, algo.prompt_len)


def test_dynamic_sampling_prefers_groups_with_a_learning_signal():
    rewards = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0], np.float32)  # 6 groups of 2
    # Groups 0, 3 and 4 are all-equal... here: groups (1,1) (0,1) (0,0) (1,1) (1,0) (0,0).
    np.testing.assert_array_equal(lm_rollout.select_groups(rewards, 2, 2), [1, 4])
    np.testing.assert_array_equal(lm_rollout.select_groups(rewards, 2, 3), [0, 1, 4])  # refilled
    np.testing.assert_array_equal(lm_rollout.select_groups(rewards[:4], 2, 2), [0, 1])  # no spares


def test_a_stalled_agent_is_warned_about_once_per_stall(caplog):
    """All-equal rewards in every group for STALL_UPDATES updates in a row: one warning
    naming the agent; none for an agent with a signal, none again until it recovers. The
    counters live in the host state (what checkpoints save)."""
    algo = make()
    stall = lm_rollout.STALL_UPDATES
    host = algo.init_host_state(0, 2)
    assert host["stalled"] == [0, 0]
    with caplog.at_level(logging.WARNING, logger="jaxrl.algorithms.lm_rollout_rewards"):
        for _ in range(stall - 1):
            host = algo.count_stalls(host, [1.0, 0.5])
        assert not caplog.records and host["stalled"] == [stall - 1, 0]
        for _ in range(stall):  # the stall's 20th update warns; the next ones do not
            host = algo.count_stalls(host, [1.0, 0.5])
        assert len(caplog.records) == 1 and "agent 0:" in caplog.records[0].getMessage()
        host = algo.count_stalls(host, [0.75, 0.5])  # a signal again, then a second stall
        assert host["stalled"] == [0, 0]
        for _ in range(stall):
            host = algo.count_stalls(host, [1.0, 0.5])
        assert len(caplog.records) == 2
    caplog.clear()
    whitened = make(advantage="reinforce_pp")  # batch-whitened: groups need not differ
    host = whitened.init_host_state(0, 1)
    with caplog.at_level(logging.WARNING, logger="jaxrl.algorithms.lm_rollout_rewards"):
        for _ in range(2 * stall):
            host = whitened.count_stalls(host, [1.0])
    assert not caplog.records and host["stalled"] == [0]
    # A host state saved before the counters existed starts them at 0.
    old = {"seed": 0, "num_agents": 1, "batches": 3}
    assert algo.count_stalls(old, [1.0]) == {**old, "stalled": [1]}


def test_the_stall_counter_survives_a_resume(tmp_path, monkeypatch, caplog):
    """A run whose every group has equal rewards (a random model never answers right)
    warns at the STALL_UPDATES-th update; a copy stopped after update 2 and resumed warns
    at the same update, and both save the same counters (host state) at the end."""
    import shutil

    from jaxrl.training import driver
    from jaxrl.training.checkpoint import Checkpointer

    monkeypatch.setattr(lm_rollout_rewards, "STALL_UPDATES", 3)
    run = dict(checkpoint_every=32, keep_checkpoints=5, log_every=16, progress=False)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    with caplog.at_level(logging.WARNING, logger="jaxrl.algorithms.lm_rollout_rewards"):
        full = driver.train(make(total_steps=64), driver.RunConfig(run_dir=str(full_dir), **run))
    assert [r["zero_advantage_groups"] for r in full.metrics] == [[1.0]] * 4
    assert len(caplog.records) == 1
    caplog.clear()

    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after checkpoint 2
    shutil.rmtree(stopped_dir / "checkpoints" / "4")
    (stopped_dir / "summary.json").unlink()
    algo = make(total_steps=64)
    with caplog.at_level(logging.WARNING, logger="jaxrl.algorithms.lm_rollout_rewards"):
        resumed = driver.train(algo, driver.RunConfig(run_dir=str(stopped_dir), resume=True, **run))
    assert len(caplog.records) == 1 and "3 updates in a row" in caplog.records[0].getMessage()

    def saved_host_state(run_dir):
        ckpt = Checkpointer(run_dir / "checkpoints", read_only=True)
        try:
            _, _, meta = ckpt.restore_latest(driver.checkpointed_fields(algo, resumed.state))
        finally:
            ckpt.close()
        return meta["host_state"]

    expected = {"seed": 0, "num_agents": 1, "batches": 4, "stalled": [4]}
    assert saved_host_state(full_dir) == saved_host_state(stopped_dir) == expected


# ---------------------------------------------------------------------- learning phase
def test_learning_moves_the_policy_towards_rewarded_completions(algo, learn, first_update):
    state, _, batch, _ = first_update
    batch = agent0(batch)
    rewards = np.zeros(batch["rewards"].shape, np.float32)
    rewards[::4] = 1.0  # reward the first completion of every group
    batch = {**batch, "rewards": jnp.asarray(rewards)}
    new, metrics = learn(state, batch)
    before = algo.completion_logprobs(state.params, batch["tokens"], batch["mask"])
    after = algo.completion_logprobs(new.params, batch["tokens"], batch["mask"])
    cmask = np.asarray(batch["completion_mask"])
    gain = ((np.asarray(after) - np.asarray(before)) * cmask).sum(1)
    assert gain[::4].mean() > 0 > np.delete(gain, np.s_[::4]).mean()
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    assert float(metrics["kl"]) >= 0 and float(metrics["logp_gap"]) < 1e-4


def test_micro_batches_give_the_same_update(learn, first_update):
    """Gradient accumulation over 4 micro-batches equals one batch (the normaliser is the
    minibatch's, not each micro-batch's; the aggregation tests cover every loss_agg)."""
    state, _, batch, _ = first_update
    batch = agent0(batch)
    batch = {**batch, "rewards": jnp.asarray(np.arange(16) % 3, jnp.float32)}
    # Completions of different lengths, so the micro-batches hold different numbers of
    # tokens: row i keeps its first i % 5 + 1 tokens.
    cmask = np.asarray(batch["completion_mask"])
    kept = np.cumsum(cmask, axis=1) <= (np.arange(len(cmask)) % 5 + 1)[:, None]
    batch["completion_mask"] = jnp.asarray(cmask & kept)
    # Old log-probs off the current ones, so ratios and clip fractions vary per token.
    noise = np.random.default_rng(0).normal(0, 0.3, cmask.shape).astype(np.float32)
    batch["old_logp"] = jnp.asarray(batch["sampler_logp"]) + noise
    whole, whole_metrics = learn(state, batch)
    accumulated, metrics = jax.jit(make(kl_coef=0.1, micro_batches=4).learn)(state, batch)
    for a, b in zip(
        jax.tree.leaves(whole.params), jax.tree.leaves(accumulated.params), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-5)  # Adam: ~lr x sign(g) at step 1
    # Metrics too: token means are summed with their counts over the micro-batches
    # (`TokenMean`), not averaged over micro-batches of different token counts.
    assert set(metrics) == set(whole_metrics)
    assert (
        float(whole_metrics["clip_fraction_low"]) + float(whole_metrics["clip_fraction_high"]) > 0
    )
    for name, value in whole_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"group_size": 1}, "group_size"),
        ({"eps_low": 0.3, "eps_high": 0.2}, "eps_high"),
        ({"reward": "nosuch"}, "reward"),
        ({"advantage": "gae"}, "advantage"),
        ({"loss_agg": "mean"}, "loss_agg"),
        ({"kl_in_reward": True}, "kl_in_reward"),
        ({"overlong_cache": 10}, "overlong_cache"),
        ({"max_new_tokens": 200}, "max_new_tokens"),
        ({"num_minibatches": 3}, "num_minibatches"),
        ({"task": "nosuch"}, "task"),
        ({"entropy_top_fraction": 0.0}, "entropy_top_fraction"),
    ],
)
def test_bad_config_names_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        make(**overrides)


# ---------------------------------------------------------------------- through the driver
def test_driver_trains_checkpoints_resumes_exactly_and_reports_pass_at_k(tmp_path):
    """Two agents with a KL reference through `driver.train`, warm-started from an earlier
    run's exported model: the summary has pass@k before and after; a copy of the run
    stopped after its first checkpoint and resumed ends with the uninterrupted run's
    parameters and metrics (prompt cursor and frozen reference come back exactly)."""
    import json
    import shutil

    from jaxrl.training.driver import RunConfig, train

    first_dir = tmp_path / "first"  # a model to start from, in a run directory's layout
    train(make(total_steps=16), RunConfig(run_dir=str(first_dir), progress=False))

    options = dict(total_steps=64, kl_coef=0.1, model=str(first_dir), lr=1e-3)  # 4 updates
    run = dict(num_seeds=2, checkpoint_every=32, keep_checkpoints=5, log_every=16)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(make(**options), RunConfig(run_dir=str(full_dir), progress=False, **run))
    steps = sorted(int(p.name) for p in (full_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [2, 4]

    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after checkpoint 2
    shutil.rmtree(stopped_dir / "checkpoints" / "4")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(
        make(**options), RunConfig(run_dir=str(stopped_dir), resume=True, progress=False, **run)
    )
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    timing = {"seconds", "steps_per_second", "sample_seconds", "learn_seconds"}
    timing |= {"sample_tokens_per_second", "learn_tokens_per_second", "tokens_per_second"}
    learned = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert learned(resumed.metrics) == learned(full.metrics)

    summary = json.loads((full_dir / "summary.json").read_text())
    for name in ("pass@1_before", "pass@1_after", "pass@4_before", "pass@4_after"):
        assert 0.0 <= summary[name] <= 1.0, name
    assert len(summary["pass@1_after_per_agent"]) == 2
    row = full.metrics[-1]
    for name in ("reward_mean", "accuracy", "kl", "entropy", "clip_fraction_low"):
        assert len(row[name]) == 2 and np.all(np.isfinite(row[name])), name
    assert (full_dir / "model" / "config.json").exists()
