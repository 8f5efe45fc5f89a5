"""String-function composition (jaxrl.tasks.strings): the library, the exact prompt
format, and held-out compositions never seen in training."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import Example, knobs, make_task
from jaxrl.tasks.strings import FUNCTIONS, PAIRS, apply

PROMPT = re.compile(r"((?:[a-z]+\()+)([a-z]+)\)+=")


def calls(prompt: str) -> tuple[tuple[str, ...], str]:
    names, word = PROMPT.fullmatch(prompt).groups()
    return tuple(names.rstrip("(").split("(")), word


@pytest.mark.parametrize(
    ("name", "out"),
    [
        ("reverse", "olleh"),
        ("swapcase", "HELLO"),
        ("sort", "ehllo"),
        ("rotate", "elloh"),
        ("double", "hellohello"),
        ("mirror", "helloolleh"),
        ("devowel", "hll"),
        ("unique", "helo"),
        ("shift", "ifmmp"),
        ("evens", "hlo"),
    ],
)
def test_each_function_on_hello(name, out):
    assert FUNCTIONS[name]("hello") == out


def test_compositions_apply_the_inner_function_first():
    assert apply(("reverse", "sort"), "hello") == "ollhe"
    assert apply(("sort", "swapcase"), "zZa") == "AZz"  # code-point order: capitals first
    assert apply(("shift", "swapcase"), "zyx") == "AZY"
    assert apply(("evens", "devowel"), "aeiou") == ""


def test_prompt_format_and_answers():
    assert knobs("strings") == {
        "depth": 1, "word_len": 8, "held_out_pairs": 20, "num_eval": 256, "split_seed": 0,
    }  # fmt: skip
    for depth in (1, 2):
        task = make_task("strings", depth=depth, word_len=6)
        examples = task.sample_train(np.random.default_rng(0), 500) + task.eval_examples()
        for prompt, answer in examples:
            names, word = calls(prompt)
            assert len(names) == depth and 3 <= len(word) <= 6
            assert answer == apply(names, word) and task.is_correct(f" {answer}\n", answer)
        assert set("".join(p + a for p, a in examples)) <= set(task.alphabet)
    assert make_task("strings").sample_train(np.random.default_rng(3), 1)[0].prompt.count("(") == 1


def test_held_out_pairs_never_appear_in_training_and_agree_across_depths():
    task = make_task("strings", depth=2, held_out_pairs=30, num_eval=200, split_seed=2)
    held = {calls(e.prompt)[0] for e in task.eval_examples()}
    trained = {calls(e.prompt)[0] for e in task.sample_train(np.random.default_rng(0), 4000)}
    assert held == set(task.held_out_pairs) and len(held) == 30
    assert not held & trained and len(trained) == len(PAIRS) - 30
    same = make_task("strings", depth=1, held_out_pairs=30, split_seed=2)
    assert same.held_out_pairs == task.held_out_pairs


def test_without_held_out_pairs_held_out_prompts_are_disjoint():
    # depth 1 with 1-letter words: 260 prompts, 100 held out.
    task = make_task("strings", depth=1, word_len=1, num_eval=100, split_seed=1)
    held = {e.prompt for e in task.eval_examples()}
    trained = {e.prompt for e in task.sample_train(np.random.default_rng(0), 5000)}
    assert len(held) == 100 and not held & trained and len(trained) == 160


def test_deterministic_for_a_seed_and_split_seed():
    a, b = make_task("strings", depth=2), make_task("strings", depth=2)
    assert a.eval_examples() == b.eval_examples()
    assert a.eval_examples() != make_task("strings", depth=2, split_seed=1).eval_examples()
    draw = lambda task, seed: task.sample_train(np.random.default_rng(seed), 16)  # noqa: E731
    assert draw(a, 0) == draw(b, 0) and draw(a, 0) != draw(a, 1)


def test_longest_example_bounds_every_example():
    task = make_task("strings", depth=2, word_len=5)
    (longest,) = task.longest_examples()
    assert longest == Example("swapcase(swapcase(aaaaa))=", "a" * 20)
    examples = task.sample_train(np.random.default_rng(0), 3000) + task.eval_examples()
    assert max(len(e.prompt) for e in examples) <= len(longest.prompt)
    assert max(len(e.answer) for e in examples) == len(longest.answer)  # double(mirror(x))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"depth": 3}, "depth"),
        ({"word_len": 0}, "word_len"),
        ({"word_len": 33}, "word_len"),
        ({"held_out_pairs": 51}, "held_out_pairs"),
        ({"word_len": 1, "num_eval": 131}, "num_eval"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        make_task("strings", **options)
