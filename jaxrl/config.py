"""Config utilities shared by algorithms: validation, sweeps and file loading.

An algorithm's config is a frozen dataclass. Fields listed in the algorithm's
`sweepable` are numeric hyperparameters that become pytree leaves of the
training state (`HyperParams`, made by `make_hyperparams_class` and filled by
`hyperparams_from`; `Algorithm.hyperparams` does both), so one compiled program
can `vmap` over several values of them; every other field is static structure
(shapes, network sizes, flags) fixed at compile time.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import pathlib
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.errors import ConfigError, check  # defined without JAX (see jaxrl/errors.py)


def check_positive(config: Any, *fields: str) -> None:
    for name in fields:
        value = getattr(config, name)
        is_number = isinstance(value, (int, float))
        check(not is_number or math.isfinite(value), name, value, "a finite number")
        check(is_number and value > 0, name, value, "> 0")


def check_range(config: Any, field: str, low: float, high: float, *, closed: bool = True) -> None:
    value = getattr(config, field)
    ok = low <= value <= high if closed else low < value < high
    bracket = f"[{low}, {high}]" if closed else f"({low}, {high})"
    check(isinstance(value, (int, float)) and ok, field, value, f"in {bracket}")


def check_choice(config: Any, field: str, choices: Sequence[Any]) -> None:
    value = getattr(config, field)
    check(value in choices, field, value, f"one of {list(choices)}")


def replace(config: Any, **overrides: Any) -> Any:
    """`dataclasses.replace` that names unknown fields and coerces types."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config field(s) {unknown} for {type(config).__name__}; "
            f"allowed: {sorted(fields)}"
        )
    hints = typing.get_type_hints(type(config))
    coerced = {k: coerce(k, v, hints[k]) for k, v in overrides.items()}
    return dataclasses.replace(config, **coerced)


def coerce(name: str, value: Any, hint: Any) -> Any:
    """Converts strings (from the CLI or files) and lists into the field's type."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        is_none = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
        if is_none and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return coerce(name, value, non_none[0])
    if origin in (tuple, Sequence) or hint is tuple:
        if isinstance(value, str):
            value = [v for v in value.replace(" ", "").split(",") if v]
        item = args[0] if args else Any
        return tuple(coerce(name, v, item) for v in value)
    try:
        if hint is bool:
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            return bool(value)
        if hint is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, bool) or not float(number).is_integer():
                raise ValueError  # never truncate 2.5 to 2
            return int(number)
        if hint is float:
            return float(value)
        if hint is str:
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"invalid {name}={value!r}: expected {getattr(hint, '__name__', hint)}"
        ) from None
    return value


def load_file(path: str | pathlib.Path) -> dict[str, Any]:
    """Loads a flat config mapping from a `.toml`, `.json` or `.yaml` file."""
    path = pathlib.Path(path)
    text = path.read_text()
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:  # pragma: no cover - depends on environment
            raise ConfigError(f"{path}: reading YAML needs PyYAML (pip install pyyaml)") from err
        data = yaml.safe_load(text)
    else:
        raise ConfigError(
            f"config file {path}: unsupported suffix {path.suffix!r}; use .toml, .json or .yaml"
        )
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {path}: expected a mapping of field = value")
    return dict(data)


def field_diffs(
    saved: Mapping[str, Any], now: Mapping[str, Any], ignore: Sequence[str] = ()
) -> list[str]:
    """`"key: saved X, now Y"` for each field of `now` (a `to_dict`) that differs from
    `saved` (as read back from JSON), except those in `ignore`."""
    return [
        f"{key}: saved {saved.get(key)!r}, now {value!r}"
        for key, value in now.items()
        if key not in ignore and json.loads(json.dumps(value)) != saved.get(key)
    ]


def to_dict(config: Any) -> dict[str, Any]:
    """JSON-friendly dict of a config dataclass."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


# ----------------------------------------------------------------------------- sweeps
def parse_sweep(
    specs: Sequence[str] | Mapping[str, Sequence[Any]] | None,
) -> dict[str, list[float]]:
    """Parses `["lr=1e-3,3e-4", "ent_coef=0,0.01"]` into `{"lr": [...], ...}`."""
    if not specs:
        return {}
    if isinstance(specs, Mapping):
        return {name: _sweep_values(name, values) for name, values in specs.items()}
    grid: dict[str, list[float]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not values:
            raise ConfigError(f"invalid sweep {spec!r}: expected name=v1,v2,...")
        name = name.strip()
        if name in grid:
            raise ConfigError(
                f"invalid sweep {spec!r}: {name!r} is swept twice; give all its values once, "
                f"as {name}=v1,v2,..."
            )
        try:
            grid[name] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"invalid sweep {spec!r}: values must be numbers") from None
    return grid


def _sweep_values(name: str, values: Any) -> list[float]:
    """One entry of a sweep given as a mapping: a list of numbers; a single value or a
    non-number is a `ConfigError` saying what to give instead."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ConfigError(
            f"invalid sweep {{{name!r}: {values!r}}}: a sweep takes a list of values, "
            f"e.g. {{{name!r}: [{values!r}]}}; give a single value as {name}={values!r} instead"
        )
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise ConfigError(
            f"invalid sweep {{{name!r}: {values!r}}}: values must be numbers"
        ) from None


def expand_grid(grid: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Cartesian product of a sweep grid, in a stable order (last name fastest)."""
    if not grid:
        return [{}]
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]


def make_hyperparams_class(name: str, fields: Sequence[str]) -> type:
    """A `flax.struct` dataclass with one float32 leaf per sweepable field."""
    namespace = {"__annotations__": {f: Any for f in fields}}
    return struct.dataclass(type(name, (), namespace))


def hyperparams_from(config: Any, cls: type, fields: Sequence[str]) -> Any:
    return cls(**{f: jnp.asarray(getattr(config, f), jnp.float32) for f in fields})


def is_finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


ValidateFn = Callable[[Any], None]


_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "resp.")


def first_sentence(text: str) -> str:
    """The first sentence of `text`'s first paragraph (its lines joined): up to the first
    period that is followed by white space or the end, outside parentheses and brackets
    and not ending an abbreviation (`e.g.`); the whole paragraph when there is none.

    A `--help` line cut at a line break or inside "(...)" reads as an unfinished thought;
    a first sentence is what a docstring's author wrote to stand alone."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    depth = 0
    for i, char in enumerate(paragraph):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(0, depth - 1)
        elif char == "." and depth == 0:
            end = i + 1
            if end < len(paragraph) and not paragraph[end].isspace():
                continue  # a decimal, a module path, a file suffix
            if paragraph[:end].lower().endswith(_ABBREVIATIONS):
                continue
            return paragraph[:end]
    return paragraph


def field_docs(config_cls: type) -> dict[str, str]:
    """The first sentence of each field's docstring (a string right after the field), by
    name (`first_sentence`).

    Config dataclasses document each field with such a string; the CLI's `--help`
    reads them from here, so the help text and the code cannot drift apart.
    """
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):  # no source (e.g. defined in a REPL)
            continue
        body = tree.body[0].body
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = first_sentence(inspect.cleandoc(nxt.value.value))
    return docs


def check_same_tree(name: str, expected: Any, given: Any) -> None:
    """Raises `ConfigError` unless `given` has exactly the structure, shapes and dtypes of
    `expected` (e.g. warm-start parameters against `jax.eval_shape` of a network's init)."""
    spec = lambda t: jax.tree.map(lambda x: (tuple(x.shape), str(x.dtype)), t)  # noqa: E731
    if jax.tree.structure(expected) != jax.tree.structure(given) or spec(expected) != spec(given):
        raise ConfigError(
            f"invalid {name}: the given parameters do not match this config's network "
            f"(expected {spec(expected)}, got {spec(given)})"
        )
