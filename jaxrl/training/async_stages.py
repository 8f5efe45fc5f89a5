"""Asynchronous staged updates: the sampler on its own devices, K policy versions behind.

A staged algorithm with `async_staleness` K >= 1 (the GRPO family and PPO-LM, their
hooks in `jaxrl/algorithms/lm_rollout_async.py`) is run by `AsyncStagedStepper` instead of the
synchronous `StagedStepper`. Its devices are split in two sub-meshes: the sampler's
(`algo.sampler_mesh`: the first `sampler_devices`, parameters replicated) and the
learner's (`algo.make_mesh`: the rest, with the run's own layout, e.g. FSDP), each with
its own shardings.

The schedule (deterministic: the same programs on the same data whatever the timing).
Version v is the policy after v updates; update u learns from batch u and makes version
u + 1. Batch b is sampled by version `sampling_version(b, K) = max(0, b - K)`: the
first K + 1 batches by the starting policy, then always exactly K versions behind. One
update u:

    1. copy version u's parameters to the sampler (`algo.sampler_view`; the frozen
       fields, a LoRA base or KL reference, were copied once); take batch u from the
       queue (sampled by version max(0, u - K) one update ago or more);
    2. host `prepare` of batch u + K, and its sampling (`algo.async_collect`) dispatched
       on the sampler's devices;
    3. batch u dispatched to the learner (`algo.async_learn`);
    4. the host waits for batch u + K's completions only, scores them (`process`) and
       queues them, while the learner still runs.

JAX dispatches both programs asynchronously, on disjoint devices, so 2 (sampling) and 4
(rewards) overlap 3 (learning) from one Python thread; no threads are needed. The copy
of the next update's step 1 runs after the learner, as it must (version u + 1 is its
output), and its sampling after the copy.

Why parameters move between batches, not between decode steps (PipelineRL's in-flight
updates): our sampler is one compiled `while_loop` over decode steps
(`jaxrl.lm.generate`), which takes its parameters as an argument; changing them inside
the loop would need host callbacks in every step or a loop split into host-driven
pieces, and a completion would then be written by several versions, which no single
behaviour log-probability describes. Between batches, every row has one version.

The bound. Every batch carries the version that sampled it; before learning, a batch
more than K versions older than the learner is dropped, and a fresh one sampled by the
current version takes its place (`async_dropped` counts them). The schedule never makes
one; the check is what guarantees that none is learned from (a restored queue, a
future free-running sampler). How the learner treats rows within the bound is the
algorithm's `rollout_correction` (docs/lm.md, "Asynchronous sampling").

Checkpoints. At a chunk boundary every queued batch is on the host, already scored:
the host state the driver saves carries them under `"async"` (each array's bytes in
base64, exact) with their versions and the stepper's counters, so a resumed run learns
from exactly the rows the uninterrupted one would have, keeps the bound, and ends with
the same parameters. The sampler's parameters are not saved: at a boundary they are
always the learner's current ones.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import jax
import numpy as np

from . import memory, steppers
from . import mesh as mesh_lib
from .contract import Algorithm
from .progress import Clock

HOST_STATE_KEY = "async"
"""Where the stepper's own state (queued batches, counters) lives in the host state."""


def sampling_version(batch: int, staleness: int) -> int:
    """The policy version that samples batch `batch` under staleness K: max(0, b - K)."""
    return max(0, batch - staleness)


def within_bound(version: int, learner_version: int, staleness: int) -> bool:
    """Whether rows sampled by `version` may be learned from at `learner_version`:
    at most `staleness` versions older."""
    return 0 <= learner_version - version <= staleness


def encode_arrays(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Numpy arrays as JSON values (dtype, shape, base64 of the bytes): exact."""
    return {
        name: {
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "data": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii"),
        }
        for name, a in ((n, np.asarray(v)) for n, v in arrays.items())
    }


def decode_arrays(encoded: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """The inverse of `encode_arrays`."""
    return {
        name: np.frombuffer(base64.b64decode(e["data"]), dtype=np.dtype(e["dtype"]))
        .reshape(e["shape"])
        .copy()
        for name, e in encoded.items()
    }


@dataclasses.dataclass
class QueuedBatch:
    """A scored batch waiting for the learner."""

    batch: int
    """Its index: update `batch` learns from it (unless it is dropped)."""
    version: int
    """The policy version that sampled it."""
    rows: dict[str, np.ndarray]
    """`process`'s batch (leading agent axis)."""
    metrics: dict[str, Any]
    """`process`'s host metrics (sampling, rewards)."""

    def to_json(self) -> dict[str, Any]:
        metrics = {k: np.asarray(v, np.float64).tolist() for k, v in self.metrics.items()}
        return {
            "batch": self.batch,
            "version": self.version,
            "rows": encode_arrays(self.rows),
            "metrics": metrics,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> QueuedBatch:
        return cls(value["batch"], value["version"], decode_arrays(value["rows"]), value["metrics"])


class AsyncStagedStepper:
    """K x (copy parameters -> [host prepare -> sampler collect] || [learner learn] ->
    host process), the schedule of the module docstring. Same interface as
    `StagedStepper`: `run(state, host_state, length) -> (state, host_state, metrics)`."""

    def __init__(
        self,
        algo: Algorithm,
        num_agents: int,
        mesh: jax.sharding.Mesh,
        shardings: Any,
        compile_clock: Clock,
        num_devices: int | None,
        check_memory: bool = False,
    ):
        self.algo, self.num_agents, self.mesh = algo, num_agents, mesh
        self.shardings, self.compile_clock = shardings, compile_clock
        self.check_memory = check_memory
        self.staleness = int(algo.async_staleness)
        self.sampler_mesh = algo.sampler_mesh(num_devices)
        self.queue: list[QueuedBatch] = []
        self.update: int | None = None  # the learner's version (updates done)
        self.sampled = 0  # batches sampled so far (dropped ones too): the key's index
        self.view = self.view_shardings = None
        self.collect_fn = self.learn_fn = None
        self.input_shardings = self.batch_shardings = None

    # ------------------------------------------------------------------ one chunk
    def run(self, state: Any, host_state: Any, length: int) -> tuple[Any, Any, dict]:
        host_state = dict(host_state)
        saved = host_state.pop(HOST_STATE_KEY, None)
        if self.update is None:
            host_state = self._start(state, host_state, saved)
        rows = []
        for _ in range(length):
            u, k = self.update, self.staleness
            self._send_parameters(state)  # version u
            entry, dropped = self.queue.pop(0), 0
            while not within_bound(entry.version, u, k):  # never learned from
                dropped += 1
                entry, host_state = self._score(*self._sample(host_state, u))
            pending, host_state = self._sample(host_state, u + k)  # by version u
            state, metrics = self._learn(state, entry.rows)
            scored, host_state = self._score(pending, host_state)  # while the learner runs
            self.queue.append(scored)
            row = {name: np.asarray(value) for name, value in metrics.items()}  # host sync
            for name, value in entry.metrics.items():
                row[name] = np.broadcast_to(np.asarray(value, np.float64), (self.num_agents,))
            row["async_staleness"] = np.full(self.num_agents, u - entry.version, np.float64)
            row["async_dropped"] = np.full(self.num_agents, dropped, np.float64)
            rows.append(row)
            self.update = u + 1
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # (length, agents)
        return state, {**host_state, HOST_STATE_KEY: self._saved()}, stacked

    def _start(self, state: Any, host_state: dict, saved: dict | None) -> dict:
        """The learner's version from the state; the queue from the checkpoint's host
        state, or (a fresh run) the first K batches, sampled by the current version."""
        self.update = int(np.asarray(jax.device_get(state.update_step)).reshape(-1)[0])
        if saved is not None:
            if saved["staleness"] != self.staleness:
                raise ValueError(
                    f"the checkpoint's queue was made with async_staleness="
                    f"{saved['staleness']}, this run has {self.staleness}"
                )
            self.queue = [QueuedBatch.from_json(q) for q in saved["queue"]]
            self.sampled = saved["sampled"]
            return host_state
        self._send_parameters(state)
        for batch_index in range(self.update, self.update + self.staleness):
            scored, host_state = self._score(*self._sample(host_state, batch_index))
            self.queue.append(scored)
        return host_state

    def _saved(self) -> dict[str, Any]:
        return {
            "staleness": self.staleness,
            "version": self.update,
            "sampled": self.sampled,
            "queue": [q.to_json() for q in self.queue],
        }

    # ------------------------------------------------------------------ the sampler
    def _send_parameters(self, state: Any) -> None:
        """The sampler's copy of the learner's current `sampler_view` (the version the
        next batches are sampled by); fields in `checkpoint_exclude` (frozen: a LoRA
        base, a KL reference) only the first time."""
        view = self.algo.sampler_view(state)
        if self.view is None:
            abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), view)
            self.view_shardings = self.algo.state_sharding(
                abstract, self.sampler_mesh, self.num_agents
            )
            self.view = jax.device_put(view, self.view_shardings)
            return
        moving = {
            f.name: getattr(view, f.name)
            for f in dataclasses.fields(view)
            if f.name not in self.algo.checkpoint_exclude
        }
        targets = {name: getattr(self.view_shardings, name) for name in moving}
        self.view = self.view.replace(**jax.device_put(moving, targets))

    def _sample(self, host_state: dict, batch_index: int) -> tuple[tuple[Any, int, int], dict]:
        """Prepares the prompts of the batch update `batch_index` is to learn from and
        dispatches its sampling by the sampler's current version; `((device output,
        version, batch_index), host_state)`."""
        inputs, host_state = self.algo.prepare(host_state)
        index = np.full((self.num_agents,), self.sampled, np.int32)
        if self.collect_fn is None:
            self._compile_collect(inputs, index)
        inputs = jax.device_put(inputs, self.input_shardings)
        index = jax.device_put(index, mesh_lib.replicated(self.sampler_mesh))
        with jax.set_mesh(self.sampler_mesh):
            self.view, collected = self.collect_fn(self.view, index, inputs)
        self.sampled += 1
        return (collected, self.update, batch_index), host_state

    def _score(self, pending: tuple[Any, int, int], host_state: dict) -> tuple[QueuedBatch, dict]:
        """Waits for a sampled batch and scores it on the host (`process`)."""
        collected, version, batch_index = pending
        collected = jax.tree.map(np.asarray, collected)  # waits for the sampler only
        batch, host_state, metrics = self.algo.process(collected, host_state)
        return QueuedBatch(batch_index, version, batch, dict(metrics)), host_state

    # ------------------------------------------------------------------ the learner
    def _learn(self, state: Any, rows: dict[str, np.ndarray]) -> tuple[Any, Any]:
        if self.learn_fn is None:
            self._compile_learn(state, rows)
        batch = jax.device_put(rows, self.batch_shardings)
        with jax.set_mesh(self.mesh):
            return self.learn_fn(state, batch)  # dispatched: returns before it finishes

    # ------------------------------------------------------------------ compilation
    def _compile_collect(self, inputs: Any, index: np.ndarray) -> None:
        """The sampler's program (`algo.async_collect`) on the sampler's mesh, by the
        driver's `lower_phase` (as `jaxrl plan` compiles it); the view donated and
        returned, so that its frozen fields stay on the sampler."""
        algo, mesh, n = self.algo, self.sampler_mesh, self.num_agents
        with self.compile_clock:
            self.input_shardings, input_spec = steppers.host_batch_spec(algo, inputs, mesh, n)
            index_sharding = mesh_lib.replicated(mesh)
            index_spec = jax.ShapeDtypeStruct(index.shape, index.dtype, sharding=index_sharding)
            compiled = steppers.lower_phase(
                algo,
                "async_collect",
                (steppers.abstract_state(self.view), index_spec, input_spec),
                num_agents=n,
                mesh=mesh,
                shardings=self.view_shardings,
                input_shardings=(index_sharding, self.input_shardings),
            ).lowered.compile()
        if self.check_memory:
            memory.check_program(compiled, "async_collect", list(mesh.devices.flat))
        self.collect_fn = compiled

    def _compile_learn(self, state: Any, rows: dict[str, np.ndarray]) -> None:
        """The learner's program (`algo.async_learn`) on the learner's mesh."""
        algo, mesh, n = self.algo, self.mesh, self.num_agents
        with self.compile_clock:
            self.batch_shardings, batch_spec = steppers.host_batch_spec(algo, rows, mesh, n)
            compiled = steppers.lower_phase(
                algo,
                "async_learn",
                (steppers.abstract_state(state), batch_spec),
                num_agents=n,
                mesh=mesh,
                shardings=self.shardings,
                input_shardings=(self.batch_shardings,),
            ).lowered.compile()
        if self.check_memory:
            memory.check_program(compiled, "async_learn", list(mesh.devices.flat))
        self.learn_fn = compiled


def weight_update_bytes(algo: Algorithm, state: Any) -> int:
    """Bytes copied from the learner to the sampler per update: the `sampler_view`
    fields that are not frozen (the trained parameters: LoRA adapters alone under LoRA;
    counters and the key, a few bytes), once per sampler replica."""
    view = algo.sampler_view(state)
    moving = [
        getattr(view, f.name)
        for f in dataclasses.fields(view)
        if f.name not in algo.checkpoint_exclude
    ]
    return memory.tree_bytes(moving)
