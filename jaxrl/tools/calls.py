"""Tool calls in a model's output: parsed from the formats models are trained on.

- `hermes` (Hermes, Qwen2.5, Qwen3 and most open models): each call is a JSON object
  between `<tool_call>` and `</tool_call>`, `{"name": ..., "arguments": {...}}` (the
  arguments may also come JSON-encoded as a string).
- `plain` (small character-level models, which learn any format and need a short one):
  a Python-style call between `<<` and `>>`, `<<add(2, b=3)>>`, with literal arguments
  only (numbers, strings, lists, dicts, True/False/None); positional arguments bind to
  the tool's parameters in order.

`parse_tool_calls` returns every call in a text, well-formed (`ToolCall`) or not
(`MalformedCall`, with a message for the model): a malformed call is something to answer,
never an exception. Each format's `end` marker is where decoding stops for the tool to
run.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A parsed call: the tool's `name`, its keyword `arguments`, and the call's character
    `span` in the text."""

    name: str
    arguments: dict[str, Any]
    span: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class MalformedCall:
    """A call that could not be parsed: `error` says why, in words for the model."""

    error: str
    span: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class CallFormat:
    """How calls are written: between `start` and `end`; `parse` reads one call's body."""

    name: str
    start: str
    end: str

    def parse_body(self, body: str, positional: Mapping[str, Sequence[str]]) -> tuple:
        """`(name, arguments)` of one call's text, or raises `ValueError` with a message
        for the model. `positional` gives each tool's parameter names in order."""
        if self.name == "hermes":
            return _parse_json_call(body)
        return _parse_python_call(body, positional)


FORMATS = {
    "hermes": CallFormat("hermes", "<tool_call>", "</tool_call>"),
    "plain": CallFormat("plain", "<<", ">>"),
}


def call_format(name: str) -> CallFormat:
    if name not in FORMATS:
        raise ConfigError(f"invalid tool_format={name!r}: must be one of {sorted(FORMATS)}")
    return FORMATS[name]


def _parse_json_call(body: str) -> tuple[str, dict[str, Any]]:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"the tool call is not valid JSON ({err.msg} at char {err.pos})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError('a tool call is {"name": <tool>, "arguments": {...}}')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments JSON-encoded
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise ValueError("the tool call's arguments are not valid JSON") from None
    if not isinstance(arguments, dict):
        raise ValueError("the tool call's arguments must be an object")
    return call["name"], arguments


def _parse_python_call(
    body: str, positional: Mapping[str, Sequence[str]]
) -> tuple[str, dict[str, Any]]:
    try:
        node = ast.parse(body.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError("a call is name(arguments), e.g. add(2, b=3)") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("a call is name(arguments), e.g. add(2, b=3)")
    name = node.func.id
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except (ValueError, SyntaxError, TypeError):
        raise ValueError("arguments must be literals (numbers, strings, lists)") from None
    if len(kwargs) != len(node.keywords):
        raise ValueError("**arguments are not allowed")
    names = list(positional.get(name, ()))
    if len(args) > len(names):
        raise ValueError(f"{name} takes at most {len(names)} positional arguments")
    bound = dict(zip(names, args, strict=False))
    clash = sorted(set(bound) & set(kwargs))
    if clash:
        raise ValueError(f"{name}: argument(s) {clash} given twice")
    return name, {**bound, **kwargs}


def parse_tool_calls(
    text: str, format: str, positional: Mapping[str, Sequence[str]] | None = None
) -> list[ToolCall | MalformedCall]:
    """Every call in `text`, in order. An opened call that is never closed is malformed
    (the model ran out of tokens). `positional`: each tool's parameter names in order
    (the `plain` format binds positional arguments to them)."""
    fmt = call_format(format)
    positional = positional or {}
    calls: list[ToolCall | MalformedCall] = []
    pattern = re.compile(re.escape(fmt.start) + "(.*?)" + "(" + re.escape(fmt.end) + "|$)", re.S)
    for match in pattern.finditer(text):
        span = match.span()
        if not match.group(2):
            calls.append(MalformedCall(f"the tool call is not closed with {fmt.end}", span))
            continue
        try:
            name, arguments = fmt.parse_body(match.group(1), positional)
        except ValueError as err:
            calls.append(MalformedCall(str(err), span))
            continue
        calls.append(ToolCall(name, arguments, span))
    return calls
