"""Tool use as a multi-turn task (issue 33): a call ends the model's turn where it ends,
the tool's result is the feedback, the answer ends the episode; the `multiply` task
behind `tool_multiply`; and multi-turn GRPO playing it, with the turn cut in its rows."""

from __future__ import annotations

import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import grpo
from jaxrl.algorithms import lm_multiturn as lmt
from jaxrl.algorithms.grpo import multiturn as mt
from jaxrl.config import ConfigError
from jaxrl.tasks import Example, make_task
from jaxrl.tasks.multiturn import play
from jaxrl.tasks.tool_use import ToolUse
from jaxrl.tools import Tool, calculator

EXAMPLE = Example("1234*567=", "699678")


@pytest.fixture(scope="module")
def task():
    return make_task("tool_multiply", digits=4, num_eval=8)


def scripted(*replies: str):
    """A policy that says `replies` in order."""
    queue = list(replies)
    return lambda context: queue.pop(0)


def test_a_call_is_cut_where_it_ends_and_its_result_comes_back(task):
    episode = play(task, EXAMPLE, scripted('<<calculator("1234*567")>> and more', "699678"))
    assert episode.history == [
        "1234*567=",
        '<<calculator("1234*567")>>',  # what followed the call is dropped
        "=699678\n",
        "699678",
    ]
    assert episode.rewards == [0.0, 1.0]
    # The same episode as one text, for SFT on tool use.
    demo = task.demonstration(EXAMPLE, 'calculator("1234*567")', "699678")
    assert demo == "".join(episode.history[1:])


@pytest.mark.parametrize(
    "reply",
    [
        '<<calculator("1234*567")',  # not closed
        "<<" + "z" * 300 + "()>>",  # an unknown tool with a long name
        '<<calculator("' + "9" * 300 + '")>>',  # arguments the tool refuses, quoted back
    ],
)
def test_every_feedback_fits_the_longest_feedback_the_task_promised(task, reply):
    """The multi-turn collect sizes a turn's feedback from `longest_feedback`: errors about
    the model's own text count too (they once overflowed it and stopped the trainer)."""
    feedback = task.step(EXAMPLE, [EXAMPLE.prompt], reply).feedback
    assert feedback.startswith("=error") or feedback.startswith("=")
    assert len(feedback) <= max(len(f) for f in task.longest_feedback())


def test_answering_without_a_call_is_scored_at_once(task):
    assert play(task, EXAMPLE, scripted("699678")).rewards == [1.0]
    assert play(task, EXAMPLE, scripted("699677")).rewards == [0.0]


def test_bad_calls_are_answered_with_an_error_and_the_penalty():
    tools = [Tool.from_function(calculator)]
    inner = make_task("multiply", digits=2, num_eval=4)
    strict = ToolUse(inner, tools, max_calls=2, malformed_penalty=0.5)
    episode = play(strict, EXAMPLE, scripted("<<calculator(1234*567)>>", "<<nope()>>", "1"))
    assert episode.history[2] == "=error: arguments must be literals (numbers, strings, lists)\n"
    assert episode.history[4] == "=error: unknown tool 'nope'; available: ['calculator']\n"
    assert episode.rewards == [-0.5, -0.5, 0.0]


def test_calls_are_capped_the_turn_after_the_last_one_ends_the_episode(task):
    call = '<<calculator("1+1")>>'
    episode = play(task, EXAMPLE, scripted(call, call, "x"))
    assert len(episode.rewards) == task.max_turns == 2  # max_calls=1, then the answer turn
    assert episode.history[-1] == call  # cut, and the cap ended the episode
    twice = ToolUse(task.task, task.tools, max_calls=2)
    assert len(play(twice, EXAMPLE, scripted(call, call, "x")).rewards) == 3


def test_bad_tool_options_name_the_field():
    inner = make_task("multiply", digits=2, num_eval=4)
    with pytest.raises(ConfigError, match="invalid max_calls=0"):
        ToolUse(inner, [Tool.from_function(calculator)], max_calls=0)
    with pytest.raises(ConfigError, match="invalid tool_format='xml'"):
        ToolUse(inner, [Tool.from_function(calculator)], format="xml")
    with pytest.raises(ConfigError, match="invalid max_concurrent_calls=0"):
        ToolUse(inner, [Tool.from_function(calculator)], max_concurrent_calls=0)


REPLIES = [
    '<<calculator("1234*567")>>',
    "699678",
    '<<calculator("1+1")>> and more',
    "<<nope()>>",
    '<<calculator("1234*567")',  # not closed
    "5",
    '<<calculator("1/0")>>',
    '<<calculator("99*9")>>',
]


def test_a_turn_of_many_episodes_is_what_each_episode_gets_alone(task):
    """`steps` and `turns` (one turn of many episodes, their calls run together, as
    multi-turn GRPO asks) give what `step` and `turn` give episode by episode, in order."""
    requests = [(EXAMPLE, [EXAMPLE.prompt], reply) for reply in REPLIES]
    together = task.steps(requests)
    assert together == [task.step(*request) for request in requests]
    assert [turn.feedback for turn in together[:4]] == [
        "=699678\n",
        None,
        "=2\n",
        "=error: unknown tool 'nope'; available: ['calculator']\n",
    ]
    capped = [(EXAMPLE, [EXAMPLE.prompt, "x", "=1\n"], reply) for reply in REPLIES]
    assert task.turns(capped) == [task.turn(*request) for request in capped]
    assert all(turn.feedback is None for turn in task.turns(capped))  # the second turn ends it


def test_multiply_examples_are_products_with_a_disjoint_held_out_split():
    task = make_task("multiply", digits=4, num_eval=64)
    train = task.sample_train(np.random.default_rng(0), 256)
    for example in train + task.eval_examples():
        a, b = example.prompt.rstrip("=").split("*")
        assert len(a) == 4 and len(b) == 3 and int(a) * int(b) == int(example.answer)
    held = {e.prompt for e in task.eval_examples()}
    assert len(held) == 64 and not held & {e.prompt for e in train}
    assert task.longest_examples()[0] == Example("9999*999=", str(9999 * 999))


# ---------------------------------------------------------------------- in multi-turn GRPO
TINY = dict(
    task="tool_multiply",
    digits=2,
    num_eval=4,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    num_prompts=2,
    group_size=2,
    total_steps=4,
    eval_batch_size=8,
    eval_samples=2,
)


def test_multi_turn_grpo_keeps_only_the_tokens_up_to_the_call():
    algo = grpo.make(cfg.replace(grpo.default_config(), **TINY))
    assert isinstance(algo, mt.MultiTurnGRPO) and algo.max_rounds == 2
    # Decoding stops where a call ends (jaxrl.lm.generate's stop_sequences).
    assert algo.turn_stops == [algo.tokenizer.encode(">>")]
    assert algo.turn_tokens == len('<<calculator("99*9")>>') + 1  # the call and eos
    tok = algo.tokenizer
    rows = lmt.start_episodes(algo.task, tok, [Example("12*3=", "36")], repeat=1)
    reply = '<<calculator("12*3")>>zz'
    ids = [*tok.encode(reply), tok.eos_id]
    turn = {
        "tokens": np.asarray([ids], np.int32),
        "completion_mask": np.ones((1, len(ids)), bool),
        "finished": np.ones(1, bool),
        "sampler_logp": np.linspace(-1, -0.1, len(ids), dtype=np.float32)[None],
    }
    lmt.add_turn(algo.task, tok, rows, turn, algo.feedback_len)
    (row,) = rows
    kept = len('<<calculator("12*3")>>')
    call_ids = tok.encode(reply[:kept])
    assert row.tokens[row.prompt_len :] == call_ids + tok.encode("=36\n")
    assert row.model[row.prompt_len :] == [True] * kept + [False] * 4
    np.testing.assert_array_equal(
        row.sampler_logp[row.prompt_len : row.prompt_len + kept], turn["sampler_logp"][0, :kept]
    )
    assert row.history == ["12*3=", reply[:kept], "=36\n"]


def _turn(tokenizer, replies: list[str]) -> dict[str, np.ndarray]:
    """A sampled turn of `replies` (each through eos), right-padded, as `generate` gives."""
    ids = [[*tokenizer.encode(reply), tokenizer.eos_id] for reply in replies]
    width = max(len(row) for row in ids)
    tokens = np.zeros((len(ids), width), np.int32)
    mask = np.zeros((len(ids), width), bool)
    for i, row in enumerate(ids):
        tokens[i, : len(row)], mask[i, : len(row)] = row, True
    logp = -np.arange(1, width + 1, dtype=np.float32)[None].repeat(len(ids), 0) / width
    return {
        "tokens": tokens,
        "completion_mask": mask,
        "finished": np.ones(len(ids), bool),
        "sampler_logp": logp,
    }


def test_every_agents_turn_at_once_makes_the_rows_of_one_agent_at_a_time():
    """`add_turns` (every agent's rows, one batch of calls) records what `add_turn`
    agent after agent records: the same rows, the same kept counts, ended rows left."""
    import copy

    algo = grpo.make(cfg.replace(grpo.default_config(), **TINY))
    tok = algo.tokenizer
    examples = [Example("12*3=", "36"), Example("40*5=", "200")]
    agents = [lmt.start_episodes(algo.task, tok, examples, repeat=2) for _ in range(2)]
    agents[1][2].done = True  # an episode that has ended: untouched, 0 tokens kept
    turns = [
        _turn(tok, ['<<calculator("12*3")>>zz', "36", "<<nope()>>", '<<calculator("40*5")>>']),
        _turn(tok, ["7", '<<calculator("12*3")', "x", '<<calculator("4*5")>>']),
    ]
    alone = copy.deepcopy(agents)
    kept = lmt.add_turns(algo.task, tok, agents, turns, algo.feedback_len)
    expected = [
        lmt.add_turn(algo.task, tok, rows, turn, algo.feedback_len)
        for rows, turn in zip(alone, turns, strict=True)
    ]
    assert kept == expected and agents == alone
    assert kept[0][0] == len('<<calculator("12*3")>>') and kept[1][2] == 0
    assert agents[0][0].history[-1] == "=36\n" and agents[1][3].history[-1] == "=20\n"


def test_multi_turn_grpo_trains_on_the_tool_task(tmp_path):
    result = jaxrl_train(tmp_path)
    assert result.summary["samples_per_agent"] == 4
    assert 0.0 <= result.summary["pass@1_after"] <= 1.0


def jaxrl_train(tmp_path):
    import jaxrl

    return jaxrl.train("grpo", **TINY, run_dir=str(tmp_path / "run"), progress=False)


# ---------------------------------------------------------------------- lookup
def test_lookup_answers_only_through_the_search_tool():
    """`tool_lookup`: a made-up name's code is in one document; searching for the name
    returns it, the answer copies it; held-out names are never asked in training."""
    lookup = make_task("tool_lookup", num_eval=32)
    task = lookup.task
    example = task.eval_examples()[0]
    name = example.prompt.removeprefix("code ").removesuffix("=")
    episode = play(lookup, example, scripted(f'<<search("{name}")>>', example.answer))
    assert episode.history[2] == f"={name}:{example.answer}\n"
    assert episode.rewards == [0.0, 1.0]
    held = {e.prompt for e in task.eval_examples()}
    trained = {e.prompt for e in task.sample_train(np.random.default_rng(0), 2000)}
    assert len(held) == 32 and not held & trained
    assert len(set(task.names)) == len(task.names) == 2000
    assert make_task("tool_lookup", num_eval=32).task.codes == task.codes  # seeded


def test_multi_turn_grpo_sizes_a_lookup_turn_for_the_longest_call():
    config = {**TINY, "task": "tool_lookup", "num_eval": 4}
    config.pop("digits")
    algo = grpo.make(cfg.replace(grpo.default_config(), **config))
    longest = max(algo.task.task.names, key=len)
    assert algo.turn_tokens == len(f'<<search("{longest}")>>') + 1


# ---------------------------------------------------------------------- demonstrations
@pytest.mark.parametrize("name", ["tool_multiply", "tool_lookup"])
def test_demonstrations_are_whole_episodes_as_single_turn_pairs(name):
    """`TASK:demos` is SFT's warm start for RL with the tool: each answer is an episode
    (the call, its feedback, the answer), replayed exactly by the tool task; one alphabet."""
    from jaxrl.tasks import is_multi_turn

    tool_task = make_task(name, num_eval=8)
    demos = make_task(f"{name}:demos", num_eval=8)
    assert is_multi_turn(name) and not is_multi_turn(f"{name}:demos")
    assert demos.alphabet == tool_task.alphabet
    for demo, example in zip(demos.eval_examples(), tool_task.eval_examples(), strict=True):
        call = demo.answer[: demo.answer.index(">>") + 2]
        episode = play(tool_task, example, scripted(call, example.answer))
        assert "".join(episode.history[1:]) == demo.answer
        assert episode.rewards[-1] == 1.0
    with pytest.raises(ConfigError, match=rf"invalid task='{name}:x': the only argument"):
        make_task(f"{name}:x")


def test_sft_warm_starts_on_demonstrations_and_grpo_continues_with_the_tool(tmp_path):
    import jaxrl

    model = {k: v for k, v in TINY.items() if k in ("num_layers", "hidden_size", "num_heads")}
    model |= {"num_kv_heads": 2, "mlp_size": 64, "digits": 2, "num_eval": 4}
    sft = jaxrl.train(
        "sft", task="tool_multiply:demos", batch_size=4, total_steps=8, warmup=0.0,
        eval_batch_size=4, stop_at_train_accuracy=None, run_dir=str(tmp_path / "sft"),
        progress=False, **model,
    )  # fmt: skip
    assert 0.0 <= sft.summary["eval_accuracy"] <= 1.0
    rl = {k: v for k, v in TINY.items() if k not in model and k != "task"}
    result = jaxrl.train(
        "grpo", task="tool_multiply", model=str(tmp_path / "sft" / "model"), progress=False,
        **{k: v for k, v in rl.items() if k not in ("num_layers", "hidden_size", "num_heads")},
        digits=2, num_eval=4,
    )  # fmt: skip
    assert "pass@1_before" in result.summary and "pass@1_after" in result.summary
