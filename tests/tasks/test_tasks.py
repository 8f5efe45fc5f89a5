"""Tasks: seeded (prompt, answer) sources with a disjoint held-out split (jaxrl.tasks)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import BASE_ALPHABET, Example, exact_match, knobs, make_task, names


# ---------------------------------------------------------------------- registry
def test_unknown_task_lists_the_available_ones():
    with pytest.raises(
        ConfigError,
        match=r"task='nosuch'.*available: addition, addition_retry, addition_steps, countdown, "
        r"guess, jsonl:PATH, multiply, repeat, strings, tool_lookup, tool_multiply",
    ):
        make_task("nosuch")


def test_unknown_option_names_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"\['colour'\].*\['digits', 'num_eval', 'split_seed'\]"):
        make_task("addition", colour=3)
    with pytest.raises(ConfigError, match="digits"):  # jsonl has no digits knob
        make_task("jsonl:x.jsonl", digits=3)


def test_registry_names_and_knobs():
    assert names() == [
        "addition",
        "addition_retry",
        "addition_steps",
        "countdown",
        "guess",
        "jsonl",
        "multiply",
        "repeat",
        "strings",
        "tool_lookup",
        "tool_multiply",
    ]
    assert knobs("addition") == {"digits": 3, "num_eval": 256, "split_seed": 0}
    assert knobs("jsonl:any/path.jsonl") == {"num_eval": 256, "split_seed": 0}


def test_the_task_flags_help_names_every_task():
    """`--task`'s help is the LM configs' `task` docstring: it must not fall behind."""
    from jaxrl.algorithms.lm_common import LMConfig
    from jaxrl.config import field_docs

    doc = field_docs(LMConfig)["task"]
    assert all(name in doc for name in names()), doc


def test_exact_match_strips_whitespace_only():
    assert exact_match(" 579\n", "579")
    assert not exact_match("5790", "579")
    assert not exact_match("57 9", "579")


# ---------------------------------------------------------------------- addition
def test_addition_examples_are_correct_sums():
    task = make_task("addition", digits=3)
    examples = task.sample_train(np.random.default_rng(0), 500) + task.eval_examples()
    for prompt, answer in examples:
        a, b = re.fullmatch(r"(\d+)\+(\d+)=", prompt).groups()
        assert 100 <= int(a) <= 999 and 100 <= int(b) <= 999 and answer == str(int(a) + int(b))
    assert set("".join(p + a for p, a in examples)) <= set(task.alphabet)
    assert task.is_correct("1474", "1474") and not task.is_correct("1475", "1474")


def test_addition_held_out_prompts_never_appear_in_training():
    # 1-digit addition has 100 prompts; 40 held out. 5000 draws cover the other 60.
    task = make_task("addition", digits=1, num_eval=40, split_seed=3)
    held = {e.prompt for e in task.eval_examples()}
    trained = {e.prompt for e in task.sample_train(np.random.default_rng(1), 5000)}
    assert len(held) == 40
    assert not held & trained
    assert len(trained) == 60


def test_addition_split_is_fixed_by_split_seed_and_draws_by_the_rng():
    a, b = make_task("addition", split_seed=7), make_task("addition", split_seed=7)
    assert a.eval_examples() == b.eval_examples()
    assert a.eval_examples() != make_task("addition", split_seed=8).eval_examples()
    draw = lambda task, seed: task.sample_train(np.random.default_rng(seed), 16)  # noqa: E731
    assert draw(a, 0) == draw(b, 0) and draw(a, 0) != draw(a, 1)


def test_addition_longest_example_bounds_every_example():
    task = make_task("addition", digits=4)
    assert list(task.longest_examples()) == [Example("9999+9999=", "19998")]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"digits": 0}, "digits"),
        ({"digits": 10}, "digits"),
        ({"digits": 1, "num_eval": 51}, "num_eval"),
        ({"digits": 2, "num_eval": 4051}, "num_eval"),
    ],
)
def test_addition_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        make_task("addition", **options)


def test_addition_rejects_an_argument():
    with pytest.raises(ConfigError, match="addition takes no ':' argument"):
        make_task("addition:5")


# ---------------------------------------------------------------------- jsonl
def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_jsonl_split_is_disjoint_deterministic_and_keeps_repeated_prompts_together(tmp_path):
    records = [{"prompt": f"q{i}?", "answer": f"a{i}"} for i in range(50)]
    records += [{"prompt": "q7?", "answer": "other"}, {"prompt": "q8?", "answer": "more"}]
    path = write_jsonl(tmp_path / "data.jsonl", records)
    task = make_task(f"jsonl:{path}", num_eval=100, split_seed=1)
    held = task.eval_examples()
    held_prompts = {e.prompt for e in held}
    assert len(held_prompts) == 10  # a fifth of the 50 distinct prompts (num_eval caps above)
    assert make_task(f"jsonl:{path}", split_seed=1).eval_examples() == held
    assert make_task(f"jsonl:{path}", split_seed=2).eval_examples() != held
    train = task.sample_train(np.random.default_rng(0), 3000)
    assert not held_prompts & {e.prompt for e in train}
    assert len({e.prompt for e in train}) == 40
    for prompt in ("q7?", "q8?"):  # both answers of a repeated prompt are on one side
        assert sum(e.prompt == prompt for e in held) in (0, 2)
    assert len(task.longest_examples()) == 52
    assert set(task.alphabet) == set("q?a0123456789otherm")


def test_jsonl_num_eval_caps_the_held_out_prompts(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": str(i), "answer": "x"} for i in range(100)]
    )
    assert len(make_task(f"jsonl:{path}", num_eval=3).eval_examples()) == 3


def test_jsonl_skips_blank_lines_and_ignores_extra_keys(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"prompt": "a", "answer": "1", "id": 3}\n\n   \n{"prompt": "b", "answer": "2"}\n'
    )
    task = make_task(f"jsonl:{path}")
    assert sorted(task.longest_examples()) == [Example("a", "1"), Example("b", "2")]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"prompt": "a", "answer": "1"}', '{"prompt": "b", "answer": "2"', ""],
            r":2: not valid JSON",
        ),
        (['{"prompt": "a", "answer": "1"}', '["a", "1"]'], r":2: expected an object"),
        (['{"prompt": "a"}'], r":1: missing key 'answer'"),
        (['{"answer": "a"}'], r":1: missing key 'prompt'"),
        (
            ['{"prompt": "a", "answer": "1"}', "", '{"prompt": "b", "answer": 2}'],
            r":3: 'answer' must be a string, got int",
        ),
        (['{"prompt": null, "answer": "1"}'], r":1: 'prompt' must be a string, got NoneType"),
        (['{"prompt": "", "answer": "1"}'], r":1: 'prompt' must not be empty"),
        (["", "  "], r"the file has no examples"),
        (
            ['{"prompt": "a", "answer": "1"}', '{"prompt": "a", "answer": "2"}'],
            r"at least 2 distinct prompts",
        ),
    ],
)
def test_jsonl_malformed_input_names_the_file_and_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        make_task(f"jsonl:{path}")
    assert str(path) in str(err.value)  # every error names the file


def test_jsonl_missing_file_and_missing_path(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.jsonl': no such file"):
        make_task(f"jsonl:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(ConfigError, match="give the file as jsonl:PATH"):
        make_task("jsonl")


def test_base_alphabet_is_printable_ascii_and_newline():
    assert len(BASE_ALPHABET) == 96 and "\n" in BASE_ALPHABET and "\t" not in BASE_ALPHABET
