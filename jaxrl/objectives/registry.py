"""A named set of interchangeable functions, chosen by a config value.

Each kind of objective (advantage estimators, policy losses, loss aggregations, KL
estimators) is a `Registry` whose keys are exactly the names users pass (config values,
CLI flags). Config validation, the CLI's `choices` and error messages all read the keys
from here, so adding an entry is the one edit that makes a name valid everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from jaxrl.config import ConfigError

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Read-only `{name: entry}` for the config field `field`.

    `registry[name]` raises `ConfigError("invalid <field>=<name>: must be one of [...]")`
    for an unknown name, so a lookup is also the validation.
    """

    def __init__(self, field: str, entries: Mapping[str, T]):
        self.field = field
        self._entries = dict(entries)

    def names(self) -> tuple[str, ...]:
        """The accepted names, in registration order."""
        return tuple(self._entries)

    def check(self, name: object) -> None:
        """Raises `ConfigError` naming the field and the allowed names unless `name` is one."""
        if not isinstance(name, str) or name not in self._entries:
            allowed = list(self._entries)
            raise ConfigError(f"invalid {self.field}={name!r}: must be one of {allowed}")

    def only(self, *names: str) -> Registry[T]:
        """The registry restricted to `names` (for an algorithm that accepts a subset)."""
        for name in names:
            self.check(name)
        return Registry(self.field, {name: self._entries[name] for name in names})

    def __getitem__(self, name: str) -> T:
        self.check(name)
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str, default: T | None = None) -> T | None:
        return self._entries.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.field!r}, {list(self._entries)})"
