"""Tools the model calls (issue 33, item 2, the tool layer): schemas from signatures,
calls parsed from the hermes and plain formats, the built-in calculator and document
search, and a runner that answers every bad call (unknown tool, bad arguments, a tool
that raises, hangs, allocates, prints or returns a huge or non-text result) with a
message, never an exception or a hung trainer."""

from __future__ import annotations

import re
import time
from typing import Literal

import pytest

from jaxrl.config import ConfigError
from jaxrl.tools import (
    DocumentSearch,
    MalformedCall,
    Retriever,
    Tool,
    ToolCall,
    ToolRunner,
    calculator,
    parse_tool_calls,
)


# Tools for the runner: module-level, so that its server imports them.
def add(a: int, b: int = 0) -> int:
    """Adds two integers.

    Args:
        a: The first number.
        b: The second number, which
            may wrap onto a second line.
    """
    return a + b


def fail(reason: str) -> str:
    """Raises with the given reason."""
    raise RuntimeError(reason)


def hang(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "woke up"


def allocate(megabytes: int) -> int:
    """Allocates memory."""
    return len(bytearray(megabytes * 2**20))


def shout(times: int) -> str:
    """Prints, then returns a long text."""
    print("noise on stdout " * 100)
    return "A" * times


def structured() -> dict:
    """Returns a non-text value."""
    return {"answer": [1, 2], "unit": "m²"}


def pick(mode: Literal["fast", "slow"], note: str | None = None) -> str:
    """Picks a mode."""
    return mode


@pytest.fixture(scope="module")
def runner():
    tools = [
        Tool.from_function(f, timeout=2.0, output_chars=50)
        for f in (add, fail, hang, allocate, shout, structured, pick)
    ]
    with ToolRunner(tools, memory_mb=256) as started:
        yield started


def call(runner, name, **arguments):
    return runner.run(ToolCall(name, arguments, (0, 0)))


# ---------------------------------------------------------------------- schemas
def test_schema_from_signature_type_hints_and_docstring():
    schema = Tool.from_function(add).json_schema
    assert schema == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first number."},
                    "b": {
                        "type": "integer",
                        "description": "The second number, which may wrap onto a second line.",
                    },
                },
                "required": ["a"],
            },
        },
    }
    literal = Tool.from_function(pick).schema["parameters"]["properties"]
    assert literal["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert literal["note"] == {"type": "string", "nullable": True}


def test_a_function_without_a_schema_is_refused():
    def untyped(x):
        return x

    with pytest.raises(ConfigError, match=r"parameter 'x' needs a type hint"):
        Tool.from_function(untyped)
    with pytest.raises(ConfigError, match="must be importable"):
        ToolRunner([_closure()])


def _closure() -> Tool:
    def inner(x: int) -> int:
        return x

    return Tool.from_function(inner)


# ---------------------------------------------------------------------- parsing
def test_hermes_calls_parse_and_malformed_ones_say_why():
    text = (
        'I will add. <tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'
        '<tool_call>{oops}</tool_call><tool_call>{"name": "add"'
    )
    calls = parse_tool_calls(text, "hermes")
    assert [type(c) for c in calls] == [ToolCall, ToolCall, MalformedCall, MalformedCall]
    assert calls[0].name == "add" and calls[0].arguments == {"a": 2, "b": 3}
    assert calls[1].arguments == {"a": 1}  # JSON-encoded arguments
    assert "not valid JSON" in calls[2].error
    assert "not closed with </tool_call>" in calls[3].error
    assert text[slice(*calls[0].span)].startswith("<tool_call>")


def test_plain_calls_bind_positional_arguments_in_parameter_order():
    positional = {"add": ["a", "b"]}
    calls = parse_tool_calls("<<add(2, b=5)>> and <<add(1)>> <<add(x.y)>>", "plain", positional)
    assert calls[0] == ToolCall("add", {"a": 2, "b": 5}, calls[0].span)
    assert calls[1].arguments == {"a": 1}
    assert isinstance(calls[2], MalformedCall) and "literals" in calls[2].error
    with pytest.raises(ConfigError, match=r"invalid tool_format='xml'"):
        parse_tool_calls("", "xml")


# ---------------------------------------------------------------------- running
def test_a_good_call_returns_its_result_as_text(runner):
    result = call(runner, "add", a=2, b=40)
    assert result.ok and result.text == "42"
    assert call(runner, "structured").text == '{"answer": [1, 2], "unit": "m²"}'


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("nope", {}, r"unknown tool 'nope'; available: \['add', "),
        ("add", {}, r"add: missing required argument\(s\) \['a'\]"),
        ("add", {"a": 1, "c": 2}, r"add: unknown argument\(s\) \['c'\]"),
        ("add", {"a": "two"}, r"argument 'a' must be of type integer"),
        ("add", {"a": True}, r"argument 'a' must be of type integer"),
        ("pick", {"mode": "medium"}, r"argument 'mode' must be one of \['fast', 'slow'\]"),
        ("fail", {"reason": "boom"}, r"^error: RuntimeError: boom$"),
        ("hang", {"seconds": 60}, r"hang did not finish within 2 s"),
        ("allocate", {"megabytes": 1024}, r"ran out of memory"),
    ],
)
def test_a_bad_call_is_an_error_message_for_the_model(runner, name, arguments, message):
    start = time.perf_counter()
    result = call(runner, name, **arguments)
    assert not result.ok and re.search(message, result.text), result.text
    assert time.perf_counter() - start < 10
    assert call(runner, "add", a=1).text == "1"  # and the runner goes on


def test_a_huge_output_is_cut_where_the_tool_runs_and_prints_do_not_leak(runner):
    result = call(runner, "shout", times=10**6)
    assert result.ok and result.text == "A" * 21 + "... [1000000 characters, cut]"
    assert len(result.text) == 50  # output_chars, the note included
    assert call(runner, "add", a=3).text == "3"  # the protocol survived the prints


def test_malformed_calls_are_answered_without_running_anything(runner):
    result = runner.run(MalformedCall("the tool call is not valid JSON", (0, 5)))
    assert not result.ok and result.text == "error: the tool call is not valid JSON"


def test_error_messages_are_cut_to_error_chars_whatever_the_model_wrote(runner):
    """An error quotes the model's text, which has no length bound: it is cut like a
    tool's output, so no result is longer than `max_result_chars`."""
    long_name = call(runner, "x" * 500)
    assert not long_name.ok and long_name.text.startswith("error: unknown tool 'xxx")
    assert long_name.text.endswith("characters, cut]") and len(long_name.text) == 120
    unclosed = runner.run(MalformedCall("the tool call is not closed with >>" + "!" * 300, (0, 1)))
    assert len(unclosed.text) == runner.error_chars == 120
    assert runner.max_result_chars == 120  # above every tool's output_chars (50)
    assert ToolRunner([], error_chars=48).max_result_chars == 48
    with pytest.raises(ConfigError, match=r"invalid error_chars=10: must be an integer >= 48"):
        ToolRunner([], error_chars=10)


# ---------------------------------------------------------------------- built-ins
@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12*(3+4)", "84"),
        ("7/2", "3.5"),
        ("-2**3", "-8"),
        ("10//3 + 10%3", "4"),
        ("1/3", repr(1 / 3)),
    ],
)
def test_calculator_is_exact_arithmetic(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9**9**9", "exponents must be whole numbers up to 256"),
        ("1/0", "division by zero"),
        ("__import__('os')", "only numbers"),
        ("2**0.5", "exponents must be whole numbers"),
        ("(10**200)**5", "more than 1000 digits"),
        ("1 +", "not an arithmetic expression"),
    ],
)
def test_calculator_refuses_what_is_not_bounded_arithmetic(expression, message):
    with pytest.raises(ValueError, match=message):
        calculator(expression)


def test_bm25_search_ranks_the_matching_document_first():
    documents = (
        "The Eiffel tower is in Paris.",
        "Rome is the capital of Italy.",
        "Paris is the capital of France.",
    )
    assert Retriever(documents).search("capital of France", 1) == [documents[2]]
    assert Retriever(documents).search("zebra") == []
    search = DocumentSearch(documents, k=1)
    assert search("eiffel tower") == documents[0]
    assert search.tool().json_schema["function"]["name"] == "search"


def test_document_search_runs_as_a_tool(runner):
    documents = ("alpha beta", "gamma delta")
    with ToolRunner([DocumentSearch(documents).tool()]) as own:
        result = own.run(ToolCall("search", {"query": "delta"}, (0, 0)))
    assert result.ok and result.text == "gamma delta"


def test_the_python_tool_runs_code_in_the_sandbox():
    from jaxrl.tools import python

    assert python("print(6 * 7)") == "42\n"
    assert python("while True: pass").endswith("[stopped: the time limit]")


def test_a_stalled_tool_server_is_replaced_and_the_call_answered():
    """The server enforces each call's timeout; the runner bounds its own wait too, so a
    server that stops answering (here: stopped with SIGSTOP) cannot hang the trainer."""
    import os
    import signal

    tools = [Tool.from_function(add, timeout=0.5)]
    with ToolRunner(tools) as runner:
        assert call(runner, "add", a=1).text == "1"  # the server is up, `add` imported
        runner.server_grace = 1.0
        stalled = runner._server
        os.kill(stalled.pid, signal.SIGSTOP)
        start = time.perf_counter()
        result = call(runner, "add", a=2)
        assert time.perf_counter() - start < 5
        assert not result.ok and "did not load add within 1 s" in result.text
        assert stalled.poll() is not None  # killed, not left behind
        runner.server_grace = 60.0  # the new server imports this test module (and JAX)
        assert call(runner, "add", a=3).text == "3"  # a new server answers


def test_server_grace_must_be_positive():
    with pytest.raises(ConfigError, match="server_grace"):
        ToolRunner([Tool.from_function(add)], server_grace=0)


def test_the_tool_layer_imports_without_jax():
    """The tool server imports the tools' modules and forks once per call; a fork copies
    everything it has imported, and a process holding JAX forks several times slower.
    So `jaxrl` (imported lazily) and `jaxrl.tools` must not import JAX."""
    import subprocess
    import sys

    probe = "import sys, jaxrl, jaxrl.tools; print(sorted({'jax', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_python_tools_sandbox_and_the_tasks_import_without_jax():
    """The `python` tool imports `jaxrl.rewards.sandbox` in each call's fork, and tool
    tasks import `jaxrl.tasks`: neither may pull in JAX (importing it cost about a second
    per sandboxed call)."""
    import subprocess
    import sys

    probe = (
        "import sys, jaxrl.tasks, jaxrl.rewards.sandbox, jaxrl.rewards; "
        "print(sorted({'jax', 'flax'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
