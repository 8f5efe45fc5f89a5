"""Deprecated: GRPO's losses moved to `jaxrl.objectives`, shared by the GRPO family and
PPO-LM (advantage estimators, policy losses, loss aggregations, KL estimators, each in
a registry keyed by the names users pass). `jaxrl.algorithms.grpo.losses.X` still
resolves to `jaxrl.objectives.X`, with a `DeprecationWarning`; GRPO's own learning step
is `grpo/learning.py`."""

from __future__ import annotations

import warnings
from typing import Any

from jaxrl import objectives


def __getattr__(name: str) -> Any:
    value = getattr(objectives, name)  # AttributeError for names that never existed
    warnings.warn(
        f"jaxrl.algorithms.grpo.losses.{name} moved to jaxrl.objectives.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
