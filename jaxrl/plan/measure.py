"""Compiling a plan's steps and measuring them: per-device memory by role, loop-aware
FLOPs and HBM traffic.

Every step is the driver's own program (`jaxrl.training.steppers.lower_phase`): a
fused algorithm's chunk of `update`s (the `lax.scan` of the driver's first chunk, the
agents run as `agent_execution` says), a staged one's `collect` (for LM RL: sampling
with the KV cache, the reference's log-probs, and re-scoring unless the loss does it)
and `learn`, whose batch comes from running the host `prepare`/`process` on dummy
data of the right shapes. The state and batches are abstract (`jax.eval_shape` of
the driver's `init`), so no parameter is allocated.

Per step and device: XLA's `memory_analysis()` (arguments, outputs, temporaries,
peak), split into parameters, optimizer state, frozen parameters, other state, inputs
and, where the step samples, the KV cache; FLOPs and HBM traffic from
`cost_analysis()`, scaled by the loop-aware matmul count of `cost.py`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Mapping
from concurrent import futures
from typing import Any

import jax
import numpy as np

from jaxrl.lm.model import KVCache
from jaxrl.training import async_stages, steppers
from jaxrl.training import mesh as mesh_lib
from jaxrl.training.agents import init_agents, make_agents
from jaxrl.training.contract import Algorithm
from jaxrl.training.run_config import RunConfig, chunk_length

from .cost import matmul_cost
from .report import Plan, StepPlan
from .topology import Target, check_divisible, check_model_dims


def plan_steps(
    algo: Algorithm,
    target: Target,
    run: RunConfig,
    pool: futures.Executor,
    *,
    compile_steps: bool = True,
) -> Plan:
    """The abstract state and steps of `algo` on `target`'s mesh; each step compiled on
    `pool` and measured (or, without `compile_steps`, only its state rows and KV cache).
    Its `steps` are futures until `resolve`."""
    agents = make_agents(algo, run)
    n = agents.num_agents
    sampler_mesh = None
    with mesh_lib.target_devices(target.devices):
        mesh = algo.make_mesh(run.num_devices)
        if algo.async_staleness:
            sampler_mesh = algo.sampler_mesh(run.num_devices)
    check_model_dims(algo, mesh)
    abstract = jax.eval_shape(
        lambda k, h: init_agents(algo, k, h, None), agents.keys, agents.hparams
    )
    shardings = algo.state_sharding(abstract, mesh, n)
    state = _with_shardings(abstract, shardings)
    steps = _Steps(algo, state, shardings, mesh, n, compile_steps, pool)
    moved = None
    if algo.phases == ("update",):
        length = chunk_length(run, algo.steps_per_update, algo.num_updates)
        steps.add("update", type(algo).update, (), length=length, execution=run.agent_execution)
    elif sampler_mesh is not None:
        _async_steps(algo, run, steps, sampler_mesh)
        moved = async_stages.weight_update_bytes(algo, abstract)
    else:
        _staged_steps(algo, run, steps)
    return Plan(
        algorithm=algo.name,
        target=target,
        mesh=dict(mesh.shape),
        num_agents=n,
        steps=steps.plans,
        model=_describe_model(algo),
        overrides={},
        sampler_mesh=None if sampler_mesh is None else dict(sampler_mesh.shape),
        weight_update_bytes=moved,
    )


def resolve(p: Plan) -> Plan:
    """Waits for the plan's compiles (its steps are futures until then)."""
    p.steps = [s.result() if isinstance(s, futures.Future) else s for s in p.steps]
    return p


class _Steps:
    """Compiles and measures the phases of an update as the driver's steppers build
    them (`steppers.lower_phase`: `(state, ...) -> (state, replicated outputs)`, the
    state donated).

    Tracing and lowering run here; compiling runs on `pool` (XLA compiles outside the
    GIL, so the next step traces while the previous one compiles); `plans` holds
    futures."""

    def __init__(self, algo, state, shardings, mesh, num_agents, compile_steps, pool):
        self.algo, self.state, self.shardings, self.mesh = algo, state, shardings, mesh
        self.num_agents, self.compile_steps, self.pool = num_agents, compile_steps, pool
        self.plans: list[Any] = []

    def add(
        self,
        phase: str,
        method: Any,
        inputs: tuple[Any, ...],
        kv_cache: int | None = None,
        *,
        length: int = 1,
        execution: str = "vmap",
    ) -> None:
        """Plans `phase` with abstract `inputs`. A fused chunk of `length` updates is
        reported per update (FLOPs and traffic divided by `length`); its memory is the
        chunk program's, which is what the device must hold."""
        description = _doc(method)
        if length > 1:
            description += f" ({length} per compiled chunk, as the driver runs it)"
        if not self.compile_steps:
            rows = {
                **_state_rows(self.algo, self.state),
                "step inputs (batch)": _tree_bytes(inputs),
            }
            if kv_cache:
                rows["KV cache"] = kv_cache
            done: futures.Future = futures.Future()
            done.set_result(
                StepPlan(phase, description, rows, sum(rows.values()), {}, 0.0, 0.0, 0.0, True, 0.0)
            )
            self.plans.append(done)
            return
        start = time.perf_counter()
        traced, lowered = steppers.lower_phase(
            self.algo,
            phase,
            (self.state, *inputs),
            num_agents=self.num_agents,
            mesh=self.mesh,
            shardings=self.shardings,
            input_shardings=tuple(_shardings_of(x) for x in inputs),
            length=length,
            execution=execution,
        )
        traced_seconds = time.perf_counter() - start

        def compile_and_measure() -> StepPlan:
            begin = time.perf_counter()
            try:
                compiled = lowered.compile()
            except jax.errors.JaxRuntimeError as err:
                required = _out_of_memory(str(err))
                if required is None:
                    raise
                seconds = traced_seconds + time.perf_counter() - begin
                return _oom_step(
                    phase, description, self.algo, self.state, inputs, required, seconds, kv_cache
                )
            seconds = traced_seconds + time.perf_counter() - begin
            step = _measure(
                phase,
                description,
                compiled,
                traced.jaxpr,
                seconds,
                self.algo,
                self.state,
                inputs,
                kv_cache,
            )
            return dataclasses.replace(
                step, flops=step.flops / length, bytes_accessed=step.bytes_accessed / length
            )

        self.plans.append(self.pool.submit(compile_and_measure))


def _staged_steps(algo: Algorithm, run: RunConfig, steps: _Steps) -> None:
    """`collect` (after a host `prepare`) and `learn`, with the batch `process` makes
    from dummy data of the collected shapes (the host phases are cheap and shape-stable)."""
    cls, n, mesh = type(algo), steps.num_agents, steps.mesh
    host_state = algo.init_host_state(run.seed, n)
    inputs: tuple[Any, ...] = ()
    collected: Any = None
    if "prepare" in algo.phases:
        raw, host_state = algo.prepare(host_state)
        inputs = (_host_spec(algo, raw, mesh, n),)
    if "collect" in algo.phases:
        with jax.set_mesh(mesh):
            out = jax.eval_shape(steppers.agents_fn(algo.collect, n), steps.state, *inputs)[1]
        steps.add("collect", cls.collect, inputs, _kv_cache_bytes(algo, mesh, out, n))
        collected = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), out)
    batch, _, _ = algo.process(collected, host_state)
    steps.add("learn", cls.learn, (_host_spec(algo, batch, mesh, n),))


def _async_steps(algo: Algorithm, run: RunConfig, steps: _Steps, sampler_mesh: Any) -> None:
    """Asynchronous mode (`jaxrl/training/async_stages.py`): the sampler's
    `async_collect` on its own mesh, over the state's `sampler_view` laid out there,
    and the learner's `async_learn` on the run's mesh, as the driver compiles them."""
    cls, n = type(algo), steps.num_agents
    view = algo.sampler_view(steps.state)
    view = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), view)
    view_shardings = algo.state_sharding(view, sampler_mesh, n)
    sampler = _Steps(
        algo,
        _with_shardings(view, view_shardings),
        view_shardings,
        sampler_mesh,
        n,
        steps.compile_steps,
        steps.pool,
    )
    sampler.plans = steps.plans  # one list, in the order the steps run
    raw, host_state = algo.prepare(algo.init_host_state(run.seed, n))
    index = jax.ShapeDtypeStruct((n,), np.int32, sharding=mesh_lib.replicated(sampler_mesh))
    inputs = (index, _host_spec(algo, raw, sampler_mesh, n))
    with jax.set_mesh(sampler_mesh):
        fn = steppers.agents_fn(algo.async_collect, n)
        out = jax.eval_shape(fn, sampler.state, *inputs)[1]
    kv_cache = _kv_cache_bytes(algo, sampler_mesh, out, n)
    sampler.add("async_collect", cls.async_collect, inputs, kv_cache)
    collected = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), out)
    batch, _, _ = algo.process(collected, host_state)
    steps.add("async_learn", cls.async_learn, (_host_spec(algo, batch, steps.mesh, n),))


def _host_spec(algo: Algorithm, batch: Any, mesh: Any, n: int) -> Any:
    """Abstract values of a host batch laid out as the driver lays it out
    (`steppers.host_batch_spec`), after checking that every sharded dimension divides."""
    shardings, spec = steppers.host_batch_spec(algo, batch, mesh, n)
    check_divisible(algo, spec, shardings)
    return spec


def _with_shardings(abstract: Any, shardings: Any) -> Any:
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings
    )


def _shardings_of(spec: Any) -> Any:
    return jax.tree.map(lambda x: x.sharding, spec)


def _doc(method: Any) -> str:
    """The first sentence of a step's docstring (what the step does)."""
    text = " ".join((method.__doc__ or "").split())
    return text.split(". ")[0].rstrip(".") if text else ""


def _out_of_memory(message: str) -> int | None:
    """XLA's TPU compiler refuses a program whose temporaries exceed the HBM:
    "RESOURCE_EXHAUSTED: ... HLO temporaries (124.28G) exceeds available HBM (15.75G)".
    The bytes it required, or None for any other error."""
    match = re.search(r"temporaries \(([0-9.]+)([KMGT]?)\)", message)
    if "RESOURCE_EXHAUSTED" not in message or match is None:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[match.group(2)]
    return int(float(match.group(1)) * scale)


def _oom_step(name, description, algo, state, inputs, temp, seconds, kv_cache) -> StepPlan:
    rows = {**_state_rows(algo, state), "step inputs (batch)": _tree_bytes(inputs)}
    if kv_cache:
        rows["KV cache"] = min(kv_cache, temp)
    rows["activations and temporaries"] = temp - rows.get("KV cache", 0)
    return StepPlan(
        name,
        description,
        rows,
        sum(rows.values()),
        {"temp_size_in_bytes": temp},
        0.0,
        0.0,
        0.0,
        True,
        seconds,
        note="XLA refused to compile it: its temporaries alone exceed "
        "the HBM (at least this much is needed)",
        out_of_memory=True,
    )


# ---------------------------------------------------------------------------- measuring
def _leaf_bytes(leaf: Any) -> int:
    """Per-device bytes of an abstract, sharded leaf."""
    shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
    return int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize


def _tree_bytes(tree: Any) -> int:
    return sum(_leaf_bytes(x) for x in jax.tree.leaves(tree))


def _state_rows(algo: Algorithm, state: Any) -> dict[str, int]:
    """The state's per-device bytes by role: parameters, optimizer state, a KV cache kept
    in the state (multi-turn episodes'), frozen parameters (`checkpoint_exclude`, e.g. a
    reference model), and the rest."""
    rows: dict[str, int] = {}
    if not dataclasses.is_dataclass(state):
        return {"state": _tree_bytes(state)}
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    rows["parameters"] = _tree_bytes(fields.pop("params", None))
    if "opt_state" in fields:
        rows["optimizer state"] = _tree_bytes(fields.pop("opt_state"))
    caches = [f for f in fields if isinstance(fields[f], KVCache) and _tree_bytes(fields[f])]
    for f in caches:  # multi-turn episodes' KV cache, kept in the state between turns
        rows[f"KV cache kept across turns ({f})"] = _tree_bytes(fields.pop(f))
    frozen = [f for f in algo.checkpoint_exclude if _tree_bytes(fields.get(f))]
    if frozen:
        label = f"frozen parameters ({', '.join(frozen)})"
        rows[label] = sum(_tree_bytes(fields.pop(f)) for f in frozen)
    others = sorted(fields, key=lambda f: -_tree_bytes(fields[f]))
    big = [f for f in others if _tree_bytes(fields[f])][:3]
    rest = sum(_tree_bytes(v) for v in fields.values())
    more = ", ..." if len([f for f in others if _tree_bytes(fields[f])]) > 3 else ""
    rows[f"other state ({', '.join(big)}{more})" if big else "other state"] = rest
    return rows


def _measure(name, description, compiled, jaxpr, seconds, algo, state, inputs, kv_cache=None):
    """One step's table: the state and inputs by role (from their shardings), XLA's
    outputs and temporaries (less the KV cache, shown apart), peak, loop-weighted cost."""
    mem = compiled.memory_analysis()
    raw = {
        k: int(getattr(mem, k))
        for k in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "alias_size_in_bytes",
            "temp_size_in_bytes",
            "generated_code_size_in_bytes",
            "peak_memory_in_bytes",
        )
        if hasattr(mem, k)
    }
    rows = _state_rows(algo, state)
    rows["step inputs (batch)"] = _tree_bytes(inputs)
    rows["outputs (not donated)"] = max(0, raw["output_size_in_bytes"] - raw["alias_size_in_bytes"])
    temp = raw["temp_size_in_bytes"]
    if kv_cache:
        rows["KV cache"] = min(kv_cache, temp)
        temp -= rows["KV cache"]
    rows["activations and temporaries"] = temp
    summed = (
        raw["argument_size_in_bytes"]
        + raw["output_size_in_bytes"]
        - raw["alias_size_in_bytes"]
        + raw["temp_size_in_bytes"]
    )
    # TPU's peak adds the program and runtime buffers to the sum (measured: tens of MB
    # for a GRPO step); the CPU backend's peak leaves temporaries out.
    rows[PROGRAM_ROW] = max(0, raw.get("peak_memory_in_bytes", 0) - summed)
    total = summed + rows[PROGRAM_ROW]
    cost = compiled.cost_analysis()
    cost = (cost[0] if isinstance(cost, list | tuple) else cost) or {}
    xla_flops = float(cost.get("flops", 0.0))
    xla_bytes = float(cost.get("bytes accessed", 0.0))
    looped = matmul_cost(jaxpr, loops=True)
    once = matmul_cost(jaxpr, loops=False)
    flop_scale = looped.flops / once.flops if once.flops else 1.0
    byte_scale = looped.bytes / once.bytes if once.bytes else 1.0
    return StepPlan(
        name=name,
        description=description,
        memory=rows,
        total=int(total),
        memory_analysis=raw,
        flops=xla_flops * flop_scale,
        bytes_accessed=xla_bytes * byte_scale,
        xla_flops=xla_flops,
        loops_exact=looped.exact,
        compile_seconds=seconds,
    )


def _kv_cache_bytes(algo: Any, mesh: Any, collected: Any, n: int) -> int | None:
    """Per-device bytes of the sampler's KV cache (keys and values of every layer for
    every sampled row over prompt + completion), laid out as `jaxrl.lm.sampling` places
    it (`cache_sharding`: rows over data x fsdp, kv heads over tensor)."""
    config = getattr(getattr(algo, "model", None), "config", None)
    tokens = collected.get("tokens") if isinstance(collected, Mapping) else None
    if config is None or tokens is None or not hasattr(config, "num_key_value_heads"):
        return None
    from jaxrl.lm.sharding import cache_sharding

    rows, length = tokens.shape[-2], tokens.shape[-1]
    shape = (rows, config.num_key_value_heads, config.head_dim, length)
    local = cache_sharding(config, mesh, rows).shard_shape(shape)
    per_layer = 2 * int(np.prod(local)) * np.dtype(config.compute_dtype).itemsize
    return n * config.num_hidden_layers * per_layer


def _describe_model(algo: Any) -> str | None:
    model = getattr(algo, "model", None)
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_key_value_heads"):
        return None
    from jaxrl.lm.sharding import param_shapes

    count = sum(math.prod(s) for s in param_shapes(config).values())
    lora = getattr(algo, "lora", None)
    extra = f", LoRA rank {lora.rank}" if lora is not None else ""
    remat = ", remat" if getattr(model, "remat", False) else ""
    return (
        f"{count / 1e9:.2f}B parameters ({config.model_type}, {config.num_hidden_layers} layers, "
        f"hidden {config.hidden_size}, {config.num_attention_heads} heads / "
        f"{config.num_key_value_heads} kv, vocab {config.vocab_size}), parameters "
        f"{config.param_dtype}, compute {config.dtype}{extra}{remat}"
    )


PROGRAM_ROW = "program and runtime (XLA peak - the rest)"
DERIVED_ROWS = (
    "step inputs (batch)",
    "outputs (not donated)",
    "KV cache",
    "activations and temporaries",
    PROGRAM_ROW,
)


def program_bytes(raw: Mapping[str, int]) -> int:
    summed = raw["argument_size_in_bytes"] + not_donated(raw) + raw["temp_size_in_bytes"]
    return max(0, raw.get("peak_memory_in_bytes", 0) - summed)


def not_donated(raw: Mapping[str, int]) -> int:
    return max(0, raw["output_size_in_bytes"] - raw["alias_size_in_bytes"])
