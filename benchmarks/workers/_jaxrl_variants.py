"""Candidate optimisations of jaxrl's PPO rollout, measured by ppo_profile.py / ppo_throughput.py.

`make_variant(algo, name)` returns `algo` itself for "base", otherwise a copy
of it whose class overrides `_rollout`. Nothing in the repository is edited.
"""

from __future__ import annotations


def make_variant(algo, name: str):
    if name == "base":
        return algo
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known: base, {', '.join(VARIANTS)}")
    cls = type(f"PPO_{name}", (type(algo),), {"_rollout": VARIANTS[name]})
    new = object.__new__(cls)
    new.__dict__.update(algo.__dict__)
    return new


VARIANTS = {}
