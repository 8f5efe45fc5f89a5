"""Evaluating trained policies and restoring runs from their run directory.

`evaluate_episodes` is the default `Algorithm.evaluate` hook for control
algorithms: fresh environment episodes with the policy's `act`. Algorithms
without an environment (SFT, GRPO) override `evaluate` with their own measure
(held-out accuracy). `load_run` rebuilds any run's algorithm from its
`config.json` (through the registry) and restores its newest checkpoint.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training import driver
from jaxrl.training.checkpoint import Checkpointer
from jaxrl.training.contract import Algorithm


def evaluate_episodes(
    algo: Algorithm,
    state: Any,
    key: jax.Array,
    num_episodes: int = 10,
    deterministic: bool = True,
) -> dict[str, Any]:
    """Per agent, the returns of `num_episodes` fresh episodes: `{"returns": (agents, n)}`.

    `state` is a stacked training state (leading agent axis). Each episode runs
    in its own environment copy until its first end (termination or time
    limit), starting from `algo.eval_carry` (a recurrent policy's initial
    state); the policy acts greedily unless `deterministic=False`.
    """
    env, env_params = algo.env, algo.env_params
    max_steps = int(env_params.max_steps_in_episode)

    def one_agent(agent_state, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, num_episodes), env_params
        )
        zeros = jnp.zeros((num_episodes,), jnp.float32)
        finished = jnp.zeros((num_episodes,), bool)
        init = (obs, env_state, algo.eval_carry(num_episodes), ~finished, zeros, finished)

        def step(c, key):
            obs, env_state, carry, reset, total, finished = c
            k_act, k_env = jax.random.split(key)
            action, carry = algo.act(agent_state, obs, carry, reset, k_act, deterministic)
            obs, env_state, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_env, num_episodes), env_state, action, env_params
            )
            total = total + jnp.where(finished, 0.0, reward)
            done = jnp.logical_or(term, trunc)
            return (obs, env_state, carry, done, total, finished | done), None

        final, _ = jax.lax.scan(step, init, jax.random.split(k_run, max_steps))
        return final[4]

    num_agents = jax.tree.leaves(state.params)[0].shape[0]
    keys = jax.random.split(key, num_agents)
    return {"returns": np.asarray(jax.jit(jax.vmap(one_agent))(state, keys))}


def evaluate(
    algo: Algorithm, state: Any, key: jax.Array, num_episodes: int = 10, deterministic: bool = True
) -> np.ndarray:
    """Episode returns per agent, shape (agents, num_episodes) (control algorithms)."""
    return evaluate_episodes(algo, state, key, num_episodes, deterministic)["returns"]


def load_run(run_dir: str | pathlib.Path) -> tuple[Any, Any, dict[str, Any]]:
    """Rebuilds the algorithm of a run directory and restores its latest checkpoint.

    Returns `(algo, state, resolved_config)`; the state has a leading agent axis.
    """
    run_dir = pathlib.Path(run_dir)
    config_path = run_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a jaxrl run directory (no config.json)")
    resolved = json.loads(config_path.read_text())
    module = algorithms.get(resolved["algorithm"])
    algo = module.make(cfg.replace(module.Config(), **resolved["config"]).validate())
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
