"""Built-in tools: a calculator, a search over local documents, and a Python interpreter.

- `calculator(expression)`: exact arithmetic on integers and decimals (`+ - * / // %
  **`, parentheses, unary minus), evaluated from its syntax tree, never by `eval`;
  exponents and results are bounded, so `9**9**9` is an error, not an hour of work.
- `Retriever(documents).search(query, k)`: BM25 ranking (Robertson & Zaragoza 2009,
  k1 = 1.5, b = 0.75) over documents held in memory, for search-style tasks without
  the internet. `Retriever.tool()` makes it a tool whose documents travel with it.
- `python(code)`: runs the code in `jaxrl.rewards.sandbox` and returns its output.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import operator
import re
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from .schema import Tool

MAX_EXPONENT = 256
MAX_DIGITS = 1000
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponents must be whole numbers up to {MAX_EXPONENT}")
            if left == 0 and right < 0:
                raise ValueError("division by zero")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ValueError("division by zero")
        result = _OPERATORS[type(node.op)](left, right)
        if max(len(str(result.numerator)), len(str(result.denominator))) > MAX_DIGITS:
            raise ValueError(f"the result has more than {MAX_DIGITS} digits")
        return Fraction(result)
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression exactly.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "12*(3+4)".
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r:.60}") from None
    value = _evaluate(tree.body)
    if value.denominator == 1:
        return str(value.numerator)
    return repr(float(value))


def python(code: str) -> str:
    """Runs Python code in a sandbox and returns what it printed.

    Args:
        code: A Python program; its standard output and errors are the result.
    """
    from jaxrl.rewards import sandbox

    result = sandbox.run(code, [])
    if result.status == "timeout":
        return f"{result.output}\n[stopped: the time limit]".strip()
    return result.output


_WORD = re.compile(r"\w+", re.UNICODE)


def _terms(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


@dataclasses.dataclass(frozen=True)
class Retriever:
    """BM25 over `documents` (see the module docstring)."""

    documents: tuple[str, ...]
    k1: float = 1.5
    b: float = 0.75

    def __post_init__(self) -> None:
        object.__setattr__(self, "documents", tuple(self.documents))
        if not self.documents:
            raise ValueError("a retriever needs at least one document")

    def scores(self, query: str) -> list[float]:
        """BM25 score of every document for `query`."""
        docs = [Counter(_terms(d)) for d in self.documents]
        lengths = [sum(d.values()) for d in docs]
        average = sum(lengths) / len(docs) or 1.0
        scores = [0.0] * len(docs)
        for term in set(_terms(query)):
            having = sum(1 for d in docs if term in d)
            if not having:
                continue
            idf = math.log(1 + (len(docs) - having + 0.5) / (having + 0.5))
            for i, d in enumerate(docs):
                tf = d[term]
                norm = tf + self.k1 * (1 - self.b + self.b * lengths[i] / average)
                scores[i] += idf * tf * (self.k1 + 1) / norm if tf else 0.0
        return scores

    def search(self, query: str, k: int = 3) -> list[str]:
        """The `k` best documents for `query` (ties in document order), best first;
        documents that match no term are left out."""
        scores = self.scores(query)
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [self.documents[i] for i in ranked[:k] if scores[i] > 0]


def search_documents(query: str, documents: Sequence[str], k: int = 3) -> str:
    """Searches the documents and returns the best matches, one per line.

    Args:
        query: Words to look for.
        documents: The documents to search.
        k: How many documents to return.
    """
    found = Retriever(tuple(documents)).search(query, k)
    return "\n".join(found) if found else "no document matches"


def builtin_tools(documents: Sequence[str] | None = None) -> list[Tool]:
    """The calculator and the Python interpreter, and with `documents` a `search` tool
    over them (the documents are bound into its calls, not shown to the model)."""
    tools = [Tool.from_function(calculator), Tool.from_function(python, timeout=10.0)]
    if documents is not None:
        tools.append(DocumentSearch(tuple(documents)).tool())
    return tools


@dataclasses.dataclass(frozen=True)
class DocumentSearch:
    """`search(query)` over fixed documents: picklable (the worker imports this class),
    so it can run as a tool."""

    documents: tuple[str, ...]
    k: int = 3

    def __call__(self, query: str) -> str:
        return search_documents(query, self.documents, self.k)

    def tool(self) -> Tool:
        schema = {
            "name": "search",
            "description": "Searches the documents and returns the best matches, one per line.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Words to look for."}},
                "required": ["query"],
            },
        }
        return Tool("search", self, schema)
