"""How far a run is: a progress bar in steps per agent, with throughput and recent
return (tqdm), and the clocks that time compilation and training."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class Progress:
    """Thin wrapper over tqdm that tolerates being disabled."""

    def __init__(
        self,
        total: int,
        initial: int = 0,
        enabled: bool = True,
        unit: str = "env_steps",
        num_agents: int = 1,
    ):
        """`total` and `initial` count `unit`s per agent (what `--total-steps` means);
        the description says how many agents train side by side."""
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=f"{num_agents} agent{'s' if num_agents > 1 else ''}",
                unit=unit.rstrip("s").replace("_", " "),
                unit_scale=True,
                dynamic_ncols=True,
                smoothing=0.3,
            )

    def update(self, steps: int, row: dict[str, Any]) -> None:
        if self._bar is None:
            return
        returns = [r for r in row.get("episode_return", []) if r is not None]
        postfix = {"all agents/s": f"{row['steps_per_second']:.3g}"}
        if returns:
            postfix["return"] = f"{np.mean(returns):.1f}"
        elif row.get("loss"):
            postfix["loss"] = f"{np.mean(row['loss']):.4g}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(steps)

    def stopped_early(self) -> None:
        """Marks the bar of a run its algorithm ended before the budget, so that a bar
        left at 22% says why it stopped there."""
        if self._bar is not None:
            self._bar.set_description_str(f"{self._bar.desc}, stopped early", refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class Clock:
    """Accumulates wall and process-CPU seconds over `with` blocks."""

    def __init__(self) -> None:
        self.wall = self.cpu = self.last = 0.0

    def __enter__(self) -> Clock:
        self._start = (time.perf_counter(), time.process_time())
        return self

    def __exit__(self, *exc: object) -> None:
        self.last = time.perf_counter() - self._start[0]
        self.wall += self.last
        self.cpu += time.process_time() - self._start[1]

    def discount(self, wall: float, cpu: float) -> None:
        """Removes time another clock counted inside this clock's last block."""
        self.wall -= wall
        self.cpu -= cpu
        self.last -= wall
