"""Multi-turn tasks (jaxrl/tasks/multiturn.py, guess.py): the turn protocol, by hand.

Scripted policies play `addition_retry` and `guess`; the feedback texts, turn rewards
and where episodes end are checked against hand-computed values.
"""

from __future__ import annotations

import collections
import pathlib
import re
from collections.abc import Sequence

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import Example, is_multi_turn, knobs, make_task
from jaxrl.tasks.addition import Addition
from jaxrl.tasks.guess import Guess
from jaxrl.tasks.multiturn import Episode, MultiTurnTask, Retry, Turn, play


def scripted(*replies: str):
    """A policy that says `replies` in order, recording the texts it was shown."""
    seen: list[str] = []
    queue = list(replies)

    def policy(text: str) -> str:
        seen.append(text)
        return queue.pop(0)

    policy.seen = seen  # type: ignore[attr-defined]
    return policy


# ---------------------------------------------------------------------- addition_retry
def test_retry_wrong_then_right_earns_the_discounted_reward():
    task = make_task("addition_retry", digits=2, num_eval=4)
    example = Example("12+34=", "46")
    policy = scripted("47", "46")
    episode = play(task, example, policy)
    assert episode.history == ["12+34=", "47", " wrong, try again\n12+34=", "46"]
    assert episode.rewards == [0.0, 0.5] and episode.total_reward == 0.5
    assert episode.replies == ["47", "46"]
    assert policy.seen == ["12+34=", "12+34=47 wrong, try again\n12+34="]


def test_retry_right_at_once_ends_with_reward_one():
    task = make_task("addition_retry", digits=2, num_eval=4)
    assert play(task, Example("12+34=", "46"), scripted(" 46 ")) == Episode(
        ["12+34=", " 46 "], [1.0]
    )


def test_retry_ends_after_its_last_attempt():
    task = make_task("addition_retry", digits=2, num_eval=4)
    episode = play(task, Example("12+34=", "46"), scripted("1", "2"))
    assert episode.rewards == [0.0, 0.0]
    assert episode.history == ["12+34=", "1", " wrong, try again\n12+34=", "2"]
    # step alone would answer the second miss; turn applies the cap of 2 attempts.
    assert task.step(Example("12+34=", "46"), episode.history[:3], "2").feedback is not None
    assert task.turn(Example("12+34=", "46"), episode.history[:3], "2") == Turn(None, 0.0)


def test_retry_is_the_inner_task_with_turns():
    task = make_task("addition_retry", digits=2, num_eval=4, split_seed=3)
    inner = Addition(digits=2, num_eval=4, split_seed=3)
    assert isinstance(task, MultiTurnTask) and task.max_turns == 2
    assert task.eval_examples() == inner.eval_examples()
    rng_a, rng_b = np.random.default_rng(0), np.random.default_rng(0)
    assert task.sample_train(rng_a, 5) == inner.sample_train(rng_b, 5)
    assert set(task.alphabet) == set(inner.alphabet) | set(Retry.WRONG)
    assert [len(f) for f in task.longest_feedback()] == [len(Retry.WRONG) + len("99+99=")]
    three = Retry(inner, attempts=3, discount=0.9)
    episode = play(three, Example("1+1=", "2"), scripted("3", "4", "2"))
    assert episode.rewards == [0.0, 0.0, pytest.approx(0.81)]


# ---------------------------------------------------------------------- guess
def test_guess_binary_search_always_wins_and_feedback_points_the_way():
    task = make_task("guess", max_number=8, num_eval=16)
    assert task.max_turns == 4  # ceil(log2(9))
    example = Example("#0042 guess 1-8:", "7")
    episode = play(task, example, scripted("4", "6", "8", "7"))
    assert episode.history[1:] == ["4", " higher:", "6", " higher:", "8", " lower:", "7"]
    assert episode.rewards == [0.0, 0.0, 0.0, 1.0]
    for secret in range(1, 9):  # binary search over 1..8 never needs a fifth guess
        ex = Example("#0042 guess 1-8:", str(secret))

        def search(text: str) -> str:
            low, high = 1, 8
            for turn in text.split(":")[1:-1]:  # "4 higher", "6 lower", ...
                reply, word = turn.split(" ")
                if word == "higher":
                    low = int(reply) + 1
                else:
                    high = int(reply) - 1
            return str((low + high) // 2)

        assert play(task, ex, search).total_reward == 1.0


def test_guess_ends_on_a_reply_that_is_not_a_number():
    task = make_task("guess", max_number=8, num_eval=16)
    episode = play(task, Example("#0042 guess 1-8:", "3"), scripted("x"))
    assert episode == Episode(["#0042 guess 1-8:", "x"], [0.0])
    episode = play(task, Example("#0042 guess 1-8:", "3"), scripted("1", "03"))
    assert episode.rewards == [0.0, 1.0] and task.is_correct(" 03", "3")
    assert not task.is_correct("3x", "3") and not task.is_correct("103", "3")


def test_guess_games_are_uniform_held_out_and_fixed_by_the_split_seed():
    task = Guess(max_number=8, num_eval=100, split_seed=0)
    counts = collections.Counter(task.secret(g) for g in range(8000))
    assert sorted(counts) == list(range(1, 9)) and min(counts.values()) > 900
    held_out = {e.prompt for e in task.eval_examples()}
    train = task.sample_train(np.random.default_rng(0), 2000)
    assert not held_out & {e.prompt for e in train}
    assert all(e.answer == str(task.secret(int(e.prompt[1:5]))) for e in train[:50])
    other = Guess(max_number=8, num_eval=100, split_seed=1)
    assert [other.secret(g) for g in range(20)] != [task.secret(g) for g in range(20)]
    assert len(task.longest_examples()[0].prompt) >= max(len(p) for p in held_out)


# ---------------------------------------------------------------------- registry, errors
def test_registry_marks_multi_turn_tasks():
    assert is_multi_turn("addition_retry") and is_multi_turn("guess")
    assert not is_multi_turn("addition") and not is_multi_turn("jsonl:x.jsonl")
    assert knobs("addition_retry") == knobs("addition")
    assert knobs("guess") == {"max_number": 8, "num_eval": 256, "split_seed": 0}


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Retry(Addition(digits=1, num_eval=4), attempts=0), "attempts=0"),
        (lambda: Retry(Addition(digits=1, num_eval=4), discount=2.0), "discount=2.0"),
        (lambda: Retry(make_task("guess", num_eval=4)), "single-turn task"),
        (lambda: make_task("guess", max_number=1), "max_number=1"),
        (lambda: make_task("guess", num_eval=6000), "num_eval=6000"),
        (lambda: make_task("guess:x"), "takes no ':' argument"),
        (lambda: make_task("addition_retry:x"), "takes no ':' argument"),
    ],
)
def test_bad_input_names_the_field(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


def test_feedback_must_be_text():
    class Bad(Retry):
        def step(self, example: Example, history: Sequence[str], reply: str) -> Turn:
            return Turn(3, 0.0)  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="feedback 3: a str or None"):
        play(Bad(Addition(digits=1, num_eval=4)), Example("1+1=", "2"), scripted("3"))


def test_the_docs_example_plays_as_it_says():
    """The python block of docs/lm.md's "Multi-turn episodes" section, with its comments."""
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "lm.md").read_text()
    section = doc[doc.index("## Multi-turn episodes") :]
    block = re.search(r"^```python\n(.*?)^```", section, flags=re.M | re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "docs/lm.md", "exec"), namespace)
    episode = namespace["episode"]
    assert episode.history == ["#0042 guess 1-8:", "4", " higher:", "6", " higher:", "7"]
    assert episode.rewards == [0.0, 0.0, 1.0]
    assert str(episode.history) in block and str(episode.rewards) in block
