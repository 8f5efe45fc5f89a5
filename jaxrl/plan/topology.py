"""The target of a plan: a named topology's devices and chip, and the mesh on it.

`v5e:4x4` is a TPU slice described by libtpu without any TPU attached
(`jax.experimental.topologies.get_topology_desc`: compile-only devices); `cpu:8` is
eight emulated CPU devices (testable anywhere, no libtpu). A `--mesh` (`fsdp=16`)
becomes the algorithm's `mesh_*` config fields; the checks at the end say which mesh
axis does not divide which model or batch dimension.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import jax
from jax._src import xla_bridge  # backends_are_initialized: see _backends_started
from jax.experimental import topologies
from jax.sharding import NamedSharding

from jaxrl.config import ConfigError

GiB = 2**30


# ---------------------------------------------------------------------------- chips
@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU chip's published figures (per chip, which is one JAX device: v4 and v5p
    are planned in megacore mode, one device per chip, as JAX uses them on TPU VMs)."""

    name: str
    device_kind: str  # what jax reports as `device.device_kind`
    hbm_bytes: int
    peak_bf16_flops: float  # FLOP/s
    hbm_bandwidth: float  # bytes/s
    dims: int  # topology dimensions: v4:2x2x2 (3-D torus), v5e:4x4 (2-D)
    megacore: bool


# Figures from Google Cloud's TPU system-architecture pages (cloud.google.com/tpu/docs/
# v4, /v5e, /v5p, /v6e; the "key chip specifications" tables):
#   v4:  275 TFLOP/s peak per chip (bf16), HBM2 32 GiB at 1200 GB/s
#   v5e: 197 TFLOP/s (bf16), HBM2 16 GB at 819 GB/s
#   v5p: 459 TFLOP/s (bf16), HBM2e 95 GB at 2765 GB/s
#   v6e: 918 TFLOP/s (bf16), HBM 32 GB at 1638 GB/s (Trillium)
# The pages write capacities as "GB" (v5e, v5p, v6e) or "GiB" (v4); HBM stacks come in
# binary sizes, so all are taken as GiB. The runtime reserves a little of it, so a step
# planned within a few percent of the limit may still fail: see `TIGHT`.
CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", "TPU v4", 32 * GiB, 275e12, 1200e9, 3, True),
    "v5e": Chip("v5e", "TPU v5 lite", 16 * GiB, 197e12, 819e9, 2, False),
    "v5p": Chip("v5p", "TPU v5", 95 * GiB, 459e12, 2765e9, 3, True),
    "v6e": Chip("v6e", "TPU v6 lite", 32 * GiB, 918e12, 1638e9, 2, False),
}
TIGHT = 0.95  # above this fraction of HBM a step is reported as fitting only tightly

TOPOLOGY_FORMS = (
    "v5e:AxB or v6e:AxB (e.g. v5e:4x4, chips in a 2-D torus), v4:AxBxC or v5p:AxBxC "
    "(e.g. v4:2x2x2), or cpu:N (N emulated CPU devices, no libtpu needed)"
)
PLAN_EXTRA = 'pip install -e ".[plan]"'


@dataclasses.dataclass(frozen=True)
class Target:
    """What a plan compiles for: a named topology's devices and its chip (None on CPU)."""

    name: str
    devices: tuple[Any, ...]
    chip: Chip | None
    memory_bytes: int | None  # per-device budget: the chip's HBM, or --device-memory

    @property
    def num_devices(self) -> int:
        return len(self.devices)


def parse_bytes(text: str | int | None) -> int | None:
    """`"16GiB"`, `"512MiB"`, `"2e9"` or an int -> bytes (None stays None)."""
    if text is None or isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*", str(text))
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
    units |= {"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
    try:
        value = float(match.group(1)) * units[match.group(2) or "B"] if match else -1.0
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ConfigError(
            f"invalid device_memory={text!r}: must be a size such as 16GiB, 512MiB or 2e9"
        )
    return int(value)


def resolve_topology(name: str, device_memory: str | int | None = None) -> Target:
    """The devices and chip of `name` (`v5e:4x4`, `v4:2x2x2`, `cpu:8`); `ConfigError`s
    name the field: an unknown chip or shape (listing the valid forms), a missing libtpu
    (how to install it), too few CPU devices (how to get more)."""
    budget = parse_bytes(device_memory)
    if not isinstance(name, str) or ":" not in name:
        raise ConfigError(f"invalid topology={name!r}: expected {TOPOLOGY_FORMS}")
    kind, shape = name.split(":", 1)
    if kind == "cpu":
        if not shape.isdigit() or int(shape) < 1:
            raise ConfigError(f"invalid topology={name!r}: cpu:N needs a device count N >= 1")
        devices = _cpu_devices(int(shape), name)
        return Target(name, tuple(devices), None, budget)
    chip = CHIPS.get(kind)
    if chip is None:
        raise ConfigError(
            f"invalid topology={name!r}: unknown chip {kind!r} (known: {sorted(CHIPS)}); "
            f"expected {TOPOLOGY_FORMS}"
        )
    dims = shape.split("x")
    if len(dims) != chip.dims or not all(d.isdigit() and int(d) > 0 for d in dims):
        example = "x".join(["2"] * chip.dims)
        raise ConfigError(
            f"invalid topology={name!r}: a {kind} slice has {chip.dims} dimensions of chips, "
            f"e.g. {kind}:{example}; expected {TOPOLOGY_FORMS}"
        )
    devices = _tpu_devices(name, chip)
    return Target(name, tuple(devices), chip, budget or chip.hbm_bytes)


def _tpu_devices(name: str, chip: Chip) -> list[Any]:
    """Compile-only devices of a TPU slice, from libtpu (no TPU needed)."""
    if not libtpu_installed():
        raise ConfigError(
            f"invalid topology={name!r}: compiling for a TPU slice needs libtpu, which is not "
            f"installed: {PLAN_EXTRA} (or plan on emulated CPU devices with --topology cpu:8)"
        )
    options = {"chip_config_name": "megacore"} if chip.megacore else {}
    # libtpu takes a machine-wide lock (/tmp/libtpu_lockfile) against two processes
    # driving one TPU; compiling for an absent one is safe to do in parallel.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        with _quiet_stderr():  # libtpu logs warnings about the absent TPU VM metadata
            description = topologies.get_topology_desc(
                platform="tpu", topology_name=name, **options
            )
    except Exception as err:  # noqa: BLE001 - libtpu's own message says what is wrong
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"invalid topology={name!r}: libtpu cannot describe it ({first}); expected "
            f"{TOPOLOGY_FORMS}"
        ) from None
    devices = list(description.devices)
    kinds = {d.device_kind for d in devices}
    if kinds != {chip.device_kind}:
        raise ConfigError(f"invalid topology={name!r}: libtpu describes {kinds}, not {chip.name}")
    return devices


def _cpu_devices(count: int, name: str) -> list[Any]:
    """`count` CPU devices. Before JAX starts its backends the count is set here; after,
    the process must already have them (`XLA_FLAGS=--xla_force_host_platform_device_count`)."""
    if not _backends_started() and jax.config.jax_num_cpu_devices < count:
        flags = os.environ.get("XLA_FLAGS", "")
        forced = re.search(r"--xla_force_host_platform_device_count=(\d+)", flags)
        if forced is None or int(forced.group(1)) < count:
            jax.config.update("jax_num_cpu_devices", count)
    devices = jax.devices("cpu")
    if len(devices) < count:
        raise ConfigError(
            f"invalid topology={name!r}: this process has {len(devices)} CPU device(s) and "
            f"JAX has already started; start Python with XLA_FLAGS="
            f"--xla_force_host_platform_device_count={count} (`jaxrl plan` does it itself)"
        )
    return list(devices[:count])


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silences C-level writes to stderr (libtpu's start-up warnings) inside the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def prepare_process(topology: str) -> None:
    """For the command line, before JAX starts: plan on the CPU backend only (a machine
    with libtpu but no TPU would otherwise try, and log, a TPU start) and give it the
    devices `cpu:N` needs."""
    if _backends_started():
        return
    if jax.config.jax_platforms is None:
        jax.config.update("jax_platforms", "cpu")
    kind, _, count = str(topology).partition(":")
    if kind == "cpu" and count.isdigit() and jax.config.jax_num_cpu_devices < int(count):
        jax.config.update("jax_num_cpu_devices", int(count))


def libtpu_installed() -> bool:
    """Whether libtpu can be loaded: `TPU_LIBRARY_PATH` names a file, or the `libtpu`
    package is installed (where JAX looks for it; `pip install -e ".[plan]"`)."""
    path = os.environ.get("TPU_LIBRARY_PATH")
    if path is not None and os.path.isfile(path):
        return True
    return importlib.util.find_spec("libtpu") is not None


def _backends_started() -> bool:
    """Whether JAX has started its backends (so the device count and platforms are fixed).

    The one private JAX API the planner uses: no public function tells whether the
    backends exist without starting them (`jax.devices()` and `jax.extend.backend`
    start them), and a device count can only be set before they start.
    """
    return xla_bridge.backends_are_initialized()


# ---------------------------------------------------------------------------- the mesh
def parse_mesh(mesh: str | Mapping[str, int] | None) -> dict[str, int]:
    """`"data=4,fsdp=4"` (or a dict) -> `{"data": 4, "fsdp": 4}`; `ConfigError` naming
    `mesh` for anything else."""
    if mesh is None or mesh == "":
        return {}
    if isinstance(mesh, Mapping):
        items = list(mesh.items())
    else:
        items = []
        for part in str(mesh).split(","):
            name, eq, size = part.partition("=")
            if not eq:
                raise ConfigError(
                    f"invalid mesh={mesh!r}: expected axis=size pairs, e.g. data=4,fsdp=4"
                )
            items.append((name.strip(), size.strip()))
    axes: dict[str, int] = {}
    for name, size in items:
        try:
            value = int(size)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise ConfigError(f"invalid mesh {name}={size!r}: must be a positive integer")
        if name in axes:
            raise ConfigError(f"invalid mesh={mesh!r}: axis {name!r} given twice")
        axes[name] = value
    return axes


def mesh_overrides(
    algorithm: str,
    field_names: set[str],
    axes: Mapping[str, int],
    num_devices: int,
    target: Target,
) -> dict[str, int]:
    """The config fields a declared mesh sets: axis `X` is the field `mesh_X` (the LM
    algorithms' `mesh_fsdp`, `mesh_tensor`); `data` takes the devices the others leave,
    so a given `data` must be exactly that."""
    known = ["data"] + sorted(f[len("mesh_") :] for f in field_names if f.startswith("mesh_"))
    overrides: dict[str, int] = {}
    for name, size in axes.items():
        if name not in known:
            raise ConfigError(
                f"invalid mesh axis {name}={size}: {algorithm}'s mesh has the axes {known}"
            )
        if name != "data":
            overrides[f"mesh_{name}"] = size
    model_axes = math.prod(size for name, size in axes.items() if name != "data")
    where = f"the {num_devices} devices of {target.name}"
    for name, size in axes.items():
        if name != "data" and num_devices % size:
            raise ConfigError(f"invalid mesh {name}={size}: it does not divide {where}")
    if num_devices % model_axes:
        shown = ",".join(f"{k}={v}" for k, v in axes.items() if k != "data")
        raise ConfigError(
            f"invalid mesh={shown}: the axes' product {model_axes} does not divide {where}"
        )
    if "data" in axes and axes["data"] * model_axes != num_devices:
        raise ConfigError(
            f"invalid mesh data={axes['data']}: with the other axes ({model_axes} devices "
            f"per replica) {where} leave data={num_devices // model_axes}"
        )
    return overrides


# ---------------------------------------------------------------------------- checks
def check_model_dims(algo: Any, mesh: Any) -> None:
    """A mesh axis that does not divide the model dimensions it shards would leave those
    weights (or the KV cache) whole on every device: an error naming the axis and dim."""
    model = getattr(algo, "model", None)
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_key_value_heads"):
        return
    from jaxrl.lm.sharding import DEFAULT_RULES

    dims = {
        "embed": [("hidden_size", config.hidden_size)],
        "heads": [("num_attention_heads", config.num_attention_heads)],
        "kv_heads": [("num_key_value_heads", config.num_key_value_heads)],
        "mlp": [("intermediate_size", config.intermediate_size)],
        "vocab": [("vocab_size", config.vocab_size)],
    }
    for logical, fields in dims.items():
        target = DEFAULT_RULES.get(logical)
        for axis in (target,) if isinstance(target, str) else tuple(target or ()):
            size = mesh.shape.get(axis, 1)
            for field, dim in fields:
                if size > 1 and dim % size:
                    fits = [d for d in divisors(mesh.devices.size) if dim % d == 0]
                    raise ConfigError(
                        f"invalid mesh {axis}={size}: it does not divide the model's "
                        f"{field}={dim} ({logical} is sharded over {axis}), so those weights "
                        f"would be replicated on every device; {axis} sizes that divide both "
                        f"it and the {mesh.devices.size} devices: {fits}"
                    )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_divisible(algo: Any, abstract: Any, shardings: Any) -> None:
    """Every sharded dimension of a batch must split evenly over its mesh axes."""
    for (path, leaf), sharding in zip(
        jax.tree_util.tree_leaves_with_path(abstract), jax.tree.leaves(shardings), strict=True
    ):
        if not isinstance(sharding, NamedSharding):
            continue
        for dim, axes in zip(leaf.shape, sharding.spec, strict=False):
            names = (axes,) if isinstance(axes, str) else tuple(axes or ())
            size = math.prod(sharding.mesh.shape[a] for a in names)
            if size > 1 and dim % size:
                field = getattr(algo, "batch_field", None)
                hint = f" (set by {field})" if field else ""
                raise ConfigError(
                    f"invalid mesh: the batch {jax.tree_util.keystr(path)} has {dim} rows"
                    f"{hint}, which do not split over {' x '.join(names)} = {size} devices"
                )
