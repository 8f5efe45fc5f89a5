"""Countdown: reach a target with given numbers and + - * /. Prompt `"3 7 25 => 46:"`.

The prompt lists `numbers` integers in `[1, max_number]` (drawn independently, so one may
repeat), in ascending order, then the target; the answer is an arithmetic expression
such as `"25+3*7"`. The convention is TinyZero's (Pan et al. 2025, whose
`validate_equation` compares the sorted numbers of the equation with the given ones):
**every given number is used exactly once**, with the binary operators `+ - * /` and
parentheses. No unary minus, no other syntax; only the expression's value counts, in
exact rational arithmetic (`fractions.Fraction`: `7/2*2` is 7), and division by zero is
wrong.

Generation is solvable by construction: numbers are combined pairwise in random order
with random operators under the classic Countdown rule (every intermediate result is a
positive integer); the value is the target and the expression, with only the
parentheses it needs, is the reference answer. A target above `max_target` is redrawn;
after 50 tries the sum of the numbers is used (it always fits: `max_target` must be at
least `numbers * max_number`).

Split: the held-out problems are `num_eval` distinct number *multisets* chosen by
`split_seed`; a training draw whose multiset is held out is redrawn, so no held-out
prompt (in fact no held-out set of numbers, whatever the target) is ever trained on.

`is_correct(completion, answer)` needs no prompt: the reference answer uses every number
once, so its literals are the numbers and its value is the target. The completion is
parsed with `ast` (never `eval`): only integer literals, the four binary operators and
parentheses pass; it is at most `MAX_EXPRESSION_CHARS` characters, and its literals must
be the numbers' multiset before anything is computed, so no input can make the check
slow or huge.
"""

from __future__ import annotations

import ast
import math
import operator
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example, Task

KNOBS = {"numbers": 3, "max_number": 25, "max_target": 999, "num_eval": 256, "split_seed": 0}
MAX_NUMBERS = 6
MAX_NUMBER = 999
MAX_EXPRESSION_CHARS = 256  # longer completions are wrong without parsing
_TRIES = 50  # random expressions per draw before falling back to the sum

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_SYMBOLS = "+-*/"


class ExpressionError(ValueError):
    """A string is not an expression of integer literals, + - * / and parentheses."""


def parse_expression(text: str) -> ast.expr:
    """The `ast` of `text` if it uses only integer literals, + - * / and parentheses.

    Raises `ExpressionError` otherwise (names, calls, attributes, unary operators,
    `**`, `//`, floats, strings, texts over `MAX_EXPRESSION_CHARS` characters, ...).
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise ExpressionError(f"not an expression ({type(err).__name__})") from None
    for node in ast.walk(tree.body):
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
                raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, ast.Constant):
            if type(node.value) is not int:  # bool is an int subclass: excluded too
                raise ExpressionError(f"literal {node.value!r} is not an integer")
        elif not isinstance(node, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            raise ExpressionError(f"{type(node).__name__} is not allowed")
    return tree.body


def literals(tree: ast.expr) -> list[int]:
    """The integer literals of a parsed expression, left to right."""
    found: list[int] = []

    def visit(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp):
            visit(node.left)
            visit(node.right)
        else:
            found.append(node.value)  # type: ignore[attr-defined]

    visit(tree)
    return found


def evaluate(tree: ast.expr) -> Fraction | None:
    """The exact value of a parsed expression; None when it divides by zero."""
    if isinstance(tree, ast.Constant):
        return Fraction(tree.value)
    assert isinstance(tree, ast.BinOp)  # parse_expression admits nothing else
    left, right = evaluate(tree.left), evaluate(tree.right)
    if left is None or right is None:
        return None
    if isinstance(tree.op, ast.Div):
        return None if right == 0 else left / right
    return _OPERATORS[type(tree.op)](left, right)


def solves(expression: str, numbers: Sequence[int], target: int) -> bool:
    """Whether `expression` uses each of `numbers` exactly once and equals `target`."""
    try:
        tree = parse_expression(expression)
    except ExpressionError:
        return False
    if Counter(literals(tree)) != Counter(numbers):
        return False  # checked first: bounds the size of every value computed below
    return evaluate(tree) == target


def _combine(
    rng: np.random.Generator, numbers: Sequence[int]
) -> tuple[int, str] | tuple[None, None]:
    """A random expression over all `numbers` whose intermediate results are positive
    integers: (value, text with only the needed parentheses), or (None, None)."""
    # Each item: (value, text, precedence); 3 = literal, 2 = * /, 1 = + -.
    items = [(n, str(n), 3) for n in numbers]
    while len(items) > 1:
        i, j, op = rng.integers((len(items), len(items) - 1, 4)).tolist()
        j += j >= i  # a second item, distinct from the first
        (a, ta, pa), (b, tb, pb) = items[i], items[j]
        symbol = _SYMBOLS[op]
        if symbol == "+":
            value, prec = a + b, 1
        elif symbol == "-":
            value, prec, tb = a - b, 1, f"({tb})" if pb == 1 else tb
        elif symbol == "*":
            value, prec = a * b, 2
            ta, tb = (f"({t})" if p == 1 else t for t, p in ((ta, pa), (tb, pb)))
        else:
            if a % b:
                return None, None
            value, prec = a // b, 2
            ta, tb = f"({ta})" if pa == 1 else ta, f"({tb})" if pb < 3 else tb
        if value <= 0:
            return None, None
        items = [x for k, x in enumerate(items) if k not in (i, j)]
        items.append((value, f"{ta}{symbol}{tb}", prec))
    return items[0][0], items[0][1]


def make_problem(rng: np.random.Generator, numbers: Sequence[int], max_target: int) -> Example:
    """The example for sorted `numbers`: a random reachable target <= `max_target` and
    an expression reaching it (the sum after `_TRIES` failed draws)."""
    for _ in range(_TRIES):
        value, text = _combine(rng, numbers)
        if value is not None and value <= max_target:
            break
    else:
        value, text = sum(numbers), "+".join(map(str, numbers))
    return Example(f"{' '.join(map(str, numbers))} => {value}:", text)


class Countdown(Task):
    """Countdown with `numbers` numbers in `[1, max_number]` (see the module docstring)."""

    name = "countdown"

    def __init__(
        self,
        numbers: int = 3,
        max_number: int = 25,
        max_target: int = 999,
        num_eval: int = 256,
        split_seed: int = 0,
    ) -> None:
        if not (isinstance(numbers, int) and 2 <= numbers <= MAX_NUMBERS):
            raise ConfigError(
                f"invalid numbers={numbers!r}: must be an integer in [2, {MAX_NUMBERS}]"
            )
        if not (isinstance(max_number, int) and 2 <= max_number <= MAX_NUMBER):
            raise ConfigError(
                f"invalid max_number={max_number!r}: must be an integer in [2, {MAX_NUMBER}]"
            )
        if not (isinstance(max_target, int) and max_target >= numbers * max_number):
            raise ConfigError(
                f"invalid max_target={max_target!r}: must be an integer >= numbers * "
                f"max_number = {numbers * max_number} (so the sum is always a valid target)"
            )
        multisets = math.comb(max_number + numbers - 1, numbers)
        if not (isinstance(num_eval, int) and 1 <= num_eval <= multisets // 2):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {multisets // 2}] "
                f"(half of the {multisets} multisets of {numbers} numbers in [1, {max_number}])"
            )
        self.numbers, self.max_number, self.max_target = numbers, max_number, max_target
        rng = np.random.default_rng(split_seed)
        self._held_out: set[tuple[int, ...]] = set()
        self._eval: list[Example] = []
        while len(self._eval) < num_eval:
            draw = self._draw_numbers(rng)
            if draw not in self._held_out:
                self._held_out.add(draw)
                self._eval.append(make_problem(rng, draw, max_target))

    def _draw_numbers(self, rng: np.random.Generator) -> tuple[int, ...]:
        return tuple(sorted(rng.integers(1, self.max_number + 1, size=self.numbers).tolist()))

    @property
    def alphabet(self) -> str:
        return "0123456789 =>:+-*/()"

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        examples = []
        while len(examples) < n:  # rejection: at most half of the multisets are held out
            draw = self._draw_numbers(rng)
            if draw not in self._held_out:
                examples.append(make_problem(rng, draw, self.max_target))
        return examples

    def eval_examples(self) -> list[Example]:
        return list(self._eval)

    def longest_examples(self) -> Sequence[Example]:
        # Widest numbers and target; the answer has every number, n - 1 operators and at
        # most one pair of parentheses per operator but the outermost.
        top, n = str(self.max_number), self.numbers
        prompt = f"{' '.join([top] * n)} => {self.max_target}:"
        answer = "(" * (n - 2) + top + "".join(f"*{top})" for _ in range(n - 2)) + f"*{top}"
        return [Example(prompt, answer)]

    def is_correct(self, completion: str, answer: str) -> bool:
        """Whether `completion` uses the numbers of the reference `answer` exactly once
        each and has its value (see the module docstring)."""
        reference = parse_expression(answer)
        return solves(completion, literals(reference), evaluate(reference))


def make(arg: str | None, **knobs: int) -> Countdown:
    """`countdown` takes no ':' argument; knobs: `numbers`, `max_number`, `max_target`,
    `num_eval`, `split_seed`."""
    if arg is not None:
        raise ConfigError(f"invalid task='countdown:{arg}': countdown takes no ':' argument")
    return Countdown(**knobs)
