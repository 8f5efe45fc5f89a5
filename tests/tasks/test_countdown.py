"""Countdown (jaxrl.tasks.countdown): solvable prompts, a disjoint held-out split, and a
safe checker (ast walk, exact fractions, every number exactly once)."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import knobs, make_task, names
from jaxrl.tasks.countdown import MAX_EXPRESSION_CHARS, solves


def numbers_and_target(prompt: str) -> tuple[list[int], int]:
    head, target = re.fullmatch(r"([\d ]+) => (\d+):", prompt).groups()
    return [int(n) for n in head.split()], int(target)


def test_registered_with_its_knobs():
    assert {"countdown", "strings"} <= set(names())
    assert knobs("countdown") == {
        "numbers": 3,
        "max_number": 25,
        "max_target": 999,
        "num_eval": 256,
        "split_seed": 0,
    }


def test_every_reference_answer_solves_its_prompt():
    task = make_task("countdown", numbers=4, max_number=30)
    examples = task.sample_train(np.random.default_rng(0), 1000) + task.eval_examples()
    for prompt, answer in examples:
        numbers, target = numbers_and_target(prompt)
        assert len(numbers) == 4 and all(1 <= n <= 30 for n in numbers)
        assert numbers == sorted(numbers) and 1 <= target <= 999
        assert Counter(int(n) for n in re.findall(r"\d+", answer)) == Counter(numbers)
        assert task.is_correct(answer, answer) and solves(answer, numbers, target)
    assert set("".join(p + a for p, a in examples)) <= set(task.alphabet)
    assert len({a for _, a in examples}) > 500  # varied expressions, not just sums


@pytest.mark.parametrize(
    ("completion", "correct"),
    [
        ("7*8/2", True),
        (" (8*7)/2 \n", True),
        ("8/2*7", True),
        ("7/2*8", True),  # 3.5 * 8: intermediate fractions are fine, the value counts
        ("7*8", False),  # 2 unused
        ("7*8/2/2*2", False),  # 2 reused
        ("7*8/2+0", False),  # 0 is not given
        ("-2+7*8-26", False),  # unary minus and a foreign number
        ("2**7", False),
        ("7*8//2", False),
        ("__import__('os').system('true')", False),
        ("(7).__mul__(8)/2", False),
        ("7.0*8/2", False),
        ("7*8/2=28", False),
        ("7*8/(2-2)", False),
        ("(" * 300 + "7*8/2" + ")" * 300, False),  # too long: not parsed
        ("", False),
    ],
)
def test_is_correct_parses_safely(completion, correct):
    task = make_task("countdown")
    assert task.is_correct(completion, "7*8/2") is correct  # 2 7 8 => 28


def test_division_by_zero_and_huge_values_are_wrong_not_errors():
    assert not solves("5/(3-3)", [5, 3, 3], 1)
    assert not solves("9" * 5000, [9], 9)  # past int's string limit: not an expression
    assert len("(" * 300) > MAX_EXPRESSION_CHARS


def test_held_out_number_sets_never_appear_in_training():
    # 2 numbers in [1, 6]: 21 multisets, 10 held out.
    task = make_task("countdown", numbers=2, max_number=6, max_target=12, num_eval=10)
    held = {tuple(numbers_and_target(e.prompt)[0]) for e in task.eval_examples()}
    train = task.sample_train(np.random.default_rng(1), 3000)
    trained = {tuple(numbers_and_target(e.prompt)[0]) for e in train}
    assert len(held) == 10 and not held & trained and len(trained) == 11


def test_deterministic_for_a_seed_and_split_seed():
    a, b = make_task("countdown", split_seed=4), make_task("countdown", split_seed=4)
    assert a.eval_examples() == b.eval_examples()
    assert a.eval_examples() != make_task("countdown", split_seed=5).eval_examples()
    draw = lambda task, seed: task.sample_train(np.random.default_rng(seed), 32)  # noqa: E731
    assert draw(a, 0) == draw(b, 0) and draw(a, 0) != draw(a, 1)


def test_difficulty_knobs_change_count_and_range():
    for count, top in ((2, 5), (5, 99)):
        task = make_task("countdown", numbers=count, max_number=top, num_eval=2)
        seen = [
            numbers_and_target(e.prompt)[0]
            for e in task.sample_train(np.random.default_rng(0), 300)
        ]
        assert {len(s) for s in seen} == {count}
        assert max(max(s) for s in seen) == top and min(min(s) for s in seen) == 1


def test_longest_example_bounds_every_example():
    task = make_task("countdown", numbers=4, max_number=99, max_target=9999)
    (longest,) = task.longest_examples()
    assert longest.prompt == "99 99 99 99 => 9999:" and longest.answer == "((99*99)*99)*99"
    examples = task.sample_train(np.random.default_rng(0), 500) + task.eval_examples()
    assert max(len(e.prompt) for e in examples) <= len(longest.prompt)
    assert max(len(e.answer) for e in examples) <= len(longest.answer)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"numbers": 1}, "numbers"),
        ({"numbers": 7}, "numbers"),
        ({"max_number": 1}, "max_number"),
        ({"max_target": 74}, "max_target"),  # below 3 * 25
        ({"numbers": 2, "max_number": 3, "max_target": 6, "num_eval": 4}, "num_eval"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        make_task("countdown", **options)
    with pytest.raises(ConfigError, match="countdown takes no ':' argument"):
        make_task("countdown:3")
