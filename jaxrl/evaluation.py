"""Evaluating trained policies and restoring runs from their run directory.

`load_run` rebuilds any run's algorithm from its `config.json` (through the
registry) and restores its newest checkpoint. `evaluate_episodes` / `evaluate` run
fresh environment episodes with an `EnvironmentAlgorithm`'s `act` (the loop itself
is `jaxrl.episodes.run_episodes`, which the contract's default `evaluate` uses too);
algorithms without an environment (SFT, GRPO) define `evaluate` themselves.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training import driver
from jaxrl.training.checkpoint import Checkpointer
from jaxrl.training.contract import Algorithm, evaluate_policy


def evaluate_episodes(
    algo: Algorithm,
    state: Any,
    key: jax.Array,
    num_episodes: int = 10,
    deterministic: bool = True,
) -> dict[str, Any]:
    """Per agent, the returns of `num_episodes` fresh episodes: `{"returns": (agents, n)}`.

    `algo` must be an `EnvironmentAlgorithm` (a `TypeError` names what it lacks);
    `state` is a stacked training state (leading agent axis). See
    `jaxrl.episodes.run_episodes` for how episodes run.
    """
    return {"returns": evaluate_policy(algo, state, key, num_episodes, deterministic)}


def evaluate(
    algo: Algorithm, state: Any, key: jax.Array, num_episodes: int = 10, deterministic: bool = True
) -> np.ndarray:
    """Episode returns per agent, shape (agents, num_episodes) (control algorithms)."""
    return evaluate_policy(algo, state, key, num_episodes, deterministic)


def read_run(run_dir: str | pathlib.Path) -> tuple[dict[str, Any], algorithms.Entry]:
    """A run directory's resolved config (`config.json`) and its algorithm's registry
    entry, without building anything: what a command checks its flags against before
    any work."""
    run_dir = pathlib.Path(run_dir)
    config_path = run_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a jaxrl run directory (no config.json)")
    resolved = json.loads(config_path.read_text())
    return resolved, algorithms.get(resolved["algorithm"])


def load_run(run_dir: str | pathlib.Path) -> tuple[Any, Any, dict[str, Any]]:
    """Rebuilds the algorithm of a run directory and restores its latest checkpoint.

    Returns `(algo, state, resolved_config)`; the state has a leading agent axis.
    """
    run_dir = pathlib.Path(run_dir)
    resolved, entry = read_run(run_dir)
    algo = entry.make(cfg.replace(entry.Config(), **resolved["config"]).validate())
    run = driver.RunConfig(
        num_seeds=resolved["run"]["num_seeds"],
        sweep=cfg.parse_sweep(resolved["run"].get("sweep") or {}),
    )
    agents = driver.make_agents(algo, run)
    mesh = algo.make_mesh(None)
    target, _ = driver.initial_state(algo, agents, mesh, algo.load_params())
    # Read-only: the run may still be training (its unfinished save must survive).
    checkpointer = Checkpointer(run_dir / "checkpoints", read_only=True)
    try:
        restored = checkpointer.restore_latest(driver.checkpointed_fields(algo, target))
    finally:
        checkpointer.close()
    if restored is None:
        raise FileNotFoundError(f"{run_dir}: no intact checkpoint to evaluate")
    return algo, target.replace(**restored[1]), resolved
