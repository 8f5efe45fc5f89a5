"""Evaluating trained policies and restoring runs from their run directory."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training.checkpoint import Checkpointer
from jaxrl.training.driver import init_agents


def evaluate(
    algo: Any, state: Any, key: jax.Array, num_episodes: int = 10, deterministic: bool = True
) -> np.ndarray:
    """Returns of `num_episodes` fresh episodes per agent, shape (agents, num_episodes).

    `state` is a vmapped training state (leading agent axis). Each episode runs
    in its own environment copy until its first end (termination or time
    limit); the policy acts greedily unless `deterministic=False`.
    """
    env, env_params = algo.env, algo.env_params
    max_steps = int(env_params.max_steps_in_episode)

    def one_agent(agent_state, key):
        k_reset, k_run = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_reset, num_episodes), env_params
        )
        carry = (
            jnp.zeros((num_episodes, algo.config.rnn_hidden_size), jnp.float32)
            if algo.config.recurrent
            else None
        )
        zeros = jnp.zeros((num_episodes,), jnp.float32)
        init = (
            obs,
            env_state,
            carry,
            jnp.ones((num_episodes,), bool),
            zeros,
            jnp.zeros((num_episodes,), bool),
        )

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
    return np.asarray(jax.jit(jax.vmap(one_agent))(state, keys))


def load_run(run_dir: str | pathlib.Path) -> tuple[Any, Any, dict[str, Any]]:
    """Rebuilds the algorithm of a run directory and restores its latest checkpoint.

    Returns `(algo, state, resolved_config)`.
    """
    run_dir = pathlib.Path(run_dir)
    config_path = run_dir / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{run_dir} is not a jaxrl run directory (no config.json)")
    resolved = json.loads(config_path.read_text())
    module = algorithms.get(resolved["algorithm"])
    config = cfg.replace(module.Config(), **resolved["config"]).validate()
    algo = module.make(config)
    run = resolved["run"]
    grid = cfg.expand_grid(cfg.parse_sweep(run.get("sweep") or {}))
    num_agents = len(grid) * run["num_seeds"]
    keys = jnp.stack([jax.random.key(0)] * num_agents)
    hparams = jax.tree.map(
        lambda *xs: jnp.stack(xs),
        *[algo.hyperparams(**p) for p in grid for _ in range(run["num_seeds"])],
    )
    target = jax.jit(functools.partial(init_agents, algo))(keys, hparams)
    # Read-only: the run may still be training (its unfinished save must survive).
    checkpointer = Checkpointer(run_dir / "checkpoints", read_only=True)
    try:
        restored = checkpointer.restore_latest(target)
    finally:
        checkpointer.close()
    if restored is None:
        raise FileNotFoundError(f"{run_dir}: no intact checkpoint to evaluate")
    return algo, restored[1], resolved
