"""Reward blocks: small named scorers `(completion, example) -> float`, their weighted sum,
and `score`, which runs them over a batch without ever letting one failure stop a run.

A `Block` is a name and a function of one completion (the decoded text) and the
`Example` it answers. The blocks here: `exact_match`, `final_number` (last number, or
the last `\\boxed{...}`), `format_reward` (a regex), `length_penalty` (DAPO's soft
overlong punishment, in characters), `task_reward` (the task's own `is_correct`) and
`python_reward` (any user callable); `jaxrl.rewards.sandbox.code_reward` runs code.
`compose([(weight, block), ...])` sums them; `make_reward("correct+0.1*format", task)`
builds one from a config string.

Failures (`score`): a block that raises, or returns NaN or an infinity, gives that
completion 0 for that block; each kind of failure (`"<block>: ValueError"`,
`"<block>: non-finite"`) is counted in the result, for the trainer's metrics, and logged
once per process as a warning, so a broken reward is never silent and never kills a run.

This runs on the host, in the staged driver's `process` phase, between the compiled
sampling and learning steps; nothing here is traced by JAX.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from jaxrl.errors import ConfigError
from jaxrl.tasks import Example, Task
from jaxrl.tasks import exact_match as _exact_match

from .base import Block, RewardFn
from .sandbox import code_reward

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Composite:
    """`sum(weight * block(completion, example))` over its terms (see `compose`)."""

    terms: tuple[tuple[float, Block], ...]

    @property
    def name(self) -> str:
        return "+".join(f"{w:g}*{b.name}" for w, b in self.terms)

    def __call__(self, completion: str, example: Example) -> float:
        return sum(w * b(completion, example) for w, b in self.terms)


Reward = Block | Composite


def compose(terms: Sequence[tuple[float, Block | RewardFn]]) -> Composite:
    """The weighted sum of `(weight, block)` terms; plain callables are wrapped by
    `python_reward`. Block names must be unique (`score` reports each one)."""
    if not terms:
        raise ConfigError("invalid reward=[]: compose needs at least one (weight, block)")
    out = []
    for weight, block in terms:
        if not (isinstance(weight, (int, float)) and math.isfinite(weight)):
            raise ConfigError(f"invalid reward weight={weight!r}: must be a finite number")
        out.append((float(weight), block if isinstance(block, Block) else python_reward(block)))
    names = [b.name for _, b in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"invalid reward={names}: block names must be unique")
    return Composite(tuple(out))


# ----------------------------------------------------------------------------- blocks
def exact_match() -> Block:
    """1 when the completion equals the answer after stripping whitespace, else 0."""
    return Block("exact_match", lambda c, e: float(_exact_match(c, e.answer)))


_BOXED = "\\boxed{"
# A number: optional sign, digits with optional thousands commas ("1,234"), optional
# decimals; or a bare decimal (".5"). A trailing period ("42.") is not a decimal point.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
MAX_NUMBER_CHARS = 64  # longer numbers are no answer (and cannot make Fraction slow)


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` in `text` (braces balanced), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, begin = 1, start + len(_BOXED)
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
    return None  # unclosed


def final_number(text: str) -> Fraction | None:
    """The last number of the last `\\boxed{...}` if there is one, else of the text.

    Thousands commas are dropped (`"1,234"` is 1234), a trailing period is punctuation
    (`"is 42."` is 42), decimals are exact (`"0.5"` is 1/2). None if there is no number.
    """
    boxed = last_boxed(text)
    matches = _NUMBER.findall(text if boxed is None else boxed)
    if not matches or len(matches[-1]) > MAX_NUMBER_CHARS:
        return None
    return Fraction(matches[-1].replace(",", ""))


def _final_number_reward(completion: str, example: Example) -> float:
    reference = final_number(example.answer)
    if reference is None:
        raise ValueError(f"the reference answer {example.answer[:80]!r} has no number")
    return float(final_number(completion) == reference)


def final_number_reward() -> Block:
    """1 when the completion's final number (see `final_number`) equals the answer's,
    compared as numbers (`"1,000.0"` equals `"1000"`); an answer without one raises."""
    return Block("final_number", _final_number_reward)


def format_reward(pattern: str = r"<answer>.*</answer>") -> Block:
    """1 when the whole stripped completion matches `pattern` (`re.fullmatch`, with `.`
    matching newlines), else 0."""
    try:
        regex = re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ConfigError(
            f"invalid pattern={pattern!r}: not a regular expression ({err})"
        ) from None
    return Block("format", lambda c, e: float(regex.fullmatch(c.strip()) is not None))


def length_penalty(max_chars: int, buffer: int) -> Block:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), in characters.

    With `L` the completion's length: 0 for `L <= max_chars - buffer`, falling linearly
    to -1 at `L = max_chars`, and -1 beyond.
    """
    if not (isinstance(max_chars, int) and max_chars >= 1):
        raise ConfigError(f"invalid max_chars={max_chars!r}: must be an integer >= 1")
    if not (isinstance(buffer, int) and 1 <= buffer <= max_chars):
        raise ConfigError(f"invalid buffer={buffer!r}: must be an integer in [1, {max_chars}]")

    def penalty(completion: str, example: Example) -> float:
        over = len(completion) - (max_chars - buffer)
        return 0.0 if over <= 0 else -min(1.0, over / buffer)

    return Block("length", penalty)


def task_reward(task: Task) -> Block:
    """1 when `task.is_correct(completion, example.answer)`, else 0."""
    return Block("correct", lambda c, e: float(task.is_correct(c, e.answer)))


def python_reward(fn: Callable[[str, Example], Any], name: str | None = None) -> Block:
    """A user's callable `(completion, example) -> number` as a block named `name`
    (default: the function's name)."""
    if not callable(fn):
        raise ConfigError(f"invalid reward={fn!r}: must be callable (completion, example)")
    return Block(name or getattr(fn, "__name__", type(fn).__name__), fn)


# ----------------------------------------------------------------------------- registry
def _import_callable(path: str) -> Block:
    module, sep, attr = path.partition(":")
    if not (module and sep and attr):
        raise ConfigError(f"invalid reward='python:{path}': expected python:package.module:fn")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"invalid reward='python:{path}': {err}") from None
    return python_reward(fn, name=attr)


def _length(arg: str) -> Block:
    try:
        max_chars, _, buffer = arg.partition(":")
        return length_penalty(int(max_chars), int(buffer or max(1, int(max_chars) // 4)))
    except ValueError:
        raise ConfigError(f"invalid reward='length:{arg}': expected length:MAX[:BUFFER]") from None


def _code(arg: str) -> Block:
    if arg not in ("", "all"):
        raise ConfigError(f"invalid reward='code:{arg}': expected code or code:all")
    return code_reward(all_or_nothing=arg == "all")


# name -> (factory(argument, task), what it is); argument is the text after ':' or "".
_REWARDS: dict[str, tuple[Callable[[str, Task | None], Block], str]] = {
    "correct": (lambda a, t: task_reward(_need_task(t)), "the task's is_correct"),
    "exact_match": (lambda a, t: exact_match(), "exact match after stripping"),
    "final_number": (lambda a, t: final_number_reward(), "last number or \\boxed{}"),
    "format": (lambda a, t: format_reward(), "<answer>...</answer> format"),
    "length": (lambda a, t: _length(a), "length:MAX[:BUFFER], overlong penalty"),
    "code": (lambda a, t: _code(a), "fraction of tests passed in a sandbox (code:all: 1/0)"),
    "python": (lambda a, t: _import_callable(a), "python:module:function"),
}


def _need_task(task: Task | None) -> Task:
    if task is None:
        raise ConfigError("invalid reward='correct': needs a task (make_reward(..., task))")
    return task


def names() -> list[str]:
    """Names of the registered blocks (`length` and `python` take an argument)."""
    return sorted(_REWARDS)


def make_reward(spec: str, task: Task | None = None) -> Composite:
    """The reward a config string names: `+`-separated terms `[weight*]name[:arg]`.

    E.g. `"correct"`, `"correct+0.1*format"`, `"final_number+0.5*length:512:128"` (the
    length block is already <= 0), `"correct+-0.1*format"` (a negative weight follows
    the `+`; weights cannot use `e+` notation). Unknown names
    raise `ConfigError` naming the field `reward` and the allowed names.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"invalid reward={spec!r}: must be a string such as 'correct'")
    terms = []
    for term in spec.replace(" ", "").split("+"):
        weight, star, rest = term.partition("*")
        if not star:
            weight, rest = "1", term
        name, _, arg = rest.partition(":")
        if name not in _REWARDS:
            allowed = ", ".join(f"{n} ({_REWARDS[n][1]})" for n in names())
            raise ConfigError(
                f"invalid reward={spec!r}: unknown block {name!r}; allowed: {allowed}"
            )
        try:
            w = float(weight)
        except ValueError:
            raise ConfigError(
                f"invalid reward={spec!r}: weight {weight!r} is not a number"
            ) from None
        terms.append((w, _REWARDS[name][0](arg, task)))
    return compose(terms)


# ----------------------------------------------------------------------------- scoring
class Scores(NamedTuple):
    """What `score` returns for a batch."""

    rewards: np.ndarray
    """float32 `[batch]`: the weighted sum of the blocks (failed blocks count 0)."""
    components: dict[str, np.ndarray]
    """Each block's unweighted float32 `[batch]` values, by block name (for metrics)."""
    failures: dict[str, int]
    """Failure counts by kind, `"<block>: <ExceptionType>"` or `"<block>: non-finite"`."""


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(kind: str, detail: str) -> None:
    with _warned_lock:
        if kind in _warned:
            return
        _warned.add(kind)
    logger.warning("reward %s (scored 0; counted in the failures, warned once): %s", kind, detail)


def _safe(block: Block, completion: str, example: Example) -> tuple[float, str | None]:
    """(value, None), or (0.0, failure kind) when the block raises or is not finite."""
    try:
        value = block(completion, example)
    except Exception as err:  # a reward bug must not stop training: counted and logged
        kind = f"{block.name}: {type(err).__name__}"
        _warn_once(kind, f"{err!r} on completion {completion[:80]!r}")
        return 0.0, kind
    if not math.isfinite(value):
        kind = f"{block.name}: non-finite"
        _warn_once(kind, f"returned {value} on completion {completion[:80]!r}")
        return 0.0, kind
    return value, None


def score(reward: Reward, completions: Sequence[str], examples: Sequence[Example]) -> Scores:
    """Runs `reward` (a block or a composite) on every (completion, example) pair.

    Each block is evaluated separately, so a failing block zeroes only its own term;
    blocks with `max_workers > 1` run that many completions concurrently.
    """
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    terms = reward.terms if isinstance(reward, Composite) else ((1.0, reward),)
    total = np.zeros(len(completions), np.float32)
    components, failures = {}, Counter()
    for weight, block in terms:
        call = lambda pair, b=block: _safe(b, *pair)  # noqa: E731
        pairs = list(zip(completions, examples, strict=True))
        if block.max_workers > 1 and len(pairs) > 1:
            with concurrent.futures.ThreadPoolExecutor(block.max_workers) as pool:
                results = list(pool.map(call, pairs))
        else:
            results = [call(p) for p in pairs]
        values = np.array([v for v, _ in results], np.float32)
        failures.update(kind for _, kind in results if kind is not None)
        components[block.name] = values
        total += np.float32(weight) * values
    return Scores(total, components, dict(failures))
