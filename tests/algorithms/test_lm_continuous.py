"""Continuous batching in the token-rollout algorithms (`--continuous-batching`,
`--sampler-slots`): GRPO and PPO-LM train on the same completions, so to the same
parameters, as with the static sampler; bad settings name the field. Partial rollouts
(`--partial-rollouts`, `--rollout-token-budget`): groups with a cut completion wait and
come back first, their rows kept; a resumed run continues them as the uninterrupted one.

The sampler itself (same tokens as `generate`) is tested in tests/lm/test_continuous.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import grpo, ppo_lm
from jaxrl.config import ConfigError
from jaxrl.tasks import Example
from jaxrl.training.driver import RunConfig, train

TINY = dict(
    task="repeat:12",
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    num_prompts=4,
    group_size=4,
    total_steps=16 * 2,
    eval_batch_size=32,
    eval_samples=2,
    reward="correct+length:6:3",  # rewards differ within a group, so parameters move
    lr=1e-3,
)
PACKAGES = {"grpo": grpo, "ppo-lm": ppo_lm}


def make(name: str, **overrides):
    package = PACKAGES[name]
    return package.make(cfg.replace(package.default_config(), **{**TINY, **overrides}))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_continuous_batching_trains_the_same_parameters(name, tmp_path):
    """Two seeds, two updates: the completions are the static sampler's (the same noise
    per row and step), and the sampler's log-probabilities, which differ by rounding
    only, reach no parameter without a rollout correction."""
    run = dict(num_seeds=2, progress=False, seed=3)
    static = train(make(name), RunConfig(run_dir=str(tmp_path / "static"), **run))
    continuous = train(
        make(name, continuous_batching=True, sampler_slots=5),
        RunConfig(run_dir=str(tmp_path / "continuous"), **run),
    )
    assert continuous.summary["params_fingerprint"] == static.summary["params_fingerprint"]
    for before, after in zip(static.metrics, continuous.metrics, strict=True):
        for metric in ("reward_mean", "response_length_mean", "clipped_fraction", "loss"):
            assert before[metric] == after[metric], metric


def test_default_slots_are_half_of_the_sampled_completions():
    assert make("grpo", continuous_batching=True).sampler_slots == 8
    assert make("grpo", continuous_batching=True, dynamic_sampling=1).sampler_slots == 16
    assert make("grpo", continuous_batching=True, sampler_slots=3).sampler_slots == 3


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"sampler_slots": 4}, r"sampler_slots=4: must be None without continuous_batching"),
        ({"continuous_batching": True, "sampler_slots": 0}, r"sampler_slots=0.*\[1, 16\]"),
        ({"continuous_batching": True, "sampler_slots": 17}, r"sampler_slots=17.*\[1, 16\]"),
        (
            {"continuous_batching": True, "sampler_slots": 17, "dynamic_sampling": 1},
            None,
        ),
        (
            {"continuous_batching": True, "task": "guess", "max_number": 8},
            r"continuous_batching=True: must be False on the multi-turn task 'guess'",
        ),
    ],
)
def test_bad_settings_name_the_field(overrides, match):
    if match is None:  # 32 completions are sampled with the spares: 17 slots are fine
        assert make("grpo", **overrides).sampler_slots == 17
        return
    with pytest.raises(ConfigError, match=match):
        make("grpo", **overrides)


# ---------------------------------------------------------------------- partial rollouts
PARTIAL = dict(continuous_batching=True, sampler_slots=6, partial_rollouts=True)


def _agent0(tree):
    return jax.tree.map(lambda x: jnp.asarray(x[0]), tree)


def _update(algo, collect, state, host):
    """One agent's prepare -> collect (jitted, `collect`) -> process: (state, inputs,
    collected, batch, host, metrics), host arrays."""
    inputs, host = algo.prepare(host)
    state, collected = collect(state, _agent0(inputs))
    collected = jax.tree.map(lambda x: np.asarray(x)[None], collected)
    batch, host, metrics = algo.process(collected, host)
    return state, inputs, collected, batch, host, metrics


def test_partial_rollouts_learn_from_ended_groups_and_continue_the_others():
    """A budget of 3 tokens per update cuts most completions of the random model (13
    tokens at most): their groups wait with no loss and come back first in the next
    update's queue, their tokens and behaviour log-probs kept."""
    algo = make("grpo", rollout_token_budget=3, **PARTIAL)
    g, budget, prompt_len = 4, 3, algo.prompt_len
    collect = jax.jit(algo.collect)
    state = algo.init(jax.random.key(0), algo.hyperparams())
    host = algo.init_host_state(0, 1)
    assert host["carry"] == [[]]
    state, inputs, collected, batch, host, metrics = _update(algo, collect, state, host)
    lengths, finished = collected["lengths"][0], collected["finished"][0]
    assert lengths.max() == budget and (inputs["prefix_lengths"] == 0).all()
    ended = (finished | (lengths >= algo.max_new_tokens)).reshape(-1, g).all(1)
    carry = host["carry"][0]
    assert len(carry) == np.sum(~ended) > 0
    assert metrics["waiting_groups"] == [len(carry) / 4]
    cmask = batch["completion_mask"][0].reshape(4, g, -1)
    assert not cmask[~ended].any() and (batch["rewards"][0].reshape(4, g)[~ended] == 0).all()
    assert all(cmask[i].any(-1).all() for i in np.flatnonzero(ended))
    waiting = np.flatnonzero(~ended)
    for group, i in zip(carry, waiting, strict=True):
        rows = slice(i * g, (i + 1) * g)
        assert [len(t) for t in group["tokens"]] == lengths[rows].tolist()
        completion = collected["tokens"][0, rows, prompt_len:]
        assert group["tokens"] == [completion[j, : lengths[rows][j]].tolist() for j in range(g)]
        np.testing.assert_array_equal(
            np.concatenate([np.asarray(lp, np.float32) for lp in group["logprobs"]]),
            collected["sampler_logp"][0, rows][collected["completion_mask"][0, rows]],
        )
    carried_examples = [Example(*group["example"]) for group in carry]

    # The next update: the carried groups first, continued where they stopped.
    state, inputs, collected2, _, host, _ = _update(algo, collect, state, host)
    assert inputs["prefix_lengths"][0].reshape(4, g)[: len(carry)].tolist() == [
        [len(t) for t in group["tokens"]] for group in carry
    ]
    expected, _ = algo.prompt_tokens(carried_examples, algo.prompt_len)
    np.testing.assert_array_equal(inputs["tokens"][0][: len(carry)], expected)
    for k, group in enumerate(carry):
        for j in range(g):
            row, n = k * g + j, len(group["tokens"][j])
            assert (
                collected2["tokens"][0, row, prompt_len : prompt_len + n].tolist()
                == group["tokens"][j]
            )
            np.testing.assert_array_equal(
                collected2["sampler_logp"][0, row, :n], np.asarray(group["logprobs"][j], np.float32)
            )
            assert collected2["lengths"][0, row] - n <= budget

    # A completion gets at most 3 of its 13 tokens per update: by the fifth update every
    # group of the first has ended and been learned from.
    learned_some = False
    for _ in range(3):
        state, _, _, batch, host, metrics = _update(algo, collect, state, host)
        learned_some |= metrics["waiting_groups"][0] < 1
    left = {tuple(group["example"]) for group in host["carry"][0]}
    assert not left & {tuple(e) for e in carried_examples} and learned_some


@pytest.mark.slow
def test_partial_rollouts_resume_exactly_from_a_checkpoint(tmp_path):
    """Two seeds, four updates, checkpoints after two: a copy of the run stopped there and
    resumed ends with the uninterrupted run's parameters and metrics, the unfinished
    rows coming back from the checkpoint's host state."""
    import shutil

    options = dict(rollout_token_budget=4, total_steps=16 * 4, **PARTIAL)
    run = dict(num_seeds=2, checkpoint_every=32, keep_checkpoints=5, log_every=16, progress=False)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(make("grpo", **options), RunConfig(run_dir=str(full_dir), **run))
    waiting = [row["waiting_groups"] for row in full.metrics]
    assert max(max(w) for w in waiting) > 0, waiting  # groups were carried
    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after checkpoint 2
    shutil.rmtree(stopped_dir / "checkpoints" / "4")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(
        make("grpo", **options), RunConfig(run_dir=str(stopped_dir), resume=True, **run)
    )
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    timing = {"seconds", "steps_per_second", "sample_seconds", "learn_seconds"}
    timing |= {"sample_tokens_per_second", "learn_tokens_per_second", "tokens_per_second"}
    learned = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    np.testing.assert_equal(learned(resumed.metrics), learned(full.metrics))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"partial_rollouts": True},
            r"partial_rollouts=True: must be False without continuous_batching=True",
        ),
        (
            {**PARTIAL, "rollout_token_budget": 0},
            r"rollout_token_budget=0: must be None or an integer >= 1",
        ),
        (
            {"rollout_token_budget": 8},
            r"rollout_token_budget=8: must be None without partial_rollouts",
        ),
        (
            {**PARTIAL, "dynamic_sampling": 1},
            r"dynamic_sampling=1: must be 0 with partial_rollouts",
        ),
        (
            {**PARTIAL, "async_staleness": 1},
            r"async_staleness=1: must be 0 with partial_rollouts=True",
        ),
    ],
)
def test_bad_partial_rollout_settings_name_the_field(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make("grpo", **overrides)
