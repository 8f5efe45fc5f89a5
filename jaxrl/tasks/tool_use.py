"""Tool use as a multi-turn task: the model may call tools before it answers.

`ToolUse(task, tools)` plays any single-turn task with tools. Each model turn either
holds a tool call, in the `plain` (`<<calculator("1234*567")>>`) or `hermes` format
(`jaxrl.tools.calls`), or is the answer:

- a call: decoding stops where the call ends (`stop_strings`: the format's end marker),
  and the turn is cut there in any case (what a policy wrote after it is dropped:
  never shown to it again, never learned from), the call runs
  (`jaxrl.tools.ToolRunner`; the calls of one turn of many episodes, `steps`, run
  concurrently, at most `max_concurrent_calls` at once), and its result comes back
  as feedback, `=<result>\\n` (`plain`) or `<tool_response>\\n<result>\\n</tool_response>\\n`
  (`hermes`); the turn's reward is 0, or `-malformed_penalty` when the call was malformed or failed;
- the answer: the episode ends with reward 1 if it is correct (the task's
  `is_correct`), else 0.

An error message (about a malformed or unknown call, or a tool that failed) is cut to
`error_chars` characters, as a tool's output is to its `output_chars`: every turn's
feedback then fits `longest_feedback`, which sizes the episode's token budget, so keep
both small for a small model's context.

At most `max_calls` calls: the turn after the last one must be the answer (the turn cap
ends the episode). `longest_call` is the longest call a turn must hold (the algorithm
sizes a turn's token budget from it and the answers). An example's prompt and answer are
the wrapped task's, so SFT on them teaches to answer without tools; demonstrations with
calls are `demonstration`.

Registered as `tool_multiply`: a `digits`-digit number times a (`digits` - 1)-digit
one (4 x 3 by default), with a calculator; `tool_multiply:demos` is its demonstrations
as single-turn pairs (`Demonstrations`), the SFT warm start for RL with the tool. A
small model cannot multiply such numbers in its head; with the calculator it needs only
to write the call and copy the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from jaxrl.errors import ConfigError
from jaxrl.tools import MalformedCall, Tool, ToolRunner, calculator, parse_tool_calls
from jaxrl.tools.calls import call_format

from .base import Example, Task
from .multiturn import MultiTurnTask, Turn

KNOBS = {"digits": 4, "num_eval": 256, "split_seed": 0}
MULTI_TURN = True


class ToolUse(MultiTurnTask):
    """Any task, played with tools (see the module docstring)."""

    def __init__(
        self,
        task: Task,
        tools: Sequence[Tool],
        format: str = "plain",
        max_calls: int = 1,
        malformed_penalty: float = 0.0,
        longest_call: str = "",
        error_chars: int = 64,
        max_concurrent_calls: int | None = None,
    ) -> None:
        self.fmt = call_format(format)
        if not (isinstance(max_calls, int) and max_calls >= 1):
            raise ConfigError(f"invalid max_calls={max_calls!r}: must be an integer >= 1")
        if not malformed_penalty >= 0:
            raise ConfigError(f"invalid malformed_penalty={malformed_penalty!r}: must be >= 0")
        self.task, self.tools = task, list(tools)
        self.runner = ToolRunner(
            self.tools, error_chars=error_chars, max_concurrent_calls=max_concurrent_calls
        )
        self.max_calls, self.malformed_penalty = max_calls, malformed_penalty
        self.longest_call = longest_call
        self.max_turns = max_calls + 1
        self.name = f"{getattr(task, 'name', type(task).__name__)}+tools"

    # -- the wrapped task
    @property
    def alphabet(self) -> str:
        calls = self.fmt.start + self.fmt.end + "()\"'=,_ \n" + "".join(t.name for t in self.tools)
        feedback = "".join(self.feedback("x"))
        return "".join(sorted(set(self.task.alphabet + calls + feedback)))

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return self.task.sample_train(rng, n)

    def eval_examples(self) -> list[Example]:
        return self.task.eval_examples()

    def longest_examples(self) -> Sequence[Example]:
        """The wrapped task's, with the longest call as a reply too (a turn's token
        budget must hold a call as well as an answer)."""
        examples = list(self.task.longest_examples())
        return examples + [Example(e.prompt, self.longest_call) for e in examples]

    def is_correct(self, completion: str, answer: str) -> bool:
        return self.task.is_correct(completion, answer)

    # -- the turns
    def feedback(self, result: str) -> str:
        """The text after a call: its result in the format's wrapper."""
        if self.fmt.name == "hermes":
            return f"<tool_response>\n{result}\n</tool_response>\n"
        return f"={result}\n"

    def step(self, example: Example, history: Sequence[str], reply: str) -> Turn:
        return self.steps([(example, history, reply)])[0]

    def steps(self, requests: Sequence[tuple[Example, Sequence[str], str]]) -> list[Turn]:
        """One turn of several episodes: their calls run together
        (`ToolRunner.run_many`: concurrently, the results in order, each what the call
        gives alone), so a turn costs about its slowest call, not the sum."""
        found = [
            parse_tool_calls(reply, self.fmt.name, self.runner.positional) for *_, reply in requests
        ]
        results = iter(self.runner.run_many([calls[0] for calls in found if calls]))
        turns = []
        for (example, _, reply), calls in zip(requests, found, strict=True):
            if not calls:
                turns.append(Turn(None, float(self.is_correct(reply, example.answer))))
                continue
            call, result = calls[0], next(results)
            failed = isinstance(call, MalformedCall) or not result.ok
            reward = -self.malformed_penalty if failed else 0.0
            turns.append(Turn(self.feedback(result.text), reward, reply_end=call.span[1]))
        return turns

    def stop_strings(self) -> Sequence[str]:
        """The call format's end marker: a turn stops where its call ends."""
        return (self.fmt.end,)

    def longest_feedback(self) -> Sequence[str]:
        """A result as long as any the runner returns, a tool's output or an error
        message about a call (`ToolRunner.max_result_chars`), in the format's wrapper."""
        return [self.feedback("x" * self.runner.max_result_chars)]

    def demonstration(self, example: Example, call: str, result: str) -> str:
        """A full episode's text after the prompt, for SFT on tool use: the call, its
        feedback, and the answer."""
        return f"{self.fmt.start}{call}{self.fmt.end}{self.feedback(result)}{example.answer}"


class Demonstrations(Task):
    """The episodes of a `ToolUse` task as single-turn (prompt, answer) pairs for SFT: the
    answer is the call, its feedback and the answer (`ToolUse.demonstration`), so a warm
    start learns the call format, then to copy the tool's result. `call_of(example)` is
    the call's text and `result_of(example)` what the tool returns for it (known for the
    task's own examples, so building a batch runs no tool). The alphabet is the tool
    task's, so a model warm-started here reads and writes every text of its episodes."""

    def __init__(
        self,
        tool_use: ToolUse,
        call_of: Callable[[Example], str],
        result_of: Callable[[Example], str],
    ) -> None:
        self.tool_use, self.call_of, self.result_of = tool_use, call_of, result_of
        self.name = f"{tool_use.name}:demos"

    def _demo(self, example: Example) -> Example:
        text = self.tool_use.demonstration(example, self.call_of(example), self.result_of(example))
        return Example(example.prompt, text)

    @property
    def alphabet(self) -> str:
        return self.tool_use.alphabet

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        return [self._demo(e) for e in self.tool_use.sample_train(rng, n)]

    def eval_examples(self) -> list[Example]:
        return [self._demo(e) for e in self.tool_use.eval_examples()]

    def longest_examples(self) -> Sequence[Example]:
        return [self._demo(e) for e in self.tool_use.task.longest_examples()]


def is_multi_turn(arg: str | None) -> bool:
    """`tool_multiply` is played over turns; `tool_multiply:demos` is single-turn SFT data."""
    return arg != "demos"


def make(arg: str | None, **knobs: int) -> ToolUse | Demonstrations:
    """`tool_multiply`: multiplication with a calculator; knobs `digits` (of the first
    factor; the second has one fewer), `num_eval`, `split_seed`. `tool_multiply:demos`:
    its demonstrations, for an SFT warm start."""
    from .multiply import Multiply

    if arg not in (None, "demos"):
        raise ConfigError(f"invalid task='tool_multiply:{arg}': the only argument is 'demos'")
    task = Multiply(**knobs)
    tools = [Tool.from_function(calculator, output_chars=32)]
    operands = task.longest_examples()[0].prompt.rstrip("=")
    tool_use = ToolUse(task, tools, format="plain", longest_call=f'<<calculator("{operands}")>>')
    if arg is None:
        return tool_use
    return Demonstrations(
        tool_use,
        call_of=lambda e: f'calculator("{e.prompt.rstrip("=")}")',
        result_of=lambda e: e.answer,
    )
