"""Device meshes and the sharding of training states.

Training runs under a one-axis `jax.sharding.Mesh` named `data`. The state
of a vmapped run has a leading *agent* axis (seeds x sweep points):

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

import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl.config import ConfigError

log = logging.getLogger(__name__)

DATA_AXIS = "data"


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first `num_devices` devices (all by default)."""
    devices = jax.devices()
    if num_devices is not None:
        if not 1 <= num_devices <= len(devices):
            raise ConfigError(
                f"invalid num_devices={num_devices}: must be in [1, {len(devices)}] "
                f"(devices available: {len(devices)})"
            )
        devices = devices[:num_devices]
        if len({d.process_index for d in devices}) < jax.process_count():
            # A process without devices in the mesh could not take part in the run.
            raise ConfigError(
                f"invalid num_devices={num_devices}: in a run of {jax.process_count()} processes "
                f"the mesh must include devices of every process; leave num_devices unset "
                f"(all {len(jax.devices())} devices)"
            )
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def state_sharding(
    state: Any, mesh: Mesh, num_agents: int, num_envs: int, env_fields: Sequence[str]
) -> Any:
    """A pytree of `NamedSharding`s for a vmapped training state (see module docs)."""
    n = mesh.devices.size
    replicated = NamedSharding(mesh, PartitionSpec())
    if n == 1:
        return jax.tree.map(lambda _: replicated, state)
    if num_agents % n == 0:
        agent_axis = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
        return jax.tree.map(lambda _: agent_axis, state)
    if num_envs % n == 0:
        env_axis = NamedSharding(mesh, PartitionSpec(None, DATA_AXIS))

        def field_sharding(name: str, value: Any) -> Any:
            spec = env_axis if name in env_fields else replicated
            return jax.tree.map(lambda _: spec, value)

        return type(state)(
            **{name: field_sharding(name, getattr(state, name)) for name in _field_names(state)}
        )
    warnings.warn(
        f"neither the number of agents ({num_agents}) nor num_envs ({num_envs}) is divisible "
        f"by the number of devices ({n}); the training state is replicated on every device",
        stacklevel=2,
    )
    return jax.tree.map(lambda _: replicated, state)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def _field_names(state: Any) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(state)]


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
