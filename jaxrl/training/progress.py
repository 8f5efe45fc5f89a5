"""A progress bar with environment steps per second and recent return (tqdm)."""

from __future__ import annotations

from typing import Any

import numpy as np


class Progress:
    """Thin wrapper over tqdm that tolerates being disabled."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True):
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                smoothing=0.3,
            )

    def update(self, steps: int, row: dict[str, Any]) -> None:
        if self._bar is None:
            return
        returns = [r for r in row.get("episode_return", []) if r is not None]
        postfix = {"sps": f"{row['steps_per_second']:.3g}"}
        if returns:
            postfix["return"] = f"{np.mean(returns):.1f}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(steps)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
