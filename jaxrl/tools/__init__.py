"""Tools a language model calls mid-turn (issue 33): what a tool is (`schema`), how calls
are written and parsed (`calls`), how they run without hurting the trainer (`runner`),
and the built-in calculator, document search and Python interpreter (`builtin`)."""

from .builtin import DocumentSearch, Retriever, builtin_tools, calculator, python
from .calls import FORMATS, MalformedCall, ToolCall, call_format, parse_tool_calls
from .runner import ToolResult, ToolRunner
from .schema import Tool

__all__ = [
    "FORMATS",
    "DocumentSearch",
    "MalformedCall",
    "Retriever",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolRunner",
    "builtin_tools",
    "calculator",
    "call_format",
    "parse_tool_calls",
    "python",
]
