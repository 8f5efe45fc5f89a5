"""Multi-turn tasks: episodes in which the model and an environment take turns.

A `MultiTurnTask` is a `Task` (training and held-out examples, `is_correct`; SFT can
warm-start on its (prompt, answer) pairs) with a turn protocol on top, in text:

    history = [task.reset(example)]                        # the first prompt
    for turn in range(task.max_turns):
        reply = <the model's turn: text up to its stop (eos) token>
        feedback, reward, reply_end = task.turn(example, history, reply)
        history += [reply[:reply_end]]                     # all of it, or up to a tool call
        if feedback is None: break                         # the episode is over
        history += [feedback]                              # the environment's text

`step` (what a task implements) sees the example, the history so far (`[prompt,
reply_1, feedback_1, ..., reply_{k-1}, feedback_{k-1}]`) and the new reply, and
returns the environment's text (tool output, a checker's verdict) or None when the
episode is over, and the turn's reward. `turn` is `step` with the cap applied: after
the `max_turns`-th reply the episode ends whatever `step` says. The episode's return is
the sum of its turn rewards. `step` must be a deterministic function of its arguments
(a resumed run replays the same episodes) and cheap: it runs on the host between two
compiled sampling rounds. Exceptions in `step` are bugs and stop the run.
`turns` and `steps` are the same for one turn of many episodes at once (an algorithm's
batch of rows): by default `step` after `step`; a task whose answers take time overrides
`steps` to work on them together (`ToolUse` runs the turn's tool calls concurrently),
with the same results as one by one.

An algorithm tokenizes the turns (`jaxrl/algorithms/lm_multiturn.py`: one token row
per episode, the environment's tokens masked out of the loss); `longest_feedback` lets
it size its buffers before a run starts. `play` runs the protocol with a Python policy
(tests, examples, evaluation by hand).

The shipped example: `Retry` gives the model `attempts` tries at any single-turn task,
answering a wrong reply with "wrong, try again" and the prompt again; a correct reply at
try k (from 0) earns `discount ** k` and ends the episode. Registered as
`addition_retry` (addition with one retry).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from jaxrl.errors import ConfigError

from .addition import KNOBS as ADDITION_KNOBS
from .addition import Addition
from .base import Example, Task

KNOBS = dict(ADDITION_KNOBS)  # `addition_retry` takes addition's knobs
MULTI_TURN = True  # the registry's mark: algorithms play this task's episodes


class Turn(NamedTuple):
    """The environment's answer to one model turn."""

    feedback: str | None  # text appended after the model's turn; None ends the episode
    reward: float  # this turn's reward
    reply_end: int | None = None  # characters of the reply kept (None: all): a tool call
    # ends the turn where it ends; what the model wrote after it is dropped


class Episode(NamedTuple):
    """A played episode: the texts in order (`[prompt, reply_1, feedback_1, ...,
    reply_n]`) and one reward per model turn."""

    history: list[str]
    rewards: list[float]

    @property
    def replies(self) -> list[str]:
        return self.history[1::2]

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))


class MultiTurnTask(Task):
    """A task played over several turns (see the module docstring).

    Subclasses set `max_turns` and implement `step` and `longest_feedback` besides the
    `Task` methods; `reset` defaults to the example's prompt.
    """

    max_turns: int = 1

    def reset(self, example: Example) -> str:
        """The first prompt of an episode on `example`."""
        return example.prompt

    @abc.abstractmethod
    def step(self, example: Example, history: Sequence[str], reply: str) -> Turn:
        """The environment's answer to `reply`, given the episode's texts so far."""

    @abc.abstractmethod
    def longest_feedback(self) -> Sequence[str]:
        """Feedback texts at least as long, in characters, as any `step` returns."""

    def stop_strings(self) -> Sequence[str]:
        """Texts that end a model turn as its stop token does (kept in the reply): a tool
        call's end marker, so that decoding stops at the call. None by default."""
        return ()

    def steps(self, requests: Sequence[tuple[Example, Sequence[str], str]]) -> list[Turn]:
        """`step` of each `(example, history, reply)`, in order: one turn of several
        episodes. A task whose answers take time (tool calls) overrides it to work on
        them concurrently; the result must be the same as `step`'s, one by one."""
        return [self.step(*request) for request in requests]

    def turn(self, example: Example, history: Sequence[str], reply: str) -> Turn:
        """`step` with the turn cap: the episode ends after the `max_turns`-th reply."""
        return self.turns([(example, history, reply)])[0]

    def turns(self, requests: Sequence[tuple[Example, Sequence[str], str]]) -> list[Turn]:
        """`turn` of each `(example, history, reply)`, in order (through `steps`)."""
        answers = self.steps(requests)
        if len(answers) != len(requests):
            raise ValueError(
                f"{type(self).__name__}.steps returned {len(answers)} turns for "
                f"{len(requests)} replies"
            )
        return [
            self._capped(history, reply, Turn(*answer))
            for (_, history, reply), answer in zip(requests, answers, strict=True)
        ]

    def _capped(self, history: Sequence[str], reply: str, turn: Turn) -> Turn:
        """A checked `step` answer, with the turn cap applied."""
        feedback, reward, reply_end = turn
        if feedback is not None and not isinstance(feedback, str):
            raise TypeError(
                f"{type(self).__name__}.step returned feedback {feedback!r}: a str or None"
            )
        if reply_end is not None and not 0 <= reply_end <= len(reply):
            raise ValueError(
                f"{type(self).__name__}.step returned reply_end={reply_end} for a reply of "
                f"{len(reply)} characters"
            )
        if len(history) // 2 + 1 >= self.max_turns:
            feedback = None
        return Turn(feedback, float(reward), reply_end)


def play(task: MultiTurnTask, example: Example, policy: Callable[[str], str]) -> Episode:
    """One episode of `task` on `example`, `policy` mapping the text so far (prompt and
    every turn, concatenated) to the next reply."""
    history, rewards = [task.reset(example)], []
    while True:
        reply = policy("".join(history))
        feedback, reward, reply_end = task.turn(example, history, reply)
        history.append(reply if reply_end is None else reply[:reply_end])
        rewards.append(reward)
        if feedback is None:
            return Episode(history, rewards)
        history.append(feedback)


class Retry(MultiTurnTask):
    """`attempts` tries at a single-turn task: a wrong reply is answered with
    `WRONG` and the prompt again; a correct one at try k (from 0) earns `discount ** k`
    and ends the episode. Examples, the held-out split and `is_correct` are the inner
    task's."""

    WRONG = " wrong, try again\n"

    def __init__(self, task: Task, attempts: int = 2, discount: float = 0.5) -> None:
        if isinstance(task, MultiTurnTask):
            raise ConfigError(f"invalid task={task.name!r}: Retry wraps a single-turn task")
        if not (isinstance(attempts, int) and attempts >= 1):
            raise ConfigError(f"invalid attempts={attempts!r}: must be an integer >= 1")
        if not (isinstance(discount, int | float) and 0 <= discount <= 1):
            raise ConfigError(f"invalid discount={discount!r}: must be a number in [0, 1]")
        self.task, self.max_turns, self.discount = task, attempts, float(discount)
        self.name = f"{task.name}_retry"

    @property
    def alphabet(self) -> str:
        extra = "".join(sorted(set(self.WRONG) - set(self.task.alphabet)))
        return self.task.alphabet + extra

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return self.task.sample_train(rng, n)

    def eval_examples(self) -> list[Example]:
        return self.task.eval_examples()

    def longest_examples(self) -> Sequence[Example]:
        return self.task.longest_examples()

    def is_correct(self, completion: str, answer: str) -> bool:
        return self.task.is_correct(completion, answer)

    def step(self, example: Example, history: Sequence[str], reply: str) -> Turn:
        if self.is_correct(reply, example.answer):
            return Turn(None, self.discount ** (len(history) // 2))
        return Turn(self.WRONG + example.prompt, 0.0)

    def longest_feedback(self) -> Sequence[str]:
        return [self.WRONG + e.prompt for e in self.longest_examples()]


def make(arg: str | None, **knobs: int) -> Retry:
    """`addition_retry`: addition (knobs `digits`, `num_eval`, `split_seed`) with one retry."""
    if arg is not None:
        raise ConfigError(f"invalid task='addition_retry:{arg}': it takes no ':' argument")
    return Retry(Addition(**knobs), attempts=2)
