"""Process rewards: the formulas of jaxrl/objectives/process.py by hand on tiny tensors,
the host's step rewards on the policy's tokens (jaxrl/algorithms/process_rewards.py),
and their plumbing into GRPO and PPO-LM (`process_reward`: verifier, a PRM run,
PRIME's implicit PRM), with the bad inputs refused before anything compiles."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.algorithms import grpo, ppo_lm
from jaxrl.algorithms.process_rewards import StepRewards
from jaxrl.config import ConfigError
from jaxrl.lm import CharTokenizer
from jaxrl.objectives import (
    binary_cross_entropy_with_logits,
    implicit_prm_loss,
    implicit_process_rewards,
    process_advantages,
    with_process_rewards,
)
from jaxrl.training.driver import RunConfig, train


# ---------------------------------------------------------------------- formulas
def test_binary_cross_entropy_with_logits_by_hand():
    z = jnp.array([0.0, 0.0, 2.0, -3.0, 40.0])
    y = jnp.array([1.0, 0.0, 0.0, 1.0, 0.0])
    expected = [math.log(2), math.log(2), math.log1p(math.exp(2)), math.log1p(math.exp(3)), 40.0]
    np.testing.assert_allclose(binary_cross_entropy_with_logits(z, y), expected, rtol=1e-6)


def test_process_advantages_by_hand():
    """One group of two completions. Row 0 ends steps at t=1 (reward 1) and t=2 (0); row
    1 at t=0 (1) and t=1 (1), and its t=2 is padding. R = {1, 0, 1, 1}: mean 3/4, unbiased
    std 1/2, so the normalised rewards are 1/2, -3/2, 1/2, 1/2, and a token's advantage
    is the sum over its step and the later ones."""
    rewards = jnp.array([[9.0, 1.0, 0.0], [1.0, 1.0, 9.0]])  # 9: not a step end, ignored
    ends = jnp.array([[0, 1, 1], [1, 1, 0]])
    mask = jnp.array([[1, 1, 1], [1, 1, 0]])
    got = process_advantages(rewards, ends, mask, group_size=2, eps=0.0)
    np.testing.assert_allclose(got, [[-1.0, -1.0, -1.5], [1.0, 0.5, 0.0]], rtol=1e-6)


def test_process_advantages_of_equal_step_rewards_are_exactly_zero_and_groups_are_separate():
    rewards = jnp.array([[0.1, 0.1], [0.1, 0.1], [1.0, 0.0], [0.0, 0.0]])
    ends = jnp.ones((4, 2))
    mask = jnp.ones((4, 2))
    got = np.asarray(process_advantages(rewards, ends, mask, group_size=2))
    assert (got[:2] == 0).all()  # group 0: equal rewards, no signal (not float noise)
    # Group 1: R = {1, 0, 0, 0}, mean 1/4, std sqrt((9/16 + 3/16) / 3) = 1/2 (ddof=1).
    std = 0.5
    r = np.array([[0.75, -0.25], [-0.25, -0.25]]) / (std + 1e-6)
    np.testing.assert_allclose(got[2:], [[r[0].sum(), r[0, 1]], [r[1].sum(), r[1, 1]]], rtol=1e-5)
    with pytest.raises(ConfigError, match="group_size"):
        process_advantages(rewards, ends, mask, group_size=1)
    with pytest.raises(ConfigError, match="a divisor of the batch size 4"):
        process_advantages(rewards, ends, mask, group_size=3)


def test_with_process_rewards_adds_the_weighted_step_rewards():
    outcome = jnp.array([[0.0, 0.0, 1.0]])
    steps = jnp.array([[0.0, 0.5, 1.0]])
    np.testing.assert_allclose(with_process_rewards(outcome, steps, 0.5), [[0.0, 0.25, 1.5]])


def test_implicit_process_rewards_and_prm_loss_by_hand():
    prm_logp = jnp.array([[-1.0, -2.0, -7.0]])
    ref_logp = jnp.array([[-1.5, -1.0, -3.0]])
    mask = jnp.array([[1, 1, 0]])
    rewards = implicit_process_rewards(prm_logp, ref_logp, mask, 0.5)
    np.testing.assert_allclose(rewards, [[0.25, -0.5, 0.0]])
    # r_phi(y) = 0.25 - 0.5 = -0.25; a correct completion: -log sigmoid(-0.25).
    labels = jnp.array([1.0])
    loss = implicit_prm_loss(prm_logp, ref_logp, mask, labels, 0.5)
    np.testing.assert_allclose(loss, [math.log1p(math.exp(0.25))], rtol=1e-6)
    wrong = implicit_prm_loss(prm_logp, ref_logp, mask, jnp.array([0.0]), 0.5)
    np.testing.assert_allclose(wrong, [math.log1p(math.exp(-0.25))], rtol=1e-6)
    # Its gradient raises log pi_phi of a correct completion's tokens (and only those).
    grad = jax.grad(lambda lp: implicit_prm_loss(lp, ref_logp, mask, labels, 0.5).sum())(prm_logp)
    sigmoid = 1 / (1 + math.exp(0.25))
    np.testing.assert_allclose(grad, [[-0.5 * (1 - sigmoid)] * 2 + [0.0]], rtol=1e-6)


# ---------------------------------------------------------------------- host step rewards
def test_verifier_step_rewards_sit_on_the_policy_tokens_that_end_steps():
    task = tasks.make_task("addition_steps", digits=1, num_eval=8)
    tok = CharTokenizer(tasks.BASE_ALPHABET)
    source = StepRewards("verifier", task, tok, max_len=16, dtype="float32")
    example = tasks.Example("3+4=", "07;7")
    texts = ["07;8", "07;7", "5"]
    width = 6
    rows = [tok.encode(t, add_eos=True) for t in texts]
    tokens = np.zeros((3, width), np.int32)
    keep = np.zeros((3, width), bool)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = ids
        keep[i, : len(ids)] = True
    out = source.token_rewards([example] * 3, texts, tokens, keep)
    # "07;8<eos>": the step "07" ends at ";" (t=2, right), "8" at the eos (t=4, wrong).
    assert out["step_ends"].tolist()[0] == [0, 0, 1, 0, 1, 0]
    assert out["process_rewards"].tolist()[0] == [0, 0, 1, 0, 0, 0]
    assert out["process_rewards"].tolist()[1] == [0, 0, 1, 0, 1, 0]
    # "5<eos>": one step, wrong, ending at the eos.
    assert out["step_ends"].tolist()[2] == [0, 1, 0, 0, 0, 0]
    assert out["process_rewards"].tolist()[2] == [0] * 6


# ---------------------------------------------------------------------- GRPO and PPO-LM
LM = dict(
    task="addition_steps",
    digits=1,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    eval_batch_size=32,
    num_prompts=4,
    group_size=4,
    total_steps=16 * 2,
    eval_samples=2,
    reward="correct+length:3:2",
)


def make(module, **overrides):
    return module.make(cfg.replace(module.default_config(), **{**LM, **overrides}))


def first_batch(algo, collected=None):
    """(state, batch, metrics, collected) of one agent's first update: prepare, collect
    (or the given `collected` of another algorithm's collect, to skip a compile), process."""
    state = algo.init(jax.random.key(0), algo.hyperparams())
    inputs, host = algo.prepare(algo.init_host_state(0, 1))
    if collected is None:
        state, collected = jax.jit(algo.collect)(state, jax.tree.map(lambda x: x[0], inputs))
        collected = jax.tree.map(lambda x: np.asarray(x)[None], collected)
    batch, _, metrics = algo.process(collected, host)
    return state, jax.tree.map(lambda x: jnp.asarray(x[0]), batch), metrics, collected


def synthetic_step_rewards(batch, seed=0):
    """Step rewards in [0, 1] on every step end (a random model's steps are all wrong, so
    the verifier's would all be 0: no signal to see)."""
    rng = np.random.default_rng(seed)
    ends = np.asarray(batch["step_ends"])
    return {**batch, "process_rewards": jnp.asarray(rng.random(ends.shape) * ends, jnp.float32)}


@pytest.mark.parametrize("module", [grpo, ppo_lm], ids=["grpo", "ppo-lm"])
def test_step_rewards_enter_the_update_with_their_weight_and_nothing_else(module):
    """At weight 0 the update is the outcome-only one, bit for bit (the plumbing adds
    weight x the process term and nothing else); at weight 1 step rewards change it."""
    plain = make(module)
    state, batch, _, collected = first_batch(plain)
    zero = make(module, process_reward="verifier", process_reward_weight=0.0)
    one = make(module, process_reward="verifier")
    _, with_steps, metrics, _ = first_batch(one, collected)
    assert {"process_rewards", "step_ends"} <= set(with_steps) and "process_reward_mean" in metrics
    assert jnp.all(with_steps["tokens"] == batch["tokens"])  # the same completions
    steps = synthetic_step_rewards(with_steps)
    base, _ = jax.jit(plain.learn)(state, batch)
    unweighted, _ = jax.jit(zero.learn)(state, steps)
    weighted, _ = jax.jit(one.learn)(state, steps)
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), base.params, unweighted.params)
    assert all(jax.tree.leaves(same))
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), base.params, weighted.params)
    assert any(jax.tree.leaves(moved))


@pytest.mark.parametrize("module", [grpo, ppo_lm], ids=["grpo", "ppo-lm"])
def test_the_implicit_prm_trains_on_outcome_labels_and_scores_every_token(module):
    algo = make(module, process_reward="implicit", implicit_prm_lr=1e-2)
    state, batch, _, _ = first_batch(algo)
    assert batch["outcome_labels"].shape == batch["rewards"].shape
    # pi_phi and the reference start as copies of the policy.
    equal = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.prm_params, state.ref_params)
    assert all(jax.tree.leaves(equal))
    new, metrics = jax.jit(algo.learn)(state, batch)
    assert np.isfinite(metrics["implicit_prm_loss"]) and np.isfinite(
        metrics["implicit_reward_mean"]
    )
    # At pi_phi = pi_ref, r_phi = 0 for every completion: the loss is log 2.
    assert float(metrics["implicit_prm_loss"]) == pytest.approx(math.log(2.0), rel=1e-5)
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), new.prm_params, state.prm_params)
    assert any(jax.tree.leaves(moved))
    frozen = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), new.ref_params, state.ref_params)
    assert all(jax.tree.leaves(frozen))


@pytest.mark.slow
def test_the_implicit_prm_is_checkpointed_and_resumes_exactly(tmp_path):
    import shutil

    options = dict(process_reward="implicit", implicit_prm_lr=1e-2, total_steps=16 * 4)
    runs = dict(checkpoint_every=32, keep_checkpoints=5, log_every=1, progress=False)
    config = cfg.replace(grpo.default_config(), **{**LM, **options})
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(grpo.make(config), RunConfig(run_dir=str(full_dir), **runs))
    shutil.copytree(full_dir, stopped_dir)
    shutil.rmtree(stopped_dir / "checkpoints" / "4")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(grpo.make(config), RunConfig(run_dir=str(stopped_dir), resume=True, **runs))
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    jax.tree.map(np.testing.assert_array_equal, resumed.state.prm_params, full.state.prm_params)
    assert "implicit_prm_loss" in full.metrics[-1]


@pytest.mark.parametrize(
    ("module", "overrides", "match"),
    [
        (grpo, {"task": "addition"}, r"invalid process_reward='verifier': task 'addition'"),
        (grpo, {"process_reward": ""}, r"invalid process_reward='': must be None, 'verifier'"),
        (grpo, {"process_reward_weight": -1.0}, r"invalid process_reward_weight=-1.0"),
        (grpo, {"implicit_prm_beta": 0.0}, r"invalid implicit_prm_beta=0.0"),
        (
            grpo,
            {"task": "guess", "max_number": 8},
            r"invalid process_reward='verifier': must be None on the multi-turn task 'guess'",
        ),
        (
            grpo,
            {"advantage": "reinforce_pp", "group_size": 1, "num_prompts": 16},
            r"invalid group_size=1: must be >= 2 with process_reward",
        ),
        (
            ppo_lm,
            {"process_reward": "implicit", "lora_rank": 4},
            r"invalid lora_rank=4: must be 0 with process_reward='implicit'",
        ),
        (
            ppo_lm,
            {"process_reward": "Verifier"},
            r"invalid process_reward='Verifier': must be 'verifier', 'implicit' or the run "
            r"directory of a PRM \(invalid model='Verifier'",
        ),
    ],
)
def test_bad_process_reward_input_is_refused_before_compiling(module, overrides, match):
    config_overrides = {**LM, "process_reward": "verifier", **overrides}
    with pytest.raises(ConfigError, match=match):
        module.make(cfg.replace(module.default_config(), **config_overrides))


def test_process_advantages_without_the_std_are_the_deviations_from_the_group_mean():
    rewards = jnp.array([[0.99, 0.97], [0.98, 0.98]])
    ends = jnp.ones((2, 2))
    got = process_advantages(rewards, ends, ends, group_size=2, scale_by_std=False)
    # mean 0.98: deviations 0.01, -0.01, 0, 0, summed over each token's step and later.
    np.testing.assert_allclose(got, [[0.0, -0.01], [0.0, 0.0]], atol=1e-6)
    scaled = process_advantages(rewards, ends, ends, group_size=2)
    assert float(jnp.max(jnp.abs(scaled))) > 0.5  # the std blows a 0.01 difference up
