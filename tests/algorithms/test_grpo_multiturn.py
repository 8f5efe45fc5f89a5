"""Multi-turn GRPO (jaxrl/algorithms/grpo/multiturn.py, on jaxrl/algorithms/lm_multiturn.py):
episodes as token rows.

Fast: a hand-built episode's row, masks and turn rewards, exactly; the rounds of one
update on the host with made-up model turns (nothing compiled); the environment's tokens
are out of the loss (a jitted `policy_objective` on a tiny model). Slow: a multi-turn run stopped
after a checkpoint and resumed ends with the uninterrupted run's parameters; after a
short SFT warm start, 40 GRPO updates double the guessing game's held-out win rate.
Full: 300 updates teach the policy to follow the higher/lower feedback.
"""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import objectives
from jaxrl.algorithms import grpo
from jaxrl.algorithms import lm_multiturn as lmt
from jaxrl.algorithms.grpo import multiturn as mt
from jaxrl.algorithms.grpo.learning import GRPOState
from jaxrl.algorithms.lm_common import agent, finish_metrics
from jaxrl.config import ConfigError
from jaxrl.tasks import Example
from jaxrl.training.driver import RunConfig, train

TINY = dict(
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
    total_steps=4,
    eval_batch_size=16,
    eval_samples=2,
)
GAME = Example("#0042 guess 1-8:", "7")


def make(**overrides) -> mt.MultiTurnGRPO:
    return grpo.make(cfg.replace(grpo.default_config(), **{**TINY, **overrides}))


def turn(tokenizer, *replies: str, logp: float = -0.5) -> dict[str, np.ndarray]:
    """A made-up sampled turn: each reply's characters then eos, budget 2 tokens."""
    rows = [[*tokenizer.encode(r), tokenizer.eos_id] for r in replies]
    tokens = np.full((len(rows), 2), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(rows), 2), bool)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)], mask[i, : len(ids)] = ids, True
    finished = np.ones(len(rows), bool)
    return {"tokens": tokens, "completion_mask": mask, "finished": finished,
            "sampler_logp": np.where(mask, logp, 0.0).astype(np.float32)}  # fmt: skip


@pytest.fixture(scope="module")
def algo():
    return make(kl_coef=0.1, ent_coef=0.01)


def test_sizes_follow_the_task(algo):
    # P = bos + "#0042 guess 1-8:", T = "8" + eos, F = " higher:", 4 turns for 1..8.
    assert (algo.prompt_len, algo.turn_tokens, algo.feedback_len) == (17, 2, 8)
    assert algo.max_rounds == 4
    assert algo.max_new_tokens == 4 * 2 + 3 * 8  # W: model and environment tokens
    assert algo.context_len == 17 + 32 - 2  # C: every turn but the last one's tokens


# ---------------------------------------------------------------------- one episode, exactly
def test_an_episode_is_one_row_with_only_model_tokens_in_the_loss_mask(algo):
    tok = algo.tokenizer
    rows = lmt.start_episodes(algo.task, tok, [GAME], repeat=2)
    lmt.add_turn(algo.task, tok, rows, turn(tok, "4", "7", logp=-0.25), algo.feedback_len)
    assert [r.done for r in rows] == [False, True]  # 4 is low: " higher:"; 7 hits
    lmt.add_turn(algo.task, tok, rows, turn(tok, "7", "1", logp=-0.75), algo.feedback_len)
    assert rows[1].replies == ["7"]  # an ended episode ignores what is sampled after it
    batch = lmt.episode_batch(rows, algo.prompt_len, algo.max_new_tokens, tok.pad_id)

    prompt, eos, pad = tok.encode(GAME.prompt, add_bos=True), tok.eos_id, tok.pad_id
    higher = tok.encode(" higher:")
    played = prompt + tok.encode("4") + [eos] + higher + tok.encode("7") + [eos]
    width = algo.max_new_tokens
    assert batch["tokens"][0].tolist() == played + [pad] * (17 + width - len(played))
    assert batch["mask"][0].tolist() == [True] * len(played) + [False] * (17 + width - len(played))
    # After the prompt: model, model, 8 environment tokens, model, model, padding.
    model = [1, 1] + [0] * 8 + [1, 1]
    assert batch["completion_mask"][0].tolist() == [bool(m) for m in model + [0] * (width - 12)]
    assert batch["completion_mask"][1].tolist() == [True, True] + [False] * (width - 2)
    logp = [-0.25, -0.25] + [0] * 8 + [-0.75, -0.75]
    np.testing.assert_array_equal(batch["sampler_logp"][0], logp + [0] * (width - 12))
    # Each turn's reward on its last token: the miss (0) at 1, the hit (1) at 11.
    expected = np.zeros((2, width), np.float32)
    expected[0, 11] = expected[1, 1] = 1.0
    np.testing.assert_array_equal(batch["token_rewards"], expected)
    np.testing.assert_array_equal(batch["rewards"], [1.0, 1.0])
    assert batch["tokens"][1].tolist()[:19] == prompt + tok.encode("7") + [eos]


def test_turn_rewards_sum_for_group_estimators_and_stay_on_their_turn_for_reinforce_pp():
    # Two turns of 2 model tokens with 2 environment tokens between; turn rewards 0.5, 1.
    cmask = jnp.asarray([[1, 1, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0]], jnp.float32)
    token_rewards = jnp.asarray([[0, 0.5, 0, 0, 0, 1], [0, 0.25, 0, 0, 0, 0]], jnp.float32)
    adv, returns = objectives.compute_advantages("dr_grpo", token_rewards, cmask, group_size=2)
    # Episode returns 1.5 and 0.25, group mean 0.875: A = +-0.625 on every model token.
    np.testing.assert_allclose(adv, [[0.625, 0.625, 0, 0, 0.625, 0.625], [-0.625] * 2 + [0] * 4])
    # Reward-to-go skips the environment's tokens: turn 1 sees 0.5 + 1, turn 2 only 1.
    np.testing.assert_allclose(returns, [[1.5, 1.5, 0, 0, 1, 1], [0.25, 0.25, 0, 0, 0, 0]])


# ---------------------------------------------------------------------- rounds on the host
def test_rounds_of_one_update_on_the_host():
    """prepare -> respond per turn -> process for two agents, with made-up turns: every
    row says "1", so a game whose number is 1 ends at once and the others hear " higher:"
    until their 4 turns are over; then respond says None. Without KV reuse, every turn's
    inputs are the whole contexts (tests/algorithms/test_multiturn_cache.py: with it)."""
    algo = make(reuse_kv_cache=False)
    tok = algo.tokenizer
    inputs, host = algo.prepare(algo.init_host_state(seed=0, num_agents=2))
    rows = 2 * 2  # num_prompts x group_size
    assert inputs["tokens"].shape == (2, rows, algo.context_len) and host["batches"] == 1
    played_episodes = host["rollout"]["episodes"]  # the episodes live in the host state
    assert [r.example for r in played_episodes[0]] != [r.example for r in played_episodes[1]]
    episodes = played_episodes[0]
    first = episodes[0]
    assert inputs["tokens"][0, 0, -17:].tolist() == tok.encode(first.example.prompt, add_bos=True)
    ones = {k: np.stack([v, v]) for k, v in turn(tok, *["1"] * rows).items()}  # agents axis
    played = next(i for i, r in enumerate(episodes) if r.example.answer != "1")
    for t in range(1, 5):
        inputs, host = algo.respond(ones, host)
        if t < 4:  # the context: prompt + ("1", eos, " higher:") * t, left-padded
            context = episodes[played].tokens
            assert len(context) == 17 + t * (2 + 8)
            assert inputs["tokens"][0, played, -len(context) :].tolist() == context
            assert not inputs["mask"][0, played, : -len(context)].any()
    assert inputs is None and host["rollout"]["turn"] == 4
    batch, host, metrics = algo.process(ones, host)
    assert "rollout" not in host  # nothing of the update outlives it
    assert batch["tokens"].shape == (2, rows, 17 + algo.max_new_tokens)
    for i in range(2):
        turns = [1 if r.example.answer == "1" else 4 for r in played_episodes[i]]
        assert metrics["turns_mean"][i] == np.mean(turns)
        assert batch["completion_mask"][i].sum(1).tolist() == [2 * n for n in turns]
        assert metrics["response_length_mean"][i] == 2 * np.mean(turns)
        assert metrics["reward_mean"][i] == np.mean([n == 1 for n in turns])


def test_environment_tokens_are_out_of_the_loss_kl_and_entropy(algo):
    """`policy_objective` (policy loss, k3+ KL, entropy bonus) does not change when what sits at
    the environment's and padding positions changes (they weigh exactly 0, so their
    gradient is 0 too)."""
    tok = algo.tokenizer
    rows = lmt.start_episodes(algo.task, tok, [GAME], repeat=2)
    lmt.add_turn(algo.task, tok, rows, turn(tok, "4", "5"), algo.feedback_len)
    lmt.add_turn(algo.task, tok, rows, turn(tok, "7", "6"), algo.feedback_len)
    batch = lmt.episode_batch(rows, algo.prompt_len, algo.max_new_tokens, tok.pad_id)
    cmask = batch["completion_mask"]
    rng = np.random.default_rng(0)
    width = algo.max_new_tokens
    data = {
        "tokens": batch["tokens"],
        "mask": batch["mask"],
        "completion_mask": cmask,
        "loss_mask": cmask.astype(np.float32),
        "old_logp": rng.uniform(-2, -0.1, (2, width)).astype(np.float32),
        "ref_logp": rng.uniform(-2, -0.1, (2, width)).astype(np.float32),
        "advantages": rng.normal(size=(2, width)).astype(np.float32),
    }
    noise = {k: np.where(cmask, 0.0, 3.0).astype(np.float32) for k in ("old_logp", "ref_logp")}
    noisy = {**data, **{k: data[k] + noise[k] for k in noise}}
    noisy["advantages"] = np.where(cmask, data["advantages"], 7.0).astype(np.float32)
    # Random parameters without compiling the initialisers (any finite ones will do).
    shapes = jax.eval_shape(algo.model.init, jax.random.key(0), jnp.zeros((1, 1), jnp.int32))
    params = jax.tree.map(lambda s: 0.1 * rng.standard_normal(s.shape, np.float32), shapes)
    state = GRPOState(params, None, jax.random.key(0), jnp.int32(0), algo.hyperparams())
    normaliser = objectives.loss_normaliser(cmask, algo.config.loss_agg)
    loss = jax.jit(lambda *args: finish_metrics(algo.policy_objective(*args)[1]))
    s1 = loss(params, state, data, normaliser)
    s2 = loss(params, state, noisy, normaliser)
    assert {"loss", "kl", "entropy"} <= set(s1) and float(s1["loss"]) != 0.0
    for name in s1:
        assert float(s1[name]) == float(s2[name]), name
    assert batch["token_rewards"].shape == (2, width)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"overlong_cache": 1}, "overlong_cache"),
        ({"reward": "correct+0.1*format"}, "reward"),
        ({"context_len": 40}, "context_len"),
        ({"max_new_tokens": 40}, "max_new_tokens"),
    ],
)
def test_bad_config_names_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        make(**overrides)


def test_feedback_longer_than_promised_is_an_error(algo):
    tok = algo.tokenizer
    rows = lmt.start_episodes(algo.task, tok, [GAME], repeat=1)
    with pytest.raises(ValueError, match=r"feedback of 8 tokens, more than the 3"):
        lmt.add_turn(algo.task, tok, rows, turn(tok, "4"), feedback_len=3)


# ---------------------------------------------------------------------- through the driver
@pytest.mark.slow
def test_multi_turn_run_resumes_exactly(tmp_path):
    """With an entropy bonus (so every update moves the parameters), a copy stopped
    after its first checkpoint and resumed ends with the uninterrupted run's parameters
    and metrics; re-scoring the rows in learn matches the sampler's log-probs."""
    options = dict(total_steps=16, ent_coef=0.01, lr=1e-3)  # 4 updates
    run = dict(checkpoint_every=8, keep_checkpoints=5, log_every=4)
    full_dir, stopped_dir = tmp_path / "full", tmp_path / "stopped"
    full = train(make(**options), RunConfig(run_dir=str(full_dir), progress=False, **run))
    shutil.copytree(full_dir, stopped_dir)  # as if stopped right after checkpoint 2
    shutil.rmtree(stopped_dir / "checkpoints" / "4")
    shutil.rmtree(stopped_dir / "model")
    (stopped_dir / "summary.json").unlink()
    resumed = train(
        make(**options), RunConfig(run_dir=str(stopped_dir), resume=True, progress=False, **run)
    )
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    timing = {"seconds", "steps_per_second", "sample_seconds", "learn_seconds"}
    timing |= {"sample_tokens_per_second", "tokens_per_second"}
    learned = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert learned(resumed.metrics) == learned(full.metrics)
    for row in full.metrics:  # the whole rows, re-scored in learn, match the sampler
        assert max(row["logp_gap"]) < 1e-5, row["logp_gap"]
        assert all(1 <= t <= 4 for t in row["turns_mean"])
    summary = json.loads((full_dir / "summary.json").read_text())
    for name in ("pass@1_after", "first_turn_pass@1_after", "return_mean_after"):
        assert 0.0 <= summary[name] <= 1.0, name


# ---------------------------------------------------------------------- learning
def _guess_grpo(warm_start, options: dict, updates: int):
    config = cfg.replace(
        grpo.default_config(),
        **options,
        model=str(warm_start),
        total_steps=updates * 128,  # 16 prompts x 8 episodes per update
        lr=1e-3,
    )
    result = train(grpo.make(config), RunConfig(seed=0, progress=False))
    print({k: round(v, 3) for k, v in result.summary.items() if k.endswith(("_before", "_after"))})
    return result


def feedback_use(rows: list[lmt.EpisodeRow], max_number: int) -> tuple[float, float]:
    """Of the guesses made after a "higher" or "lower", the fraction inside the interval
    that all the feedback so far allows, and the chance level: what uniform guesses
    would score in the same states."""
    inside, chance, count = 0, 0.0, 0
    for row in rows:
        low, high = 1, max_number
        for guess, feedback, following in zip(
            row.history[1::2], row.history[2::2], row.history[3::2], strict=False
        ):
            if "higher" in feedback:
                low = max(low, int(guess) + 1)
            else:
                high = min(high, int(guess) - 1)
            following = following.strip()
            inside += following.isdigit() and low <= int(following) <= high
            chance += (high - low + 1) / max_number
            count += 1
    return inside / count, chance / count


@pytest.mark.slow
def test_grpo_raises_held_out_wins(guess_warm_start, guess_options):
    """40 updates of multi-turn GRPO double the held-out win rate (0.20 -> 0.42), by
    replying with valid numbers (games last longer) and winning in later turns; at this
    budget the guesses do not yet follow the feedback (the `full` test below)."""
    summary = _guess_grpo(guess_warm_start, guess_options, updates=40).summary
    assert summary["pass@1_after"] - summary["pass@1_before"] >= 0.12, summary
    assert summary["later_turn_pass@1_after"] - summary["later_turn_pass@1_before"] >= 0.1
    assert summary["turns_mean_after"] - summary["turns_mean_before"] >= 0.3


@pytest.mark.full
def test_grpo_learns_to_use_the_feedback(guess_warm_start, guess_options):
    """300 updates: later guesses land inside the interval the higher/lower feedback
    allows far above chance (measured 0.67 against 0.39; the warm start 0.34 against
    0.56), and the held-out win rate passes 0.5, the most that never-repeating guesses
    that ignore the feedback can expect with 4 turns at 8 numbers."""
    result = _guess_grpo(guess_warm_start, guess_options, updates=300)
    algo, examples, key = result.algorithm, result.algorithm.task.eval_examples(), jax.random.key(1)
    before = feedback_use(algo.play(algo.load_params(), examples, key, 8), 8)
    trained = algo.merged_params(agent(result.state, 0))
    after = feedback_use(algo.play(trained, examples, key, 8), 8)
    print(f"inside the allowed interval (vs chance): before {before}, after {after}")
    assert after[0] - after[1] >= 0.15, (before, after)
    assert result.summary["pass@1_after"] >= 0.5, result.summary


def test_plain_grpo_refuses_a_multi_turn_task():
    """GRPO(config) on a multi-turn task would silently train on first turns only."""
    from jaxrl.algorithms.grpo import GRPOConfig
    from jaxrl.algorithms.grpo.train import GRPO
    from jaxrl.config import ConfigError

    with pytest.raises(ConfigError, match="invalid task='guess'.*multi-turn"):
        GRPO(GRPOConfig(task="guess").validate())


# ---------------------------------------------------------------------- GiGPO
def test_step_groups_join_turns_that_start_from_the_same_context(algo):
    """Two episodes of one game that guessed alike share their second turn's anchor
    state; a third that guessed otherwise starts its second turn elsewhere."""
    tok = algo.tokenizer
    rows = lmt.start_episodes(algo.task, tok, [GAME], repeat=3)
    lmt.add_turn(algo.task, tok, rows, turn(tok, "4", "4", "2"), algo.feedback_len)
    lmt.add_turn(algo.task, tok, rows, turn(tok, "7", "5", "7"), algo.feedback_len)
    steps = mt.step_groups(rows, 3, algo.max_new_tokens, algo.task.max_turns)
    assert steps["step_groups"][:, 0].tolist() == [0, 0, 0]  # the prompt: one state
    second = steps["step_groups"][:, 1]
    assert second[0] == second[1] != second[2]
    np.testing.assert_array_equal(steps["step_returns"][:, :2], [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_array_equal(steps["step_mask"][:, :3], [[1, 1, 0]] * 3)
    model = steps["turn_of_token"][0]
    assert model[:2].tolist() == [0, 0] and (model[2:10] == -1).all()  # then " higher:"
    assert model[10:12].tolist() == [1, 1] and (model[12:] == -1).all()


def test_gigpo_adds_step_advantages_and_is_refused_on_a_single_turn_task():
    with pytest.raises(ConfigError, match=r"invalid step_advantage_weight=1.0: must be 0 on"):
        grpo.make(cfg.replace(grpo.default_config(), step_advantage_weight=1.0))
    with pytest.raises(ConfigError, match=r"invalid step_advantage_weight=-1"):
        make(step_advantage_weight=-1.0)
    # One game, two episodes: one misses four times (return 0), one hits at once (1).
    # Their first turns share the prompt: a step group whose returns differ.
    weighted, plain = make(step_advantage_weight=1.0), make()
    tok = weighted.tokenizer
    rows = lmt.start_episodes(weighted.task, tok, [GAME, GAME], repeat=2)
    for guesses in (("4", "7", "4", "7"), ("5", "1", "5", "1"), ("6", "1", "6", "1")):
        lmt.add_turn(weighted.task, tok, rows, turn(tok, *guesses), weighted.feedback_len)
    lmt.add_turn(weighted.task, tok, rows, turn(tok, "8", "1", "8", "1"), weighted.feedback_len)
    batch = lmt.episode_batch(rows, weighted.prompt_len, weighted.max_new_tokens, tok.pad_id)
    steps = mt.step_groups(rows, 2, weighted.max_new_tokens, weighted.task.max_turns)
    state = weighted.init(jax.random.key(0), weighted.hyperparams())
    _, with_steps = jax.jit(weighted.learn)(state, {**batch, **steps})
    _, without = jax.jit(plain.learn)(state, batch)
    assert float(with_steps["grad_norm"]) != float(without["grad_norm"])
