"""The compiled programs of an update, and the steppers that run them chunk by chunk.

`lower_phase` is the one place that builds a phase's program: the function over the
agent axis (`vmap`, or `lax.map` / `shard_map` for `agent_execution="map"`; for a
fused step a `lax.scan` of K updates), `jax.jit` with the state's shardings in and
out and the state donated; the staged phases are traced, lowered and called under
`jax.set_mesh(mesh)`, so that algorithms read the mesh from JAX's context. The
driver's steppers compile what it returns; `jaxrl plan` compiles the same thing for a
TPU slice it does not have.

* `FusedStepper`: K `update`s as one compiled program per chunk length.
* `StagedStepper`: K x ([host `prepare` ->] jit `collect` [-> host `respond` -> jit
  `collect` ...] -> host `process` -> jit `learn`).
* `AsyncStagedStepper` (`async_stages.py`): the same phases with the sampler on its own
  devices, K policy versions behind the learner.

What a chunk is (its length) is decided in `run_config.py`; what happens between
chunks (logging, checkpoints, signals) in `loop.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import config as cfg

from . import memory
from . import mesh as mesh_lib
from .contract import Algorithm
from .progress import Clock
from .run_config import RunConfig


# ---------------------------------------------------------------------------- agents
def agents_fn(fn: Callable, num_agents: int) -> Callable:
    """`fn` over the leading agent axis of all its arguments: `vmap` for several
    agents, a plain call for one. On CPU, XLA's kernels for batched matmuls with a
    batch of one are slower than the plain ones, so a single agent's axis is dropped
    inside the program and restored around it."""
    if num_agents > 1:
        return jax.vmap(fn)

    def single(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
        return jax.tree.map(lambda x: x[None], out)

    return single


def agents_update(algo: Algorithm, num_agents: int) -> Callable:
    """The fused `update` over the agent axis (also used by the benchmark workers)."""
    return agents_fn(algo.update, num_agents)


def scan_updates(
    algo: Algorithm, num_agents: int, length: int, execution: str = "vmap"
) -> Callable:
    """`length` fused updates of every agent; returns `(state, metrics)` with metrics
    `(length, agents, ...)`.

    `execution="vmap"`: one `lax.scan` whose body is the update vmapped over agents.
    `execution="map"`: `lax.map` over agents of each agent's own `lax.scan` of
    `length` updates (`RunConfig.agent_execution`): every agent runs exactly the
    program of a one-agent run, and its `lax.cond`s stay branches (under `vmap` a
    per-agent predicate turns them into selects that compute both sides).

    A single agent's axis is dropped once around the whole scan, not inside every
    update: dropping and restoring it per update (`agents_update` in the scan body)
    would copy the loop-carried state, replay buffer included, at every step."""

    def one_agent(state):
        return jax.lax.scan(lambda s, _: algo.update(s), state, None, length=length)

    if num_agents == 1:

        def run(state):
            one, metrics = one_agent(jax.tree.map(lambda x: x[0], state))
            return jax.tree.map(lambda x: x[None], one), jax.tree.map(lambda x: x[:, None], metrics)

        return run
    if execution == "map":

        def run(state):
            state, metrics = jax.lax.map(one_agent, state)  # metrics (agents, length, ...)
            return state, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics)

        return run
    update = agents_update(algo, num_agents)
    return lambda state: jax.lax.scan(lambda s, _: update(s), state, None, length=length)


def chunk_program(
    algo: Algorithm,
    num_agents: int,
    length: int,
    execution: str,
    mesh: jax.sharding.Mesh,
    shardings: Any,
) -> Callable:
    """`scan_updates` as the function to jit under `mesh`.

    A `lax.map` over an agent axis sharded over the devices would make XLA gather
    the agents (the loop's dynamic slices cross the shards), so with
    `execution="map"` and agents sharded, each device maps over its own agents
    inside `shard_map`; the agents never communicate, so nothing else changes.
    Otherwise (one device, or agents not sharded) XLA partitions the loop itself.
    """
    specs = jax.tree.map(lambda s: s.spec, shardings)
    agents_sharded = mesh.devices.size > 1 and all(
        len(spec) > 0 and spec[0] == mesh_lib.DATA_AXIS for spec in jax.tree.leaves(specs)
    )
    if execution != "map" or num_agents == 1 or not agents_sharded:
        return scan_updates(algo, num_agents, length, execution)
    per_device = scan_updates(algo, num_agents // mesh.devices.size, length, execution)
    metrics_spec = jax.sharding.PartitionSpec(None, mesh_lib.DATA_AXIS)  # (length, agents)
    # check_vma=False: the per-device program has no collectives, so shard_map's
    # tracking of which values vary over devices only gets in the way (it would make
    # every algorithm's `lax.cond` cast constant branch outputs to "varying").
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(specs,), out_specs=(specs, metrics_spec), check_vma=False
    )


# ---------------------------------------------------------------------------- programs
STAGED_PROGRAMS = ("collect", "learn", "async_collect", "async_learn")
"""The jitted methods of a staged algorithm: its `collect` and `learn`, and in
asynchronous mode (`async_stages.py`) the sampler's and the learner's."""


class PhaseProgram(NamedTuple):
    """One phase's program, traced and lowered for one set of argument shapes."""

    traced: jax.stages.Traced
    """Its jaxpr (`traced.jaxpr`): `jaxrl plan` weights its loops' FLOPs."""
    lowered: jax.stages.Lowered
    """`lowered.compile()` is the executable the driver calls."""


def lower_phase(
    algo: Algorithm,
    phase: str,
    args: tuple[Any, ...],
    *,
    num_agents: int,
    mesh: jax.sharding.Mesh,
    shardings: Any,
    input_shardings: tuple[Any, ...] = (),
    length: int = 1,
    execution: str = "vmap",
) -> PhaseProgram:
    """The program of `phase` (`"update"` or one of `STAGED_PROGRAMS`) for abstract `args`
    (the state, then the phase's inputs, as sharded `jax.ShapeDtypeStruct`s).

    `(state, *inputs) -> (state, outputs)` jitted with the state's `shardings` in and
    out (the state donated), the inputs' `input_shardings`, and the outputs (metrics,
    collected data) replicated. `"update"` is a chunk: `length` fused updates in one
    `lax.scan` (`chunk_program`, `execution` saying how agents run); `"collect"` and
    `"learn"` are one call of the algorithm's method over the agents (`agents_fn`).
    A staged phase is traced and lowered under `jax.set_mesh(mesh)`: its algorithm reads
    the mesh from JAX's context (`jax.sharding.get_abstract_mesh()`), never from `self`
    (`_mesh_context` says why a fused chunk is not).
    """
    if phase == "update":
        fn = chunk_program(algo, num_agents, length, execution, mesh, shardings)
    elif phase in STAGED_PROGRAMS:
        fn = agents_fn(getattr(algo, phase), num_agents)
    else:
        raise ValueError(f"invalid phase={phase!r}: one of {['update', *STAGED_PROGRAMS]}")
    program = jax.jit(
        fn,
        in_shardings=(shardings, *input_shardings),
        out_shardings=(shardings, mesh_lib.replicated(mesh)),
        donate_argnums=0,
    )
    with _mesh_context(phase, mesh):
        traced = program.trace(*args)
        return PhaseProgram(traced, traced.lower())


def _mesh_context(phase: str, mesh: jax.sharding.Mesh) -> contextlib.AbstractContextManager:
    """`jax.set_mesh(mesh)` for the staged phases, whose algorithms (the language models)
    read the mesh from JAX's context; nothing for a fused chunk.

    Why not for fused chunks too: no fused algorithm reads the mesh, and under JAX
    0.10.2 tracing inside `jax.set_mesh` lowers some programs differently. In
    DreamerV3's chunk, constants that nested jitted functions (`jax.nn.silu`) compute
    stay inside its scans' bodies instead of being passed in as loop-carried values
    (5 fewer carries); XLA compiles that program to one whose results differ, and the
    run's `params_fingerprint` changes (PPO's, SAC's and DQN's did not).
    """
    return contextlib.nullcontext() if phase == "update" else jax.set_mesh(mesh)


def host_batch_spec(
    algo: Algorithm, batch: Any, mesh: jax.sharding.Mesh, num_agents: int
) -> tuple[Any, Any]:
    """`(shardings, spec)` of a host batch (numpy, leading agent axis): its layout by
    `algo.batch_sharding` and its abstract values carrying that layout."""
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), batch)
    shardings = algo.batch_sharding(abstract, mesh, num_agents)
    spec = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
    )
    return shardings, spec


def abstract_state(state: Any) -> Any:
    """The abstract values (shape, dtype, sharding) of a placed state."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )


def _to_host(metrics: Any) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in metrics.items()}


def _shapes(tree: Any) -> Any:
    """The (shape, dtype) of every leaf of a host pytree, as a comparable pytree."""
    return jax.tree.map(lambda x: (tuple(np.shape(x)), str(np.asarray(x).dtype)), tree)


# ---------------------------------------------------------------------------- steppers
class FusedStepper:
    """K `update`s as one compiled program (`lax.scan`), one program per chunk length."""

    def __init__(
        self,
        algo: Algorithm,
        num_agents: int,
        mesh: jax.sharding.Mesh,
        shardings: Any,
        compile_clock: Clock,
        execution: str,
        check_memory: bool = False,
    ):
        self.algo, self.num_agents, self.mesh = algo, num_agents, mesh
        self.shardings, self.compile_clock, self.execution = shardings, compile_clock, execution
        self.check_memory = check_memory
        self.programs: dict[int, Any] = {}

    def compile(self, state: Any, length: int) -> None:
        """Compiles the program for chunks of `length` updates. A run needs at most two
        lengths (the chunk and, when the chunk does not divide the run, the tail)."""
        if length in self.programs:
            return
        with self.compile_clock:
            program = lower_phase(
                self.algo,
                "update",
                (abstract_state(state),),
                num_agents=self.num_agents,
                mesh=self.mesh,
                shardings=self.shardings,
                length=length,
                execution=self.execution,
            )
            compiled = program.lowered.compile()
        if self.check_memory:  # before it first runs
            memory.check_program(compiled, "update", list(self.mesh.devices.flat))
        self.programs[length] = compiled

    def run(self, state: Any, host_state: Any, length: int) -> tuple[Any, Any, dict]:
        self.compile(state, length)  # the tail of a run the chunk does not divide
        state, metrics = self.programs[length](state)
        return state, host_state, _to_host(metrics)  # host sync: (length, agents)


class StagedStepper:
    """K x ([host `prepare` ->] jit `collect` [-> host `respond` -> jit `collect` ...] ->
    host `process` -> jit `learn`); each jitted phase compiled once, for the shapes of
    the first inputs and batch (`prepare`, `respond` and `process` must keep them fixed).
    With `respond`, one update runs rounds of `collect` until `respond` returns None
    (at most `algo.max_rounds`): multi-turn episodes, all inside the update."""

    def __init__(
        self,
        algo: Algorithm,
        num_agents: int,
        mesh: jax.sharding.Mesh,
        shardings: Any,
        compile_clock: Clock,
        check_memory: bool = False,
    ):
        self.algo, self.num_agents, self.mesh = algo, num_agents, mesh
        self.shardings, self.compile_clock = shardings, compile_clock
        self.check_memory = check_memory
        self.phases = algo.phases
        self.collect_fn = self.learn_fn = self.batch_shardings = self.input_shardings = None
        self.input_shapes = None

    def _lower(self, phase: str, args: tuple[Any, ...], input_shardings: tuple[Any, ...]):
        return lower_phase(
            self.algo,
            phase,
            args,
            num_agents=self.num_agents,
            mesh=self.mesh,
            shardings=self.shardings,
            input_shardings=input_shardings,
        )

    def _compile_collect(self, state: Any, inputs: Any) -> None:
        """`collect(state)`, or `collect(state, inputs)` after a `prepare`."""
        with self.compile_clock:
            input_shardings, specs = (), (abstract_state(state),)
            if "prepare" in self.phases:
                self.input_shapes = _shapes(inputs)
                self.input_shardings, input_spec = host_batch_spec(
                    self.algo, inputs, self.mesh, self.num_agents
                )
                input_shardings, specs = (self.input_shardings,), (*specs, input_spec)
            compiled = self._lower("collect", specs, input_shardings).lowered.compile()
        self._check_memory(compiled, "collect")
        self.collect_fn = compiled

    def _compile_learn(self, state: Any, batch: Any) -> None:
        with self.compile_clock:
            self.batch_shardings, batch_spec = host_batch_spec(
                self.algo, batch, self.mesh, self.num_agents
            )
            specs = (abstract_state(state), batch_spec)
            compiled = self._lower("learn", specs, (self.batch_shardings,)).lowered.compile()
        self._check_memory(compiled, "learn")
        self.learn_fn = compiled

    def _check_memory(self, compiled: Any, phase: str) -> None:
        if self.check_memory:  # before it first runs
            memory.check_program(compiled, phase, list(self.mesh.devices.flat))

    def _collect(self, state: Any, inputs: tuple[Any, ...]) -> tuple[Any, Any]:
        """One `collect` round: `(state, collected)`, `collected` on the host."""
        if self.collect_fn is None:
            self._compile_collect(state, *inputs)
        if inputs:
            inputs = (jax.device_put(inputs[0], self.input_shardings),)
        with jax.set_mesh(self.mesh):
            state, collected = self.collect_fn(state, *inputs)
        return state, jax.tree.map(np.asarray, collected)  # host sync

    def _rounds(self, state: Any, collected: Any, host_state: Any) -> tuple[Any, Any, Any]:
        """`respond` -> `collect` rounds until `respond` returns None; the last output."""
        algo, rounds = self.algo, 1
        while True:
            inputs, host_state = algo.respond(collected, host_state)
            if inputs is None:
                return state, collected, host_state
            if rounds >= algo.max_rounds:
                raise RuntimeError(
                    f"{type(algo).__name__}.respond asked for round {rounds + 1} of an update "
                    f"whose max_rounds is {algo.max_rounds}; it must return None by then"
                )
            if _shapes(inputs) != self.input_shapes:
                raise ValueError(
                    f"{type(algo).__name__}.respond returned inputs {_shapes(inputs)}, but "
                    f"collect was compiled for prepare's {self.input_shapes}: every round "
                    "must keep the same shapes and dtypes"
                )
            state, collected = self._collect(state, (inputs,))
            rounds += 1

    def run(self, state: Any, host_state: Any, length: int) -> tuple[Any, Any, dict]:
        rows = []
        for _ in range(length):
            collected, inputs = None, ()
            if "prepare" in self.phases:
                inputs, host_state = self.algo.prepare(host_state)
                inputs = (inputs,)
            if "collect" in self.phases:
                state, collected = self._collect(state, inputs)
                if "respond" in self.phases:
                    state, collected, host_state = self._rounds(state, collected, host_state)
            batch, host_state, host_metrics = self.algo.process(collected, host_state)
            if self.learn_fn is None:
                self._compile_learn(state, batch)
            batch = jax.device_put(batch, self.batch_shardings)
            with jax.set_mesh(self.mesh):
                state, metrics = self.learn_fn(state, batch)
            row = _to_host(metrics)
            for name, value in host_metrics.items():
                row[name] = np.broadcast_to(np.asarray(value, np.float64), (self.num_agents,))
            rows.append(row)
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # (length, agents)
        return state, host_state, stacked


def check_agent_execution(algo: Algorithm, run: RunConfig) -> None:
    """Only fused algorithms map their agents: a staged one's phases run vmapped."""
    cfg.check(
        not (algo.staged and run.agent_execution != "vmap"),
        "agent_execution",
        run.agent_execution,
        f"'vmap' for {algo.name}, a staged algorithm (only fused algorithms map their agents)",
    )


def make_stepper(
    algo: Algorithm,
    num_agents: int,
    mesh: jax.sharding.Mesh,
    shardings: Any,
    compile_clock: Clock,
    execution: str,
    check_memory: bool = False,
) -> FusedStepper | StagedStepper:
    """The stepper for `algo.phases`: fused (`update`) or staged; with `check_memory`,
    each program is checked against the memory available before it first runs (an
    asynchronous staged algorithm gets `async_stages.AsyncStagedStepper` instead,
    which builds on this module: `loop.py` chooses)."""
    if algo.staged:
        return StagedStepper(algo, num_agents, mesh, shardings, compile_clock, check_memory)
    return FusedStepper(algo, num_agents, mesh, shardings, compile_clock, execution, check_memory)
