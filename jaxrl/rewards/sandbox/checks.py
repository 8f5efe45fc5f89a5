"""Tests the program cannot forge: expected values stay in the trainer.

Before a program runs, `split` turns each test into a *probe* for the sandbox and
*checks* that stay here. Every top-level `assert <expr> <op> <literal>` (or
`<literal> <op> <expr>`, one comparison, `<literal>` anything `ast.literal_eval`
reads) becomes `__report__(<k>, <expr>)`: the sandbox evaluates `<expr>` with the
program and reports its value; the trainer compares it with the literal, which never
enters the program's process. The value travels as tagged JSON of plain built-in types
only (`None`, `bool`, `int`, `float`, `complex`, `str`, `bytes`, `list`, `tuple`,
`dict`, `set`, `frozenset`, by exact type), decoded here into fresh built-in objects,
so no `__eq__` of the program's ever runs in a comparison (an object whose `__eq__` is
always true is reported as unsupported and fails).

`judge` then passes a test only if its probe ran to the end ("done") and every check
got exactly one report whose value satisfies it. Everything the sandbox writes is
treated as untrusted: a program that patches the harness can write any report, but to
pass a checked test it must report the right value for inputs it sees and answers it
does not, which is solving the task. A test with no such assert (say `assert f(2) ==
f(1) + 2`, or statements only) is run in the program's process and only its
completion is reported: it is only as strong as that process, and a program written to
attack the harness can fake it (write tests against literals to rule that out).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import operator
from collections.abc import Sequence
from typing import Any

REPORT = "__report__"  # the probe's function; the runner defines it

_OPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FLIPPED = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}


@dataclasses.dataclass(frozen=True)
class Check:
    """`<reported value> <op> expected` (the operator already turned to put the
    reported value first), kept in the trainer."""

    op: str
    expected: Any


@dataclasses.dataclass(frozen=True)
class Split:
    """A test as the sandbox runs it (`probe`) and what the trainer checks."""

    probe: str
    checks: tuple[Check, ...]


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _check_of(test: ast.expr) -> tuple[ast.expr, Check] | None:
    """(expression to report, its check) for `<expr> <op> <literal>`, else None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = type(test.ops[0]), test.left, test.comparators[0]
    is_literal, value = _literal(right)
    if is_literal:
        return left, Check(op.__name__, value)
    is_literal, value = _literal(left)
    if is_literal and op in _FLIPPED:
        return right, Check(_FLIPPED[op].__name__, value)
    if is_literal and op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot):
        return right, Check(op.__name__, value)
    return None  # `<literal> in <expr>` and friends: run in the sandbox unchecked


def split(test: str) -> Split:
    """The probe and checks of one test (unparsable tests go to the sandbox as they are,
    where they fail to compile)."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Split(test, ())
    checks = []
    for i, statement in enumerate(tree.body):
        found = _check_of(statement.test) if isinstance(statement, ast.Assert) else None
        if found is None:
            continue
        expression, check = found
        call = ast.Call(ast.Name(REPORT, ast.Load()), [ast.Constant(len(checks)), expression], [])
        tree.body[i] = ast.copy_location(ast.Expr(call), statement)
        checks.append(check)
    if not checks:
        return Split(test, ())
    return Split(ast.unparse(ast.fix_missing_locations(tree)), tuple(checks))


# --------------------------------------------------------------------- values from the sandbox
class _Unsupported:
    """A reported value of a type the encoder refused: equal to nothing."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def decode(data: Any) -> Any:
    """A built-in value from the runner's tagged JSON (see `runner.encode`); raises
    ValueError on anything else."""
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is int:
        return data
    if type(data) is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "f" and type(body) is str:
            return float(body)
        if tag == "c" and type(body) is list and len(body) == 2:
            return complex(float(body[0]), float(body[1]))
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "x":
            return _Unsupported()
        if type(body) is list:
            items = [decode(x) for x in body]
            if tag == "l":
                return items
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "fs":
                return frozenset(items)
            if tag == "d" and all(type(p) is tuple and len(p) == 2 for p in items):
                return dict(items)
    raise ValueError(f"not a reported value: {str(data)[:80]!r}")


def judge(splits: Sequence[Split], lines: Sequence[bytes]) -> set[int]:
    """Indices of the tests passed, from the runner's report lines (untrusted):
    `["v", test, k, value]` and `["done", test]`."""
    reports: dict[tuple[int, int], list[Any]] = {}
    done: set[int] = set()
    # Room for every honest line many times over; a program flooding the channel with
    # tiny lines only crowds out its own reports, not the trainer's time.
    cap = 4 * (len(splits) + sum(len(s.checks) for s in splits)) + 1000
    for line in lines[:cap]:
        try:
            message = json.loads(line)
            if message[0] == "done" and len(message) == 2 and type(message[1]) is int:
                done.add(message[1])
            elif message[0] == "v" and len(message) == 4:
                key = (message[1], message[2])
                if type(key[0]) is int and type(key[1]) is int:
                    reports.setdefault(key, []).append(message[3])
        except (ValueError, TypeError, IndexError, KeyError, RecursionError):
            continue  # garbage on the channel counts for nothing
    passed = set()
    for i, test in enumerate(splits):
        if i in done and all(
            _holds(check, reports.get((i, k))) for k, check in enumerate(test.checks)
        ):
            passed.add(i)
    return passed


def _holds(check: Check, values: list[Any] | None) -> bool:
    """One report (a second would be a second guess) whose value satisfies `check`."""
    if values is None or len(values) != 1:
        return False
    try:
        value = decode(values[0])
        return bool(_OPS[getattr(ast, check.op)](value, check.expected))
    except (ValueError, TypeError, RecursionError, OverflowError, MemoryError):
        return False
