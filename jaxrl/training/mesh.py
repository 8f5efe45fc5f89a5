"""Device meshes and the sharding of training states.

`make_mesh` builds any named mesh (one implementation for the whole library).
Control algorithms train under a one-axis mesh named `data`, which is the
default `Algorithm.make_mesh` hook; language models use `data x fsdp x tensor`
(their rules are in `jaxrl/lm/sharding.py`; `with_agent_axis` adapts them to the
driver's stacked agents). The state of a vmapped run has a leading *agent* axis
(seeds x sweep points), and the default `Algorithm.state_sharding` hook
(`agent_or_env_sharding`) places it so:

* when the number of agents divides evenly over the devices, every leaf is
  sharded along that axis: each device trains its own agents, no
  communication at all;
* otherwise, when the number of parallel environments divides evenly, the
  per-environment leaves (environment states, observations, episode
  accumulators) are sharded along their environment axis and everything else
  is replicated; XLA then inserts the all-reduce of gradients itself;
* otherwise the state is replicated (correct, but no speed-up) and a warning
  says why.

`jit` with `NamedSharding` does the rest (no `pmap`). Multi-host: call
`initialize_distributed` first; `jax.devices()` then spans all processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl.config import ConfigError

log = logging.getLogger(__name__)

DATA_AXIS = "data"

# Devices that meshes are built over instead of `jax.devices()` (see `target_devices`).
_TARGET_DEVICES: list[Any] | None = None


@contextlib.contextmanager
def target_devices(devices: Sequence[Any]) -> Iterator[None]:
    """Inside the block, every mesh (`make_mesh`, `select_devices`, so every algorithm's
    `make_mesh` hook) is laid over `devices` instead of `jax.devices()`.

    `jaxrl plan` uses it to compile an algorithm's steps for a TPU slice that is not
    attached (the compile-only devices of `jax.experimental.topologies`) with the
    algorithm's own mesh hook, unchanged.
    """
    global _TARGET_DEVICES
    previous, _TARGET_DEVICES = _TARGET_DEVICES, list(devices)
    try:
        yield
    finally:
        _TARGET_DEVICES = previous


def available_devices() -> list[Any]:
    """The devices meshes are built over: `jax.devices()`, or those of `target_devices`."""
    return list(jax.devices()) if _TARGET_DEVICES is None else list(_TARGET_DEVICES)


def make_mesh(axes: Mapping[str, int] | None = None, devices: Sequence[Any] | None = None) -> Mesh:
    """A mesh with the named `axes` (sizes; at most one -1 = "the remaining devices").

    `make_mesh()` is the 1-D `data` mesh over all devices that control algorithms
    train on; language models use `{"data": 1, "fsdp": -1, "tensor": 1}` and friends
    (`jaxrl.lm.sharding.make_mesh` is this function with the LM's axis names). The
    mesh uses the first `prod(sizes)` of `devices` (default: all devices). Errors
    name the axis and say how many devices there are.
    """
    devices = available_devices() if devices is None else list(devices)
    axes = dict(axes) if axes else {DATA_AXIS: -1}
    sizes = list(axes.values())
    for name, size in axes.items():
        if not (isinstance(size, int) and (size >= 1 or size == -1)):
            raise ConfigError(f"invalid mesh axis {name}={size!r}: must be a positive integer")
    if sizes.count(-1) > 1:
        raise ConfigError(f"invalid mesh {axes}: at most one axis size may be -1 (the rest)")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if len(devices) % known:
            raise ConfigError(
                f"invalid mesh {axes}: {len(devices)} devices do not divide into axes of "
                f"product {known}"
            )
        sizes[sizes.index(-1)] = len(devices) // known
    n = int(np.prod(sizes))
    if n > len(devices):
        raise ConfigError(
            f"invalid mesh {dict(zip(axes, sizes, strict=True))}: needs {n} devices, "
            f"{len(devices)} available"
        )
    used = devices[:n]
    if len({d.process_index for d in used}) < len({d.process_index for d in devices}):
        # A process without devices in the mesh could not take part in the run.
        raise ConfigError(
            f"invalid mesh {dict(zip(axes, sizes, strict=True))}: in a run of "
            f"{jax.process_count()} processes the mesh must include devices of every "
            f"process; use all {len(devices)} devices"
        )
    return Mesh(np.asarray(used, dtype=object).reshape(sizes), tuple(axes))


def select_devices(num_devices: int | None = None) -> list[Any]:
    """The first `num_devices` devices (all by default), checked: a count out of range,
    or one that leaves a process of a multi-process run without devices, is a
    `ConfigError` naming `num_devices`. Every algorithm's `make_mesh` starts here."""
    devices = available_devices()
    if num_devices is None:
        return devices
    if not 1 <= num_devices <= len(devices):
        raise ConfigError(
            f"invalid num_devices={num_devices}: must be in [1, {len(devices)}] "
            f"(devices available: {len(devices)})"
        )
    chosen = list(devices[:num_devices])
    if len({d.process_index for d in chosen}) < len({d.process_index for d in devices}):
        # A process without devices in the mesh could not take part in the run.
        raise ConfigError(
            f"invalid num_devices={num_devices}: in a run of {jax.process_count()} processes "
            f"the mesh must include devices of every process; leave num_devices unset "
            f"(all {len(devices)} devices)"
        )
    return chosen


def data_mesh(num_devices: int | None = None) -> Mesh:
    """The 1-D `data` mesh over the first `num_devices` devices (all by default)."""
    devices = select_devices(num_devices)
    return make_mesh({DATA_AXIS: len(devices)}, devices)


def agent_or_env_sharding(
    state: Any, mesh: Mesh, num_agents: int, env_fields: Sequence[str]
) -> Any:
    """Shardings of an agent-stacked pytree on a 1-D `data` mesh (see module docs).

    Agents over `data` when they divide evenly; otherwise the top-level `env_fields`
    along their environment axis (axis 1) when every such leaf's axis divides;
    otherwise replicated, with a warning saying why.
    """
    n = mesh.devices.size
    replicated_ = replicated(mesh)
    if n == 1:
        return jax.tree.map(lambda _: replicated_, state)
    if num_agents % n == 0:
        agent_axis = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
        return jax.tree.map(lambda _: agent_axis, state)
    env_leaves = [
        leaf
        for name in env_fields
        if dataclasses.is_dataclass(state) and hasattr(state, name)
        for leaf in jax.tree.leaves(getattr(state, name))
    ]
    if env_leaves and all(leaf.ndim >= 2 and leaf.shape[1] % n == 0 for leaf in env_leaves):
        env_axis = NamedSharding(mesh, PartitionSpec(None, DATA_AXIS))

        def field_sharding(name: str, value: Any) -> Any:
            spec = env_axis if name in env_fields else replicated_
            return jax.tree.map(lambda _: spec, value)

        return type(state)(
            **{
                f.name: field_sharding(f.name, getattr(state, f.name))
                for f in dataclasses.fields(state)
            }
        )
    warnings.warn(
        f"neither the number of agents ({num_agents}) nor the environment axis of "
        f"{list(env_fields) or 'any field'} is divisible by the number of devices ({n}); "
        "the training state is replicated on every device",
        stacklevel=2,
    )
    return jax.tree.map(lambda _: replicated_, state)


def with_agent_axis(shardings: Any) -> Any:
    """Prepends an unsharded agent axis to every `NamedSharding` of a per-agent layout.

    Rules written for one agent (e.g. the LM's FSDP/tensor rules) stay correct once
    the driver stacks agents on a leading axis: that axis is simply not sharded.
    """
    return jax.tree.map(
        lambda s: NamedSharding(s.mesh, PartitionSpec(None, *s.spec)),
        shardings,
        is_leaf=lambda x: isinstance(x, NamedSharding),
    )


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


# The largest flat buffer `psum_in_buckets` concatenates leaves into (torch DDP's default
# bucket is 25 MB): big enough that a small model's gradient is one buffer, small enough
# that the concatenation's extra copy stays a small fraction of a large model's memory.
BUCKET_BYTES = 32 * 2**20


def bucket_leaves(leaves: Sequence[Any], bucket_bytes: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of `leaves` (arrays or shape-dtype structs) grouped into buckets for
    `psum_in_buckets`: runs of consecutive leaves of one dtype, each run cut before the
    leaf that would take it past `bucket_bytes`; a leaf larger than that is a bucket of
    its own."""
    buckets: list[list[int]] = []
    size = 0
    for i, leaf in enumerate(leaves):
        nbytes = int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
        last = leaves[buckets[-1][-1]] if buckets else None
        if last is None or last.dtype != leaf.dtype or size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += nbytes
    return buckets


def psum_in_buckets(tree: Any, axis_name: str, bucket_bytes: int = BUCKET_BYTES) -> Any:
    """`jax.lax.psum(tree, axis_name)` (inside `shard_map`) as few all-reduces of flat
    buffers: consecutive leaves of one dtype are concatenated into buckets of at most
    `bucket_bytes` (a larger leaf is a bucket of its own), each bucket summed, and the
    leaves cut back out.

    Why: XLA combines the all-reduces of a gradient's leaves into one all-reduce of a
    tuple, and its CPU runtime executes that as one rendezvous of the devices per tuple
    element, so a model with many leaves pays one rendezvous per leaf and step, where
    one buffer pays one (benchmarks/notes, "GRPO step speed"). Same sums,
    bit for bit: the concatenation only moves the numbers.
    """
    leaves, treedef = jax.tree.flatten(tree)
    summed = list(leaves)
    for bucket in bucket_leaves(leaves, bucket_bytes):
        flat = jax.lax.psum(jnp.concatenate([jnp.ravel(leaves[i]) for i in bucket]), axis_name)
        offsets = np.cumsum([0] + [leaves[i].size for i in bucket])
        for i, start, stop in zip(bucket, offsets[:-1], offsets[1:], strict=True):
            summed[i] = flat[start:stop].reshape(leaves[i].shape)
    return jax.tree.unflatten(treedef, summed)


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> bool:
    """Calls `jax.distributed.initialize` when a multi-process run is requested.

    Arguments fall back to the environment variables `JAXRL_COORDINATOR`,
    `JAXRL_NUM_PROCESSES` and `JAXRL_PROCESS_ID`; on managed clusters (SLURM,
    TPU pods) JAX auto-detects them when all three are absent and
    `JAXRL_DISTRIBUTED=1`. Returns True if JAX was initialised here.
    """
    coordinator_address = coordinator_address or os.environ.get("JAXRL_COORDINATOR")
    if num_processes is None and "JAXRL_NUM_PROCESSES" in os.environ:
        num_processes = int(os.environ["JAXRL_NUM_PROCESSES"])
    if process_id is None and "JAXRL_PROCESS_ID" in os.environ:
        process_id = int(os.environ["JAXRL_PROCESS_ID"])
    if coordinator_address is None and num_processes is None and process_id is None:
        if os.environ.get("JAXRL_DISTRIBUTED") == "1":
            jax.distributed.initialize()
            return True
        return False
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
    return True
