"""A tool: a Python callable the model may call, and the JSON schema it is shown.

`Tool.from_function(fn)` derives the schema from the function's signature, type hints
and Google-style docstring (its first paragraph is the description, its `Args:` section
the parameters' descriptions), in the format chat templates receive as `tools` and
`transformers.utils.get_json_schema` writes:

    {"type": "function", "function": {"name": ..., "description": ...,
     "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

A schema may also be given. `Tool.check_arguments` validates a call's arguments against
the schema (names, required ones, JSON types) before anything runs, so a malformed call
becomes an error message to the model, not an exception in the trainer.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from jaxrl.errors import ConfigError

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    """The JSON-schema type of a parameter's type hint (`int`, `list[str]`, `str | None`,
    `Literal["a", "b"]`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        kinds = {_JSON_TYPES[type(a)] for a in args}
        return {"type": kinds.pop() if len(kinds) == 1 else sorted(kinds), "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        inner = _json_type(members[0], where) if len(members) == 1 else {"type": "string"}
        if len(members) < len(args):  # Optional
            inner = {**inner, "nullable": True}
        return inner
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _json_type(args[0], where)}
    base = origin or hint
    if base in _JSON_TYPES:
        return {"type": _JSON_TYPES[base]}
    raise ConfigError(
        f"invalid tool {where}: type {hint!r} has no JSON-schema type; use str, int, float, "
        "bool, list, dict, a Literal or an Optional of those"
    )


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and `Args:` entries of a Google docstring."""
    doc = inspect.cleandoc(doc or "")
    description = " ".join(doc.split("\n\n")[0].split()) if doc else ""
    args: dict[str, str] = {}
    section = re.search(r"^Args:\s*\n((?:[ \t]+.*\n?|\s*\n)+)", doc, re.MULTILINE)
    if section:
        current = None
        for line in section.group(1).splitlines():
            entry = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if entry and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = entry.group(1)
                args[current] = entry.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return description, args


@dataclasses.dataclass(frozen=True)
class Tool:
    """A callable the model may call by `name`, and its JSON `schema` (the `function`
    part: name, description, parameters). `timeout` (seconds) and `output_chars` bound
    one call (`ToolRunner`)."""

    name: str
    function: Callable[..., Any]
    schema: Mapping[str, Any]
    timeout: float = 5.0
    output_chars: int = 2000

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name or ""):
            raise ConfigError(f"invalid tool name={self.name!r}: must be an identifier")
        if not (self.timeout > 0 and self.output_chars > 0):
            raise ConfigError(
                f"invalid tool {self.name}: timeout={self.timeout} and "
                f"output_chars={self.output_chars} must be > 0"
            )

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float = 5.0,
        output_chars: int = 2000,
    ) -> Tool:
        """The tool of a typed, documented function (see the module docstring). Every
        parameter needs a type hint; one without a default is required."""
        name = name or function.__name__
        doc_description, doc_args = _docstring_parts(function.__doc__ or "")
        hints = typing.get_type_hints(function)
        properties: dict[str, Any] = {}
        required = []
        for parameter in inspect.signature(function).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ConfigError(f"invalid tool {name}: *args and **kwargs have no schema")
            if parameter.name not in hints:
                raise ConfigError(
                    f"invalid tool {name}: parameter {parameter.name!r} needs a type hint"
                )
            prop = _json_type(hints[parameter.name], f"{name}.{parameter.name}")
            if parameter.name in doc_args:
                prop["description"] = doc_args[parameter.name]
            properties[parameter.name] = prop
            if parameter.default is parameter.empty:
                required.append(parameter.name)
        schema = {
            "name": name,
            "description": description or doc_description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        }
        return cls(name, function, schema, timeout=timeout, output_chars=output_chars)

    @property
    def json_schema(self) -> dict[str, Any]:
        """What a chat template's `tools` holds for this tool."""
        return {"type": "function", "function": dict(self.schema)}

    def check_arguments(self, arguments: Any) -> str | None:
        """Why `arguments` do not fit the schema (a message for the model), or None."""
        if not isinstance(arguments, Mapping):
            return f"{self.name}: arguments must be an object, got {type(arguments).__name__}"
        parameters = self.schema.get("parameters", {})
        properties = parameters.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return f"{self.name}: unknown argument(s) {unknown}; it takes {sorted(properties)}"
        missing = [n for n in parameters.get("required", []) if n not in arguments]
        if missing:
            return f"{self.name}: missing required argument(s) {missing}"
        for key, value in arguments.items():
            problem = _type_problem(properties[key], value)
            if problem:
                return f"{self.name}: argument {key!r} {problem}"
        return None


def _type_problem(prop: Mapping[str, Any], value: Any) -> str | None:
    """Why `value` is not of the schema property's type, or None."""
    if value is None and prop.get("nullable"):
        return None
    if "enum" in prop and value not in prop["enum"]:
        return f"must be one of {prop['enum']}"
    kinds = prop.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if not kinds or any(_matches(kind, value) for kind in kinds):
        return None
    return f"must be of type {' or '.join(kinds)}, got {value!r:.40}"


def _matches(kind: str, value: Any) -> bool:
    """JSON's types: a bool is not a number, an int is a number."""
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _PYTHON_TYPES.get(kind, object))
