"""PPO with a critic for language models (jaxrl.algorithms.ppo_lm): config errors, GAE on
a hand-computed padded batch, the critic's values at the completion positions, and (slow
tier: it compiles both models' gradients twice) exact gradient accumulation of the
combined loss.

A tiny model (1 layer, hidden 32) keeps compiles short. The learning run and the
checkpoint/resume run through the driver are in test_ppo_lm_learning.py (slow tier);
multi-turn episodes in test_ppo_lm_multiturn.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import ppo_lm
from jaxrl.algorithms.lm_common import encode_example
from jaxrl.config import ConfigError
from jaxrl.objectives import explained_variance, gae_advantages, outcome_token_rewards

TINY = dict(
    digits=2,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    num_prompts=4,
    group_size=2,
    total_steps=8 * 4,
    eval_batch_size=32,
    eval_samples=4,
)


def make(**overrides) -> ppo_lm.PPOLM:
    return ppo_lm.make(cfg.replace(ppo_lm.default_config(), **{**TINY, **overrides}))


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"advantage": "grpo"}, "advantage"),
        ({"gamma": 1.5}, "gamma"),
        ({"gae_lambda": -0.1}, "gae_lambda"),
        ({"critic_lr": 0.0}, "critic_lr"),
        ({"vf_coef": 0.0}, "vf_coef"),
        ({"vf_clip_eps": 0.0}, "vf_clip_eps"),
        ({"group_size": 1, "dynamic_sampling": 1}, "dynamic_sampling"),
        ({"num_minibatches": 3}, "num_minibatches"),  # GRPO's checks still run
        ({"eps_low": 0.3, "eps_high": 0.2}, "eps_high"),
    ],
)
def test_bad_config_names_the_field(overrides, field):
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        make(**overrides)


def test_group_size_one_and_an_unclipped_value_loss_are_valid():
    algo = make(group_size=1, num_prompts=8, clip_value=False, vf_clip_eps=0.0)
    assert algo.batch_rows == 8 and algo.name == "ppo-lm"


# ---------------------------------------------------------------------- advantages
# Two padded rows of completion tokens; row 0 is rewarded (1 on its last token), row 1 not.
MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
VALUES = np.array([[0.5, 0.6, 0.7, 9.0], [0.2, 0.4, 9.0, 9.0]], np.float32)  # 9: padding
# gamma 0.9, lambda 0.5, V = 0 after the last token:
#   row 0: d2 = 1 - 0.7 = 0.3; d1 = 0.9 * 0.7 - 0.6 = 0.03; d0 = 0.9 * 0.6 - 0.5 = 0.04
#          A2 = 0.3, A1 = 0.03 + 0.45 * 0.3 = 0.165, A0 = 0.04 + 0.45 * 0.165 = 0.11425
#   row 1: d1 = 0 - 0.4 = -0.4; d0 = 0.9 * 0.4 - 0.2 = 0.16; A1 = -0.4, A0 = 0.16 - 0.18
RAW = np.array([[0.11425, 0.165, 0.3, 0.0], [-0.02, -0.4, 0.0, 0.0]], np.float32)
RETURNS = (RAW + VALUES) * MASK  # the value targets: [[0.61425, 0.765, 1.0], [0.18, 0.0]]


def test_gae_advantages_hand_computed_on_a_padded_batch():
    token_rewards = outcome_token_rewards(jnp.array([1.0, 0.0]), MASK)
    close(token_rewards, [[0, 0, 1, 0], [0, 0, 0, 0]])
    adv, ret = gae_advantages(token_rewards, VALUES, MASK, 0.9, 0.5, whiten=False)
    close(adv, RAW)
    close(ret, RETURNS)
    whitened, ret = gae_advantages(token_rewards, VALUES, MASK, 0.9, 0.5, whiten=True)
    flat = RAW[MASK > 0]  # whitened over the batch's 5 completion tokens, population std
    close(np.asarray(whitened)[MASK > 0], (flat - flat.mean()) / np.sqrt(flat.var() + 1e-8))
    assert np.all(np.asarray(whitened)[MASK == 0] == 0.0)
    close(ret, RETURNS)  # the targets use the raw advantages


def test_explained_variance():
    returns = np.array([[1.0, 2.0, 3.0, 7.0]], np.float32)
    mask = np.array([[1, 1, 1, 0]], np.float32)
    assert float(explained_variance(returns, returns, mask)) == pytest.approx(1.0)
    assert float(explained_variance(np.full_like(returns, 2.0), returns, mask)) == (
        pytest.approx(0.0, abs=1e-6)
    )
    # Errors (0.5, 0, -0.5): 1 - var(err) / var(R) = 1 - (1/6) / (2/3) = 0.75.
    values = returns + np.array([[-0.5, 0.0, 0.5, 0.0]], np.float32)
    assert float(explained_variance(values, returns, mask)) == pytest.approx(0.75)
    assert float(explained_variance(returns, np.ones_like(returns), mask)) == 0.0


# ---------------------------------------------------------------------- the critic
@pytest.fixture(scope="module")
def algo():
    return make()


@pytest.fixture(scope="module")
def state(algo):
    return jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())


@pytest.fixture(scope="module")
def advantages(algo):
    """The trainer's `critic_advantages`, jitted once for both tests (8 rows each)."""
    return jax.jit(algo.critic_advantages)


COMPLETIONS = ["12", "7", "123456", "1", "23", "456", "89", "345"]  # 8 rows: 4 prompts x 2


def hand_batch(algo, completions: list[str]) -> dict[str, np.ndarray]:
    """A learning batch: prompts of the first update with the given completions
    (right-padded, eos), zero rewards and log-probs (set by the tests)."""
    _, host = algo.prepare(algo.init_host_state(0, 1))
    examples = host["rollout"]["examples"][0]
    rows, t = len(completions), algo.max_new_tokens
    tokens, mask = algo.prompt_tokens(
        [examples[i % len(examples)] for i in range(rows)], algo.prompt_len
    )
    tokens = np.concatenate([tokens, np.full((rows, t), algo.tokenizer.pad_id, np.int32)], 1)
    mask = np.concatenate([mask, np.zeros((rows, t), bool)], 1)
    cmask = np.zeros((rows, t), bool)
    for row, text in enumerate(completions):
        ids = encode_example(algo.tokenizer, "", text)[1][:t]
        tokens[row, algo.prompt_len : algo.prompt_len + len(ids)] = ids
        mask[row, algo.prompt_len : algo.prompt_len + len(ids)] = True
        cmask[row, : len(ids)] = True
    zeros = np.zeros((rows, t), np.float32)
    return {
        "tokens": tokens,
        "mask": mask,
        "completion_mask": cmask,
        "rewards": np.zeros(rows, np.float32),
        "old_logp": zeros,
        "sampler_logp": zeros,
        "old_entropy": zeros,
    }


def test_critic_values_sit_at_the_state_before_each_completion_token(algo, state, advantages):
    """A critic whose layers are zeroed values each position by its own token only,
    V = g(token); so the value of completion token t must be g(the token before it):
    the prompt's last token for t = 0, then the completion's own tokens. The trainer's
    `critic_advantages` returns exactly these values and GAE on them."""
    key = jax.random.key(1)
    critic = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "layers_0" in str(path) else x,
        state.critic_params,
    )
    head = critic["params"]["value_head"]
    critic["params"]["value_head"] = {
        "kernel": jax.random.normal(key, head["kernel"].shape),
        "bias": jnp.full(head["bias"].shape, 0.1),
    }
    state = state.replace(critic_params=critic)
    vocab = jnp.arange(algo.tokenizer.vocab_size, dtype=jnp.int32)[:, None]
    g = np.asarray(
        jax.jit(algo.critic.apply, static_argnames="return_hidden")(
            critic, vocab, return_hidden=True
        )[1][:, 0]
    )
    assert np.unique(g).size == g.size  # every token has its own value

    batch = hand_batch(algo, COMPLETIONS)  # "123456" is cut at the budget
    tokens, cmask = batch["tokens"], batch["completion_mask"]
    p = algo.prompt_len
    expected = g[tokens[:, p - 1 : -1]] * cmask  # the token before each completion token
    assert cmask.sum(1).tolist()[:4] == [3, 2, algo.max_new_tokens, 2]

    rewards = np.float32([1, 0, 1, 0, 1, 1, 0, 0])
    token_rewards = outcome_token_rewards(rewards, cmask)
    fields, metrics = advantages(
        state, {**batch, "rewards": rewards}, token_rewards, jnp.asarray(cmask, jnp.float32)
    )
    close(np.asarray(fields["old_values"]) * cmask, expected)
    hp = state.hparams
    adv, ret = gae_advantages(token_rewards, expected, cmask, hp.gamma, hp.gae_lambda, True)
    close(fields["advantages"], adv)
    close(fields["returns"], ret)
    assert float(metrics["value_mean"]) == pytest.approx(expected[cmask].mean(), rel=1e-5)


@pytest.mark.slow  # compiles both models' gradients twice: ~20 CPU-s
def test_gradient_accumulation_1x8_equals_4x2_for_the_combined_loss_under_lora():
    """The combined (policy + value) gradient of 8 rows in one micro-batch equals the sum
    over 4 micro-batches of 2, for both models' adapters and the value head; with ratios
    and values moved off their old values so the policy and value clips both act. Under
    LoRA, so the critic's own adapters on the shared base are what is checked (its
    starting values are 0: the fresh head)."""
    algo = make(lora_rank=4)
    state = jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())
    rng = np.random.default_rng(0)
    batch = hand_batch(algo, COMPLETIONS)
    cmask = batch["completion_mask"].astype(np.float32)
    policy = algo.model_params(state.params, state.base_params)
    logp = jax.jit(algo.completion_logprobs)(policy, batch["tokens"], batch["mask"])
    old_logp = np.asarray(logp) + rng.normal(0, 0.3, cmask.shape).astype(np.float32) * cmask
    rewards = np.float32([1, 0, 1, 1, 0, 0, 1, 0])
    batch = {**batch, "rewards": rewards, "old_logp": old_logp, "sampler_logp": old_logp}
    token_rewards = outcome_token_rewards(rewards, cmask)
    fields, _ = jax.jit(algo.critic_advantages)(state, batch, token_rewards, jnp.asarray(cmask))
    assert np.all(np.asarray(fields["old_values"]) == 0.0)
    fields["old_values"] = fields["old_values"] + rng.normal(0, 0.3, cmask.shape) * cmask
    data = {**batch, **fields, "loss_mask": jnp.asarray(cmask)}
    learner = {"policy": state.params, "critic": state.critic_params}
    assert set(learner["critic"]) == {"adapters", "value_head"}

    def grads(micro_batches):
        accumulating = make(lora_rank=4, micro_batches=micro_batches)
        return jax.jit(accumulating.gradient)(learner, state, data)

    whole, whole_stats = grads(1)
    summed, summed_stats = grads(4)
    assert 0 < float(whole_stats["value_clip_fraction"]) < 1
    assert float(whole_stats["clip_fraction_low"]) + float(whole_stats["clip_fraction_high"]) > 0
    # Every metric, sums and token means alike (`TokenMean` adds counts, so micro-batches
    # with different numbers of tokens do not skew the means).
    assert set(summed_stats) == set(whole_stats)
    for name, value in whole_stats.items():
        assert float(summed_stats[name]) == pytest.approx(float(value), rel=1e-5, abs=1e-7), name
    for part in ("policy", "critic"):
        for a, b in zip(jax.tree.leaves(whole[part]), jax.tree.leaves(summed[part]), strict=True):
            close(b, a, 2e-6)
        assert max(float(jnp.abs(x).max()) for x in jax.tree.leaves(whole[part])) > 1e-4
