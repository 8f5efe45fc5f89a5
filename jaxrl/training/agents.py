"""The agents of a run (seeds x sweep points) and their initial state.

`make_agents` gives every agent its PRNG key and hyperparameters; `initial_state`
initialises them all, stacked on a leading agent axis and laid out on the mesh by
the algorithm's `state_sharding`. The driver, `jaxrl plan` (abstractly, through
`init_agents`) and `jaxrl.evaluation.load_run` (as the restore target) use them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl import config as cfg

from . import memory
from .contract import Algorithm
from .run_config import RunConfig

# `init` runs once per run, so its machine code need not be fast; on CPU, skipping
# LLVM's optimisations shortens its compile, which the orthogonal initialisers (a QR
# decomposition each) dominate. Numerically it is still deterministic, but not
# bit-identical to an optimised compile (e.g. fused multiply-adds differ).
_INIT_COMPILER_OPTIONS = {"cpu": {"xla_backend_optimization_level": 0}}


@dataclasses.dataclass(frozen=True)
class Agents:
    """The seeds x sweep points of a run, in the order of the state's agent axis."""

    grid: list[dict[str, float]]
    num_seeds: int
    keys: jax.Array  # (num_agents,) typed PRNG keys
    hparams: Any  # the algorithm's HyperParams, stacked (num_agents, ...)

    @property
    def num_agents(self) -> int:
        return len(self.grid) * self.num_seeds


def make_agents(algo: Algorithm, run: RunConfig) -> Agents:
    """Keys and hyperparameters of every agent. Invalid sweep values fail here,
    before anything is written (`algo.hyperparams` validates each point)."""
    grid = cfg.expand_grid(cfg.parse_sweep(run.sweep))
    points = [algo.hyperparams(**point) for point in grid]
    keys = jnp.stack(
        [
            jax.random.fold_in(jax.random.key(run.seed), i)
            for _ in grid
            for i in range(run.num_seeds)
        ]
    )
    hparams = jax.tree.map(
        lambda *xs: jnp.stack(xs), *[hp for hp in points for _ in range(run.num_seeds)]
    )
    return Agents(grid=grid, num_seeds=run.num_seeds, keys=keys, hparams=hparams)


def initial_state(
    algo: Algorithm,
    agents: Agents,
    mesh: jax.sharding.Mesh,
    params: Any = None,
    check_memory: bool = True,
) -> tuple[Any, Any]:
    """`(state, shardings)`: every agent's initial state, stacked and placed on `mesh`.

    Used by the driver and by `jaxrl.evaluation.load_run` (as the restore target). With
    `check_memory`, a state larger than the memory available is refused before it is
    allocated (`memory.check_state`).
    """
    abstract = jax.eval_shape(
        lambda k, h, p: init_agents(algo, k, h, p), agents.keys, agents.hparams, params
    )
    if check_memory:
        memory.check_state(abstract, list(mesh.devices.flat))
    shardings = algo.state_sharding(abstract, mesh, agents.num_agents)
    on_one_device = _init_on_one_device(mesh)
    init_fn = (
        jax.jit(
            lambda k, h, p: init_agents(algo, k, h, p),
            out_shardings=None if on_one_device else shardings,
        )
        .lower(agents.keys, agents.hparams, params)
        .compile(compiler_options=_INIT_COMPILER_OPTIONS.get(jax.default_backend()))
    )
    state = init_fn(agents.keys, agents.hparams, params)
    return (jax.device_put(state, shardings) if on_one_device else state), shardings


def _init_on_one_device(mesh: jax.sharding.Mesh) -> bool:
    """Whether `initial_state` computes on one device and then places the state: on
    several CPU devices of one process.

    There, jaxlib 0.10.2's LAPACK QR (every orthogonal initialiser) deadlocks when the
    devices run their init at once: each call splits its batch into tasks on XLA's
    CPU thread pool and blocks until they finish, from a thread of that same pool,
    until no thread is left to run them (SAC and TD3 on two devices hung;
    benchmarks/notes, "SAC and TD3 hung on several CPU devices"). CPU devices share the
    host's memory, so one of them holds the whole state as cheaply.
    """
    return jax.default_backend() == "cpu" and mesh.devices.size > 1 and jax.process_count() == 1


def init_agents(algo: Algorithm, keys: jax.Array, hparams: Any, params: Any = None) -> Any:
    """Initial states of all agents, stacked on a leading axis.

    `lax.map` (a loop) rather than `vmap`: initialisation runs once, and on
    jaxlib 0.10.2's CPU backend a vmapped GRU initialisation deadlocks at run
    time (reproduced with recurrent PPO; unbatched and looped inits are fine).
    A loop also makes each agent's initial state bit-identical to a run with
    a single seed. Warm-start `params` are shared by every agent.
    """
    return jax.lax.map(lambda args: algo.init(*args, params), (keys, hparams))
