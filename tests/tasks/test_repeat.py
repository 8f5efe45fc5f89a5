"""The length-skewed repetition task (jaxrl/tasks/repeat.py): its generator and verifier."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import make_task
from jaxrl.tasks.repeat import LETTERS, MIN_LEN, answer_length


def _parse(prompt: str) -> tuple[int, str]:
    count, unit = re.fullmatch(r"(\d+)\*([a-j]{1,3})=", prompt).groups()
    return int(count), unit


def test_answers_repeat_the_unit_the_given_number_of_times():
    task = make_task("repeat")
    examples = task.sample_train(np.random.default_rng(0), 2000) + task.eval_examples()
    for prompt, answer in examples:
        count, unit = _parse(prompt)
        assert answer == unit * count and 1 <= len(answer) <= 255
    assert set("".join(p + a for p, a in examples)) <= set(task.alphabet)
    assert set(LETTERS) <= set(task.alphabet)


def test_lengths_are_skewed_short_with_a_long_tail():
    """Log-uniform on [4, 255]: median near the geometric mean 32, long answers rare
    but present, none past the maximum."""
    task = make_task("repeat")
    lengths = np.array([len(e.answer) for e in task.sample_train(np.random.default_rng(1), 20_000)])
    assert 27 <= np.median(lengths) <= 35, np.median(lengths)
    assert lengths.max() <= 255 and (lengths >= 200).mean() > 0.01
    assert (lengths <= 64).mean() > 0.6  # most answers are short
    assert np.mean(lengths) > 1.3 * np.median(lengths)  # skewed: the tail pulls the mean up


def test_answer_length_is_log_uniform_within_bounds():
    rng = np.random.default_rng(2)
    drawn = np.array([answer_length(rng, 64) for _ in range(20_000)])
    assert drawn.min() == MIN_LEN and drawn.max() == 64
    # log-uniform: each doubling of the length holds the same share (4-7, 8-15, 16-31, 32-64)
    shares = [np.mean((drawn >= lo) & (drawn < 2 * lo)) for lo in (4, 8, 16, 32)]
    np.testing.assert_allclose(shares, 0.25, atol=0.02)
    assert {answer_length(rng, 2) for _ in range(200)} == {2}  # a maximum below MIN_LEN


def test_the_maximum_comes_from_the_argument_and_bounds_the_longest_example():
    task = make_task("repeat:16", num_eval=20)
    lengths = [len(e.answer) for e in task.sample_train(np.random.default_rng(3), 2000)]
    assert max(lengths) == 16
    (longest,) = task.longest_examples()
    assert len(longest.answer) == 16
    assert all(
        len(e.prompt) <= len(longest.prompt)
        for e in task.sample_train(np.random.default_rng(4), 2000)
    )


def test_held_out_prompts_are_distinct_and_never_drawn_for_training():
    task = make_task("repeat:16", num_eval=100, split_seed=5)
    held = [e.prompt for e in task.eval_examples()]
    assert len(held) == len(set(held)) == 100
    assert held == [
        e.prompt for e in make_task("repeat:16", num_eval=100, split_seed=5).eval_examples()
    ]
    trained = {e.prompt for e in task.sample_train(np.random.default_rng(6), 5000)}
    assert not trained & set(held)


def test_draws_are_a_function_of_the_generator():
    task = make_task("repeat")
    a = task.sample_train(np.random.default_rng(7), 50)
    assert a == task.sample_train(np.random.default_rng(7), 50)
    assert a != task.sample_train(np.random.default_rng(8), 50)


def test_verifier_is_exact_match():
    task = make_task("repeat")
    assert task.is_correct(" ababab\n", "ababab")
    assert not task.is_correct("abababab", "ababab")
    assert not task.is_correct("abab", "ababab")


@pytest.mark.parametrize(
    ("spec", "knobs", "match"),
    [
        ("repeat:x", {}, r"task='repeat:x'.*maximum answer length"),
        ("repeat:0", {}, r"task='repeat:0'.*\[1, 4096\]"),
        ("repeat:2", {}, "num_eval=256"),
        ("repeat", {"num_eval": 0}, "num_eval=0"),
    ],
)
def test_bad_input_names_the_field(spec, knobs, match):
    with pytest.raises(ConfigError, match=match):
        make_task(spec, **knobs)
