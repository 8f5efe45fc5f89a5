"""Environment registry: `make`, `register`, `registered`.

Ids are strings such as `"CartPole-v1"`. Prefixes reach other libraries
through adapters, imported lazily so they stay optional dependencies:

* `"gymnax:<id>"`: any gymnax environment (`jaxrl.envs.adapters.gymnax`).
* `"brax:<name>"`: any Brax environment, when brax is installed
  (`jaxrl.envs.adapters.brax`).
* The JAX environment suites, each an optional extra (`pip install 'jaxrl[craftax]'`):
  `"craftax:<id>"`, `"jumanji:<id>"`, `"xminigrid:<id>"`, `"pgx:<id>"`,
  `"playground:<id>"` (`jaxrl.envs.adapters.<suite>`; what each changes is in its
  module docstring). `suite_ids()` lists the ids of those installed (`jaxrl envs`).
* `"jaxmarl:<id>"`: any JaxMARL environment, multi-agent, when jaxmarl is installed
  (`jaxrl.envs.multiagent.jaxmarl`).

Multi-agent environments (`envs/multiagent/`) share the registry, marked
`multi_agent=True`: `registered()` lists the single-agent ids (what single-agent
algorithms and the conformance tests take), `registered(multi_agent=True)` the others.

`make(env_id, **overrides)` routes each override either to the environment's
params (a pytree field, e.g. `gravity=9.0`) or to its constructor (static
structure that changes shapes, e.g. `memory_length=20`). Unknown names fail
with the list of allowed ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from .core import Environment, EnvParams

__all__ = [
    "make",
    "register",
    "registered",
    "is_multi_agent",
    "suite_ids",
    "installed_suites",
    "EnvSpec",
]

_PREFIX_ADAPTERS = {
    "gymnax": "jaxrl.envs.adapters.gymnax",
    "brax": "jaxrl.envs.adapters.brax",
    "craftax": "jaxrl.envs.adapters.craftax",
    "jumanji": "jaxrl.envs.adapters.jumanji",
    "xminigrid": "jaxrl.envs.adapters.xminigrid",
    "pgx": "jaxrl.envs.adapters.pgx",
    "playground": "jaxrl.envs.adapters.playground",
    "jaxmarl": "jaxrl.envs.multiagent.jaxmarl",
}
# Prefixes whose environments are multi-agent (`envs/multiagent/core.py`).
_MULTI_AGENT_PREFIXES = ("jaxmarl",)

# The suites whose adapters list their ids (`suite_ids`), in `jaxrl envs` order.
SUITES = ("craftax", "jumanji", "xminigrid", "pgx", "playground")


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """How to build one registered environment.

    Attributes:
        env_id: The id passed to `make`.
        entry_point: A callable returning an `Environment`, or a
            `"module:attribute"` string imported on first use.
        kwargs: Constructor keyword arguments fixed by this id.
        param_overrides: Param fields fixed by this id (on top of `default_params`).
        description: One line shown by `jaxrl envs`.
        multi_agent: A `MultiAgentEnvironment` (stacked per-agent arrays), trained by
            the multi-agent algorithms (ippo, mappo, pqn-vdn).
    """

    env_id: str
    entry_point: Callable[..., Environment] | str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    param_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""
    multi_agent: bool = False

    def load(self) -> Callable[..., Environment]:
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        return getattr(importlib.import_module(module_name), attr)


_REGISTRY: dict[str, EnvSpec] = {}


def register(
    env_id: str,
    entry_point: Callable[..., Environment] | str,
    *,
    kwargs: dict[str, Any] | None = None,
    param_overrides: dict[str, Any] | None = None,
    description: str = "",
    overwrite: bool = False,
    multi_agent: bool = False,
) -> EnvSpec:
    """Registers an environment under `env_id` so `make(env_id)` builds it; `multi_agent`
    marks a `MultiAgentEnvironment` (listed by `registered(multi_agent=True)`)."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"register: env_id must be a non-empty string, got {env_id!r}")
    if ":" in env_id:
        raise ValueError(
            f"register: env_id {env_id!r} must not contain ':' (reserved for adapter prefixes "
            f"{sorted(_PREFIX_ADAPTERS)})"
        )
    if env_id in _REGISTRY and not overwrite:
        raise ValueError(f"register: {env_id!r} is already registered (pass overwrite=True)")
    spec = EnvSpec(
        env_id,
        entry_point,
        dict(kwargs or {}),
        dict(param_overrides or {}),
        description,
        multi_agent,
    )
    _REGISTRY[env_id] = spec
    return spec


def registered(multi_agent: bool = False) -> list[str]:
    """Ids of the registered single-agent environments (with `multi_agent`: of the
    multi-agent ones), sorted."""
    return sorted(i for i, s in _REGISTRY.items() if s.multi_agent == multi_agent)


def is_multi_agent(env_id: str) -> bool:
    """Whether `env_id` names a multi-agent environment (registered as one, or behind a
    multi-agent adapter prefix such as `jaxmarl:`); unknown ids raise like `make`."""
    prefix, sep, _ = env_id.partition(":")
    if sep:
        return prefix in _MULTI_AGENT_PREFIXES
    return spec(env_id).multi_agent


def installed_suites() -> list[str]:
    """The environment suites (`SUITES`) whose package is installed, in `SUITES` order."""
    from .adapters._suite import installed

    return [
        suite
        for suite in SUITES
        if installed(importlib.import_module(_PREFIX_ADAPTERS[suite]).PACKAGE)
    ]


def suite_ids(suite: str) -> list[str]:
    """The ids of an installed suite, prefixed (`"craftax:Craftax-Classic-Symbolic-v1"`).

    A suite that is not installed raises the adapter's one-line `ImportError`.
    """
    if suite not in SUITES:
        raise ValueError(f"Unknown environment suite {suite!r}; suites: {', '.join(SUITES)}")
    adapter = importlib.import_module(_PREFIX_ADAPTERS[suite])
    return [f"{suite}:{env_id}" for env_id in adapter.ids()]


def spec(env_id: str) -> EnvSpec:
    """The `EnvSpec` of a registered id (raises like `make` for unknown ids)."""
    if env_id not in _REGISTRY:
        raise ValueError(_unknown_id_message(env_id))
    return _REGISTRY[env_id]


def make(env_id: str, **overrides: Any) -> tuple[Environment, EnvParams]:
    """Builds a registered environment: returns `(env, env_params)`.

    Keyword overrides set either param fields or constructor arguments (see the
    module docstring). Params are validated here, so a bad value fails on the
    host with the field named.
    """
    prefix, sep, rest = env_id.partition(":")
    if sep:
        if prefix not in _PREFIX_ADAPTERS:
            raise ValueError(
                f"Unknown environment prefix {prefix!r} in {env_id!r}; "
                f"known prefixes: {sorted(_PREFIX_ADAPTERS)}"
            )
        adapter = importlib.import_module(_PREFIX_ADAPTERS[prefix])
        return adapter.make(rest, **overrides)
    env_spec = spec(env_id)
    factory = env_spec.load()
    ctor_names = _constructor_kwargs(factory)
    ctor_kwargs = dict(env_spec.kwargs)
    param_values = dict(env_spec.param_overrides)
    # Build once with the fixed constructor kwargs to learn the params fields.
    pending_ctor = {k: v for k, v in overrides.items() if k in ctor_names}
    env = factory(**{**ctor_kwargs, **pending_ctor})
    params = env.default_params
    field_names = {f.name for f in dataclasses.fields(params)}
    unknown = [k for k in overrides if k not in ctor_names and k not in field_names]
    if unknown:
        raise ValueError(
            f"make({env_id!r}): unknown override(s) {unknown}; "
            f"param fields: {sorted(field_names)}; constructor arguments: {sorted(ctor_names)}"
        )
    param_values.update({k: v for k, v in overrides.items() if k in field_names})
    if param_values:
        params = params.replace(**param_values)
    params.validate()
    return env, params


def _constructor_kwargs(factory: Callable[..., Any]) -> set[str]:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return set()
    return {
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self"
    }


def _unknown_id_message(env_id: str) -> str:
    ids = registered() + registered(multi_agent=True)
    close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.5)
    lowered = [i for i in ids if env_id.lower() in i.lower() and i not in close]
    suggestions = close + lowered[:3]
    hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
    return (
        f"Unknown environment id {env_id!r}.{hint} Registered ids: {', '.join(ids)}. "
        f"Other libraries: prefix an id with one of {[p + ':' for p in sorted(_PREFIX_ADAPTERS)]}."
    )
