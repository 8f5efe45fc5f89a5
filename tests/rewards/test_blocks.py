"""Reward blocks (jaxrl.rewards.blocks): hand-checked values, composition, the name
registry, and failures that score 0 and are counted and logged once."""

from __future__ import annotations

import logging
import math
from fractions import Fraction

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.rewards import (
    compose,
    exact_match,
    final_number,
    final_number_reward,
    format_reward,
    length_penalty,
    make_reward,
    python_reward,
    score,
    task_reward,
)
from jaxrl.tasks import Example, make_task

EX = Example("q", "1,234")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The answer is 42.", Fraction(42)),
        ("3 apples, then 1,234 pears", Fraction(1234)),
        ("costs $1,000.50 total", Fraction(2001, 2)),
        ("so x = -7", Fraction(-7)),
        ("first 5, \\boxed{12} then 99", Fraction(12)),
        ("\\boxed{\\frac{1}{2}} no: \\boxed{0.25}", Fraction(1, 4)),
        ("\\boxed{x^{2}} = 9", Fraction(2)),  # nested braces stay inside the box
        ("#### 72", Fraction(72)),
        ("no number here", None),
        ("1" * 65, None),  # absurdly long: no answer
    ],
)
def test_final_number(text, value):
    assert final_number(text) == value


def test_exact_match_final_number_and_format_blocks():
    assert exact_match()(" 1,234\n", EX) == 1.0 and exact_match()("1234", EX) == 0.0
    block = final_number_reward()
    assert block("so it is 1234.", EX) == 1.0
    assert block("\\boxed{1234.0}", EX) == 1.0
    assert block("1234 or \\boxed{1235}", EX) == 0.0
    fmt = format_reward()
    assert fmt(" <answer>4\n2</answer>\n", EX) == 1.0
    assert fmt("so <answer>42</answer>", EX) == 0.0  # the whole completion must match
    assert format_reward(r"\d+")("42", EX) == 1.0


def test_length_penalty_is_dapo_soft_overlong():
    block = length_penalty(max_chars=10, buffer=4)  # free up to 6 characters
    values = [block("x" * n, EX) for n in (0, 6, 7, 8, 10, 11, 100)]
    assert values == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]


def test_task_reward_uses_the_tasks_check():
    task = make_task("countdown")
    example = Example("2 7 8 => 28:", "7*8/2")
    assert task_reward(task)("8*7/2", example) == 1.0
    assert task_reward(task)("8*7", example) == 0.0


def test_compose_sums_weighted_blocks_and_score_reports_components():
    reward = compose([(1.0, exact_match()), (0.5, format_reward(r"\d+"))])
    examples = [Example("a", "42"), Example("b", "7")]
    scores = score(reward, ["42", "8"], examples)
    np.testing.assert_allclose(scores.rewards, [1.5, 0.5])
    np.testing.assert_allclose(scores.components["exact_match"], [1.0, 0.0])
    np.testing.assert_allclose(scores.components["format"], [1.0, 1.0])
    assert scores.failures == {} and reward.name == "1*exact_match+0.5*format"


def test_failing_blocks_score_zero_are_counted_and_warned_once(caplog):
    def flaky(completion, example):
        if completion == "boom":
            raise KeyError("x")
        return math.nan if completion == "nan" else 2.0

    reward = compose([(1.0, python_reward(flaky, "flaky_test_block")), (1.0, exact_match())])
    completions = ["boom", "nan", "boom", "ok", "inf"]
    examples = [Example("p", "ok")] * 5
    with caplog.at_level(logging.WARNING, logger="jaxrl.rewards.blocks"):
        scores = score(reward, completions, examples)
    np.testing.assert_allclose(scores.rewards, [0.0, 0.0, 0.0, 3.0, 2.0])
    assert scores.failures == {"flaky_test_block: KeyError": 2, "flaky_test_block: non-finite": 1}
    warnings = [r.getMessage() for r in caplog.records if "flaky_test_block" in r.getMessage()]
    assert len(warnings) == 2  # one per kind, not one per failure


def test_final_number_without_a_reference_number_is_a_counted_failure():
    scores = score(final_number_reward(), ["42"], [Example("p", "forty-two")])
    assert scores.rewards.tolist() == [0.0]
    assert scores.failures == {"final_number: ValueError": 1}


def test_make_reward_parses_weighted_terms():
    task = make_task("addition")
    reward = make_reward("correct + 0.1*format + 0.5*length:10:4", task)
    assert [(w, b.name) for w, b in reward.terms] == [
        (1.0, "correct"),
        (0.1, "format"),
        (0.5, "length"),
    ]
    value = reward("<answer>5</answer>", Example("2+3=", "<answer>5</answer>"))
    assert value == pytest.approx(1.0 + 0.1 - 0.5 * 1.0)  # 18 characters: fully overlong
    assert make_reward("-0.5*format").terms[0][0] == -0.5
    assert make_reward("python:math:isfinite").terms[0][1].name == "isfinite"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("corect", r"invalid reward='corect': unknown block 'corect'; allowed: code .*correct"),
        ("correct", r"needs a task"),
        ("x*correct", r"weight 'x' is not a number"),
        ("length:abc", r"expected length:MAX\[:BUFFER\]"),
        ("python:nomodule_xyz:f", r"invalid reward='python:nomodule_xyz:f'"),
        ("exact_match+exact_match", r"block names must be unique"),
        ("", r"must be a string"),
    ],
)
def test_bad_reward_specs_name_the_field(spec, message):
    with pytest.raises(ConfigError, match=message):
        make_reward(spec)


def test_bad_block_options_name_the_field():
    with pytest.raises(ConfigError, match="invalid pattern="):
        format_reward("(")
    with pytest.raises(ConfigError, match="invalid buffer="):
        length_penalty(10, 11)
    with pytest.raises(ConfigError, match="invalid reward weight="):
        compose([(math.inf, exact_match())])
