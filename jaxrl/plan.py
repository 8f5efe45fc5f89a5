"""`jaxrl plan`: compile an algorithm's steps for a TPU slice on a laptop, and say whether
they fit before anyone rents the slice.

    jaxrl plan grpo --model-config examples/models/llama-3-8b.json --topology v5e:4x4 \\
        --mesh fsdp=16 --dtype bfloat16

The story (`plan`):

1. The target: `v5e:4x4` is a TPU slice described by libtpu without any TPU attached
   (`jax.experimental.topologies.get_topology_desc`: compile-only devices), `cpu:8` is
   eight emulated CPU devices (testable anywhere, no libtpu).
2. The algorithm is built from the same flags and config as `jaxrl train`; `--mesh`
   sets its mesh axes (`mesh_fsdp`, `mesh_tensor`; `data` takes the other devices).
3. Its state and batches are *abstract*: `jax.eval_shape` of the driver's `init`, so
   no parameter is allocated (an 8B-parameter policy plans in a few GB of RAM); a
   `--model` directory's weights are never read, only its config.json and tokenizer.
4. The algorithm's own hooks lay them out: `make_mesh` over the target's devices
   (`jaxrl.training.mesh.target_devices`), `state_sharding`, `batch_sharding`.
5. Each step is compiled as the driver compiles it (`jax.jit(step, in_shardings,
   out_shardings, donate_argnums=0).lower(abstract).compile()`): a fused algorithm's
   `update`; a staged one's `collect` (for LM RL: sampling with the KV cache, the
   reference's log-probs, and re-scoring unless the loss does it) and `learn`, whose
   batch comes from running the host `prepare`/`process` on dummy data of the right
   shapes.
6. Per step and device: XLA's `memory_analysis()` (arguments, outputs, temporaries,
   peak), split into parameters, optimizer state, frozen parameters, other state, inputs
   and, where the step samples, the KV cache; the total against the chip's HBM; FLOPs and
   HBM traffic from `cost_analysis()` and a roofline step time.
7. When a step does not fit: changes that would make it fit (more fsdp, remat, LoRA,
   more micro-batches), each checked by compiling it; only those that fit are printed.

Loops: XLA's cost analysis counts a loop body once, whatever its trip count (measured:
a `scan` of 10 matmuls costs as much as one, on TPU and CPU). The FLOPs and bytes shown
are XLA's, scaled by the ratio of the step's matmul FLOPs (and matmul operand bytes) with
loop bodies weighted by their trip counts to the same count with every body once, from
the step's jaxpr. Scans have static lengths; the sampler's decode loops stop at the
first step where every row has ended, so their bound (every completion runs to
`max_new_tokens`) is used: a worst case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import re
import sys
import tempfile
import time
import types
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.config import ConfigError
from jaxrl.training import driver
from jaxrl.training import mesh as mesh_lib
from jaxrl.training.contract import Algorithm, check_algorithm

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
    from jax._src import xla_bridge

    if xla_bridge.get_tpu_library_path() is None:
        raise ConfigError(
            f"invalid topology={name!r}: compiling for a TPU slice needs libtpu, which is not "
            f"installed: {PLAN_EXTRA} (or plan on emulated CPU devices with --topology cpu:8)"
        )
    from jax.experimental import topologies

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
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized() and jax.config.jax_num_cpu_devices < count:
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
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return
    if jax.config.jax_platforms is None:
        jax.config.update("jax_platforms", "cpu")
    kind, _, count = str(topology).partition(":")
    if kind == "cpu" and count.isdigit() and jax.config.jax_num_cpu_devices < int(count):
        jax.config.update("jax_num_cpu_devices", int(count))


# ---------------------------------------------------------------------------- results
@dataclasses.dataclass
class StepPlan:
    """One compiled step's per-device memory and cost."""

    name: str
    description: str
    memory: dict[str, int]  # label -> bytes per device, in table order (without "total")
    total: int  # per-device peak (XLA's `peak_memory_in_bytes`)
    memory_analysis: dict[str, int]  # XLA's raw fields
    flops: float  # per device, loop bodies weighted by trip counts
    bytes_accessed: float  # per device, same weighting
    xla_flops: float  # XLA's cost analysis as reported (loop bodies once)
    loops_exact: bool  # False: a loop's trip count was unknown (counted once)
    compile_seconds: float
    note: str = ""  # how the numbers were obtained, when not by one full compile
    out_of_memory: bool = False  # XLA refused to compile: temporaries exceed the HBM

    def fits(self, budget: int | None) -> bool:
        if self.out_of_memory:
            return False
        return budget is None or self.total <= budget


@dataclasses.dataclass
class Plan:
    """What `jaxrl.plan` returns: the compiled steps and, if one does not fit, the
    checked changes that would make it fit."""

    algorithm: str
    target: Target
    mesh: dict[str, int]
    num_agents: int
    steps: list[StepPlan]
    model: str | None  # a one-line description of the LM (None for control)
    overrides: dict[str, Any]  # the hyperparameters given (for the suggestions' flags)
    suggestions: list[Suggestion] = dataclasses.field(default_factory=list)
    tried: list[str] = dataclasses.field(default_factory=list)

    @property
    def fits(self) -> bool:
        return all(step.fits(self.target.memory_bytes) for step in self.steps)

    def step(self, name: str) -> StepPlan:
        return next(s for s in self.steps if s.name == name)

    def report(self) -> str:
        """The printed table (see `format_plan`)."""
        return format_plan(self)


@dataclasses.dataclass
class Suggestion:
    """A change (as command-line flags) that was compiled and fits."""

    flags: str
    why: str
    totals: dict[str, int]  # step -> per-device total with the change


# ---------------------------------------------------------------------------- the story
def plan(
    algorithm: str = "grpo",
    env: str | None = None,
    *,
    topology: str,
    mesh: str | Mapping[str, int] | None = None,
    config_file: str | pathlib.Path | None = None,
    model_config: str | pathlib.Path | None = None,
    device_memory: str | int | None = None,
    suggest: bool = True,
    full_depth: bool = False,
    sweep: Mapping[str, Sequence[float]] | Sequence[str] | None = None,
    **kwargs: Any,
) -> Plan:
    """Compiles `algorithm`'s steps for `topology` and measures them (module docstring).

    Keyword arguments are those of `jaxrl.train` (hyperparameters and run options; of
    the run options only `num_seeds`, `seed`, `sweep` and `num_devices` change what is
    compiled). `mesh` is `"data=4,fsdp=4"` or a dict of axis sizes; `model_config` a
    Hugging Face `config.json` (file or directory) whose architecture replaces the
    random model's, without weights or tokenizer (language-model algorithms);
    `device_memory` a per-device budget that replaces the chip's HBM (e.g. `"8GiB"`;
    required to judge fit on `cpu:N`). `suggest=False` skips the search for changes
    that fit. `full_depth=True` compiles a deep language model whole instead of
    extrapolating from shallow probes (`plan_algorithm`).

    Example:
        >>> p = jaxrl.plan("grpo", topology="v5e:4x4", mesh="fsdp=16",
        ...                model_config="examples/models/llama-3-8b.json")
        >>> print(p.report()); p.fits
    """
    from jaxrl import api

    target = resolve_topology(topology, device_memory)
    run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in api.RUN_FIELDS}
    run = _plan_run(run_kwargs, sweep)
    module = algorithms.get(algorithm)
    field_names = {f.name for f in dataclasses.fields(module.Config)}
    devices = run.num_devices or target.num_devices
    if run.num_devices is not None and not 1 <= run.num_devices <= target.num_devices:
        raise ConfigError(
            f"invalid num_devices={run.num_devices}: {target.name} has {target.num_devices} devices"
        )
    axes = parse_mesh(mesh)
    overrides = {**kwargs, **mesh_overrides(algorithm, field_names, axes, devices, target)}
    model_hf = None
    if model_config is not None:
        model_hf = _read_model_config(model_config, field_names)
        overrides = {**overrides, **_model_fields(model_hf)}
        if overrides.get("model") is not None:
            raise ConfigError(
                "invalid model_config: give either model (a model directory) or "
                "model_config (an architecture to plan), not both"
            )
    config = api.make_config(algorithm, env, config_file, **overrides)
    result = plan_config(module, config, target, run, model_hf, full_depth)
    result.overrides = dict(overrides)
    if suggest and not result.fits:
        _suggest(result, module, config, target, run, model_hf, full_depth)
    return result


def _plan_run(run_kwargs: dict[str, Any], sweep: Any) -> driver.RunConfig:
    """The run options that change what is compiled; the others (run directory,
    checkpoints, logging) are accepted, so a `jaxrl train` command line plans as is."""
    kept = {k: run_kwargs[k] for k in ("num_seeds", "seed", "num_devices") if k in run_kwargs}
    return driver.RunConfig(**kept, sweep=cfg.parse_sweep(sweep), progress=False)


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


def _read_model_config(path: str | pathlib.Path, field_names: set[str]) -> dict[str, Any]:
    """A Hugging Face config.json (a file, or a directory holding one) as a dict."""
    if "model" not in field_names:
        raise ConfigError("invalid model_config: this algorithm has no language model")
    p = pathlib.Path(path)
    p = p / "config.json" if p.is_dir() else p
    if not p.is_file():
        raise ConfigError(f"invalid model_config={str(path)!r}: no such file (a config.json)")
    try:
        hf = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"invalid model_config={str(path)!r}: not JSON ({err})") from None
    from jaxrl.lm import ModelConfig

    try:
        ModelConfig.from_hf(hf)
    except (ValueError, KeyError) as err:
        raise ConfigError(f"invalid model_config={str(path)!r}: {err}") from None
    return hf


def _model_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The random-model size fields matching a Hugging Face architecture (so the run's
    config says which model was planned and its checks use its context length)."""
    heads = int(hf["num_attention_heads"])
    return {
        "num_layers": int(hf["num_hidden_layers"]),
        "hidden_size": int(hf["hidden_size"]),
        "num_heads": heads,
        "num_kv_heads": int(hf.get("num_key_value_heads") or heads),
        "mlp_size": int(hf["intermediate_size"]),
        "context_len": int(hf.get("max_position_embeddings", 4096)),
    }


def plan_config(
    module: Any,
    config: Any,
    target: Target,
    run: driver.RunConfig,
    model_hf: Mapping[str, Any] | None = None,
    full_depth: bool = False,
) -> Plan:
    """Builds the algorithm for `config` and plans it (no suggestions)."""
    algo = module.make(config)
    if model_hf is not None:
        _replace_model(algo, model_hf)
    return plan_algorithm(algo, target, run, full_depth=full_depth)


def _replace_model(algo: Any, hf: Mapping[str, Any]) -> None:
    """The algorithm's model becomes the architecture of `hf` (the task's tokenizer stays:
    its vocabulary is a prefix of the model's)."""
    from jaxrl.lm import ModelConfig, Transformer

    c = algo.config
    model_config = ModelConfig.from_hf(dict(hf), dtype=c.dtype)
    algo.model = Transformer(model_config, remat=c.remat)


# Language models deeper than this are compiled at PROBE_LAYERS layers and their
# per-layer growth extrapolated (see `plan_algorithm`).
MAX_EXACT_LAYERS = 4
PROBE_LAYERS = (1, 2)
# Steps compiled at once. One: the main thread traces and lowers the next step while
# the pool compiles the previous one (XLA compiles outside the GIL). Two compiles at
# once gained little and cost a gigabyte: the 8B-shaped GRPO plan on v5e:4x4 (slow
# test in tests/test_plan.py) took 69 s and 3.8 GB of peak RSS with two, 74 s and
# 2.8 GB with one (quiet 2-core machine, 2026-11-27; CI's machine reached 4.1 GB).
COMPILE_THREADS = 1


def plan_algorithm(
    algo: Algorithm, target: Target, run: driver.RunConfig, *, full_depth: bool = False
) -> Plan:
    """Compiles every step of `algo` for `target` and measures it (module docstring).

    A language model deeper than `MAX_EXACT_LAYERS` is, unless `full_depth`, compiled
    at `PROBE_LAYERS` layers (its layers are unrolled, and XLA's TPU compiler takes
    minutes per layer of an 8B model on two cores): the state's bytes are those of the
    full model (exact, from its abstract state and shardings), the KV cache is computed
    for every layer, and the temporaries, non-donated outputs, FLOPs and traffic of each
    step are the probes' values extended linearly to the model's depth.
    """
    check_algorithm(algo)
    run = run.validate(algo.sweepable)
    layers = _num_layers(algo)
    with futures.ThreadPoolExecutor(COMPILE_THREADS) as pool:
        if layers is None or layers <= MAX_EXACT_LAYERS or full_depth:
            return _resolve(_plan_compiled(algo, target, run, pool))
        full = _resolve(_plan_compiled(algo, target, run, pool, compile_steps=False))
        probes = [_plan_compiled(_at_depth(algo, d), target, run, pool) for d in PROBE_LAYERS]
        probes = [_resolve(p) for p in probes]
    full.steps = [
        _extrapolate(step, [p.step(step.name) for p in probes], layers) for step in full.steps
    ]
    return full


def _resolve(p: Plan) -> Plan:
    """Waits for the plan's compiles (its steps are futures until then)."""
    p.steps = [s.result() if isinstance(s, futures.Future) else s for s in p.steps]
    return p


def _num_layers(algo: Any) -> int | None:
    config = getattr(getattr(algo, "model", None), "config", None)
    return getattr(config, "num_hidden_layers", None)


def _at_depth(algo: Any, layers: int) -> Any:
    """A shallow copy of `algo` whose model has `layers` layers (a probe)."""
    import copy

    from jaxrl.lm import Transformer

    probe = copy.copy(algo)
    model = algo.model
    probe.model = Transformer(model.config.replace(num_hidden_layers=layers), remat=model.remat)
    return probe


def _extrapolate(full: StepPlan, probes: list[StepPlan], layers: int) -> StepPlan:
    """`full` (state rows of the whole model, nothing compiled) completed from probes at
    `PROBE_LAYERS` layers: per-layer growth times the model's depth."""
    (d1, a), (d2, b) = zip(PROBE_LAYERS, probes, strict=True)
    note = (
        f"an estimate: compiled at {d1} and {d2} layers, per-layer growth extended to "
        f"{layers}; --full-depth compiles all of them"
    )
    seconds = sum(p.compile_seconds for p in probes)
    if a.out_of_memory or b.out_of_memory:
        worst = b if b.out_of_memory else a
        return dataclasses.replace(
            worst,
            note=f"{note}: XLA ran out of HBM already at {d2 if b.out_of_memory else d1} layers",
            compile_seconds=seconds,
            memory={**full.memory, **_non_state(worst)},
        )

    def extend(x1: float, x2: float) -> float:
        return max(0.0, x2 + (layers - d2) * (x2 - x1) / (d2 - d1))

    raw_a, raw_b = a.memory_analysis, b.memory_analysis
    outputs = extend(_not_donated(raw_a), _not_donated(raw_b))
    temp = extend(raw_a["temp_size_in_bytes"], raw_b["temp_size_in_bytes"])
    kv = full.memory.get("KV cache", 0)
    rows = {k: v for k, v in full.memory.items() if k not in _DERIVED_ROWS}
    rows["step inputs (batch)"] = b.memory["step inputs (batch)"]
    rows["outputs (not donated)"] = int(outputs)
    if kv:
        rows["KV cache"] = int(min(kv, temp))
    rows["activations and temporaries"] = int(temp - rows.get("KV cache", 0))
    rows[PROGRAM_ROW] = int(extend(_program_bytes(raw_a), _program_bytes(raw_b)))
    return dataclasses.replace(
        full,
        memory=rows,
        total=int(sum(rows.values())),
        memory_analysis={k: int(extend(raw_a[k], raw_b[k])) for k in raw_b},
        flops=extend(a.flops, b.flops),
        bytes_accessed=extend(a.bytes_accessed, b.bytes_accessed),
        xla_flops=extend(a.xla_flops, b.xla_flops),
        loops_exact=a.loops_exact and b.loops_exact,
        compile_seconds=seconds,
        note=note,
    )


PROGRAM_ROW = "program and runtime (XLA peak - the rest)"
_DERIVED_ROWS = (
    "step inputs (batch)",
    "outputs (not donated)",
    "KV cache",
    "activations and temporaries",
    PROGRAM_ROW,
)


def _program_bytes(raw: Mapping[str, int]) -> int:
    summed = raw["argument_size_in_bytes"] + _not_donated(raw) + raw["temp_size_in_bytes"]
    return max(0, raw.get("peak_memory_in_bytes", 0) - summed)


def _non_state(step: StepPlan) -> dict[str, int]:
    return {k: v for k, v in step.memory.items() if k in _DERIVED_ROWS}


def _not_donated(raw: Mapping[str, int]) -> int:
    return max(0, raw["output_size_in_bytes"] - raw["alias_size_in_bytes"])


def _plan_compiled(
    algo: Algorithm,
    target: Target,
    run: driver.RunConfig,
    pool: futures.Executor,
    *,
    compile_steps: bool = True,
) -> Plan:
    """The abstract state and steps of `algo` on `target`'s mesh; each step compiled on
    `pool` and measured (or, without `compile_steps`, only its state rows and KV cache).
    Its `steps` are futures until `_resolve`."""
    agents = driver.make_agents(algo, run)
    n = agents.num_agents
    with mesh_lib.target_devices(target.devices):
        mesh = algo.make_mesh(run.num_devices)
    _check_model_dims(algo, mesh)
    abstract = jax.eval_shape(
        lambda k, h: driver.init_agents(algo, k, h, None), agents.keys, agents.hparams
    )
    shardings = algo.state_sharding(abstract, mesh, n)
    state = _with_shardings(abstract, shardings)
    steps = _Steps(algo, state, shardings, mesh, n, compile_steps, pool)
    if not algo.staged:
        steps.add("update", type(algo).update, driver.agents_update(algo, n), ())
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
    )


class _Steps:
    """Compiles and measures steps that take the state (donated) and inputs, as the
    driver's steppers jit them: `(state, ...) -> (state, replicated outputs)`.

    Tracing runs here; compiling runs on `pool` (XLA compiles outside the GIL, so the
    next step traces while the previous one compiles); `plans` holds futures."""

    def __init__(self, algo, state, shardings, mesh, num_agents, compile_steps, pool):
        self.algo, self.state, self.shardings, self.mesh = algo, state, shardings, mesh
        self.num_agents, self.compile_steps, self.pool = num_agents, compile_steps, pool
        self.plans: list[Any] = []

    def add(self, name: str, method: Any, fn: Any, inputs: tuple[Any, ...], kv_cache=None):
        description = _doc(method)
        if not self.compile_steps:
            rows = {
                **_state_rows(self.algo, self.state),
                "step inputs (batch)": _tree_bytes(inputs),
            }
            if kv_cache:
                rows["KV cache"] = kv_cache
            done: futures.Future = futures.Future()
            done.set_result(
                StepPlan(name, description, rows, sum(rows.values()), {}, 0.0, 0.0, 0.0, True, 0.0)
            )
            self.plans.append(done)
            return
        out_shardings = (self.shardings, mesh_lib.replicated(self.mesh))
        in_shardings = (self.shardings, *(_shardings_of(x) for x in inputs))
        start = time.perf_counter()
        traced = jax.jit(
            fn, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=0
        ).trace(self.state, *inputs)
        lowered = traced.lower()
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
                    name, description, self.algo, self.state, inputs, required, seconds, kv_cache
                )
            seconds = traced_seconds + time.perf_counter() - begin
            return _measure(
                name,
                description,
                compiled,
                traced.jaxpr,
                seconds,
                self.algo,
                self.state,
                inputs,
                kv_cache,
            )

        self.plans.append(self.pool.submit(compile_and_measure))


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


def _staged_steps(algo: Algorithm, run: driver.RunConfig, steps: _Steps) -> None:
    """`collect` (after a host `prepare`) and `learn`, with the batch `process` makes
    from dummy data of the collected shapes (the host phases are cheap and shape-stable)."""
    cls, n, mesh = type(algo), steps.num_agents, steps.mesh
    host_state = algo.init_host_state(run.seed, n)
    inputs: tuple[Any, ...] = ()
    collected: Any = None
    if cls.prepare is not Algorithm.prepare:
        raw, host_state = algo.prepare(host_state)
        inputs = (_host_spec(algo, raw, mesh, n),)
    if cls.collect is not Algorithm.collect:
        fn = driver.agents_fn(algo.collect, n)
        out = jax.eval_shape(fn, steps.state, *inputs)[1]
        steps.add("collect", cls.collect, fn, inputs, _kv_cache_bytes(algo, mesh, out, n))
        collected = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), out)
    batch, _, _ = algo.process(collected, host_state)
    batch_spec = _host_spec(algo, batch, mesh, n)
    steps.add("learn", cls.learn, driver.agents_fn(algo.learn, n), (batch_spec,))


def _host_spec(algo: Algorithm, batch: Any, mesh: Any, n: int) -> Any:
    """Abstract values of a host batch, laid out by `algo.batch_sharding` (as the driver
    does), after checking that every sharded dimension divides."""
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), batch)
    shardings = algo.batch_sharding(abstract, mesh, n)
    _check_divisible(algo, abstract, shardings)
    return _with_shardings(abstract, shardings)


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


# ---------------------------------------------------------------------------- checks
def _check_model_dims(algo: Any, mesh: Any) -> None:
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
                    fits = [d for d in _divisors(mesh.devices.size) if dim % d == 0]
                    raise ConfigError(
                        f"invalid mesh {axis}={size}: it does not divide the model's "
                        f"{field}={dim} ({logical} is sharded over {axis}), so those weights "
                        f"would be replicated on every device; {axis} sizes that divide both "
                        f"it and the {mesh.devices.size} devices: {fits}"
                    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_divisible(algo: Any, abstract: Any, shardings: Any) -> None:
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


# ---------------------------------------------------------------------------- measuring
def _leaf_bytes(leaf: Any) -> int:
    """Per-device bytes of an abstract, sharded leaf."""
    shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
    return int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize


def _tree_bytes(tree: Any) -> int:
    return sum(_leaf_bytes(x) for x in jax.tree.leaves(tree))


def _state_rows(algo: Algorithm, state: Any) -> dict[str, int]:
    """The state's per-device bytes by role: parameters, optimizer state, frozen
    parameters (`checkpoint_exclude`, e.g. a reference model), and the rest."""
    rows: dict[str, int] = {}
    if not dataclasses.is_dataclass(state):
        return {"state": _tree_bytes(state)}
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    rows["parameters"] = _tree_bytes(fields.pop("params", None))
    if "opt_state" in fields:
        rows["optimizer state"] = _tree_bytes(fields.pop("opt_state"))
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


# ---------------------------------------------------------------------------- loop-aware cost
@dataclasses.dataclass
class MatmulCost:
    """Matmul FLOPs and operand bytes of a jaxpr (`exact` False: a loop of unknown trip
    count was counted once)."""

    flops: float = 0.0
    bytes: float = 0.0
    exact: bool = True

    def add(self, other: MatmulCost, times: float = 1.0) -> None:
        self.flops += times * other.flops
        self.bytes += times * other.bytes
        self.exact &= other.exact


def _aval_bytes(aval: Any) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class MatmulOp:
    """One `dot_general` or `conv_general_dilated` equation of a jaxpr and how often it
    runs (`times`: the product of the trip counts of the loops around it). `eqn` is the
    jaxpr equation, so the same product can be rebuilt and timed alone
    (`eqn.primitive.bind(lhs, rhs, **eqn.params)`; benchmarks/matmul_floor.py does)."""

    eqn: Any
    times: float
    flops: float
    """2 x multiply-adds of one execution."""
    bytes: float
    """Operand and result bytes of one execution."""

    @property
    def key(self) -> tuple:
        """Equal for products of the same primitive, operand shapes, dtypes and params."""
        lhs, rhs = (v.aval for v in self.eqn.invars[:2])
        params = tuple(sorted((k, repr(v)) for k, v in self.eqn.params.items()))
        return (self.eqn.primitive.name, lhs.shape, str(lhs.dtype), rhs.shape,
                str(rhs.dtype), params)  # fmt: skip


def matmul_ops(jaxpr: Any, loops: bool = True) -> tuple[list[MatmulOp], bool]:
    """Every `dot_general` and `conv_general_dilated` in `jaxpr` (nested jaxprs
    included), with scan bodies weighted by their length and while bodies by their trip
    count when `loops` (else every body once, as XLA's cost analysis counts them), and
    whether every trip count was known.

    A while loop's trip count is read from a `t < limit` test of its condition on a
    carried counter with a known start (a literal, or the limit a previous loop ran
    to): an upper bound when the loop can also stop early (the sampler's EOS exit). A
    `cond` contributes its costliest branch. A `shard_map` body, whose shapes are one
    device's share, counts once per device of its mesh axes, so that the FLOPs are the
    whole program's inside it as outside (where shapes are global).
    """
    ops: list[MatmulOp] = []
    exact = _collect_matmuls(jaxpr, loops, 1.0, ops)
    return ops, exact


def _collect_matmuls(jaxpr: Any, loops: bool, times: float, ops: list[MatmulOp]) -> bool:
    from jax._src import core

    inner = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    exact = True
    known: dict[Any, int] = {}
    for eqn in inner.eqns:
        prim = eqn.primitive.name
        if prim in ("dot_general", "conv_general_dilated"):
            lhs, rhs = (v.aval for v in eqn.invars[:2])
            out = eqn.outvars[0].aval
            if prim == "dot_general":
                (contract, _), _ = eqn.params["dimension_numbers"]
                flops = 2.0 * math.prod(out.shape) * math.prod(lhs.shape[i] for i in contract)
            else:
                out_features = rhs.shape[eqn.params["dimension_numbers"].rhs_spec[0]]
                flops = 2.0 * math.prod(out.shape) * math.prod(rhs.shape) / out_features
            nbytes = float(_aval_bytes(lhs) + _aval_bytes(rhs) + _aval_bytes(out))
            ops.append(MatmulOp(eqn, times, flops, nbytes))
        elif prim == "scan":
            length = eqn.params["length"] if loops else 1
            exact &= _collect_matmuls(eqn.params["jaxpr"], loops, times * length, ops)
        elif prim == "while":
            trip = _while_trip_count(eqn, known) if loops else 1
            if trip is None:
                trip, exact = 1, False
            exact &= _collect_matmuls(eqn.params["body_jaxpr"], loops, times * trip, ops)
        elif prim == "shard_map":  # its shapes are one device's share: count every device
            devices = math.prod(
                eqn.params["mesh"].shape[a] for a in eqn.params["newly_manual_axes"]
            )
            exact &= _collect_matmuls(eqn.params["jaxpr"], loops, times * devices, ops)
        elif prim == "cond":  # the costliest branch
            branches: list[tuple[list[MatmulOp], bool]] = []
            for branch in eqn.params["branches"]:
                branch_ops: list[MatmulOp] = []
                branches.append((branch_ops, _collect_matmuls(branch, loops, times, branch_ops)))
            branch_ops, branch_exact = max(
                branches, key=lambda b: sum(o.flops * o.times for o in b[0])
            )
            ops.extend(branch_ops)
            exact &= branch_exact
        else:
            for sub in core.jaxprs_in_params(eqn.params):
                exact &= _collect_matmuls(sub, loops, times, ops)
    return exact


def matmul_cost(jaxpr: Any, loops: bool = True) -> MatmulCost:
    """FLOPs (2 x multiply-adds) and bytes (operands + result) of every `dot_general`
    and `conv_general_dilated` in `jaxpr`, loops weighted as `matmul_ops` says."""
    ops, exact = matmul_ops(jaxpr, loops)
    return MatmulCost(
        flops=sum(o.flops * o.times for o in ops),
        bytes=sum(o.bytes * o.times for o in ops),
        exact=exact,
    )


def _while_trip_count(eqn: Any, known: dict[Any, int]) -> int | None:
    """Iterations of a while loop whose condition tests `counter < literal` (see
    `matmul_cost`); records the counter's final value for the loops after it."""
    from jax._src import core

    cond = eqn.params["cond_jaxpr"].jaxpr
    n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    carried = cond.invars[n_cond:]
    for ceqn in cond.eqns:
        if ceqn.primitive.name != "lt" or not isinstance(ceqn.invars[1], core.Literal):
            continue
        counter = ceqn.invars[0]
        if counter not in carried:
            continue
        k = carried.index(counter)
        limit = int(ceqn.invars[1].val)
        start_var = eqn.invars[n_cond + n_body + k]
        if isinstance(start_var, core.Literal):
            start = int(start_var.val)
        elif start_var in known:
            start = known[start_var]
        else:
            continue
        known[eqn.outvars[k]] = max(start, limit)
        return max(0, limit - start)
    return None


# ---------------------------------------------------------------------------- suggestions
def _suggest(
    result: Plan, module: Any, config: Any, target: Target, run, model_hf, full_depth: bool
) -> None:
    """Changes that make every step fit, each planned (compiled) before it is shown:
    more fsdp, remat, LoRA, more micro-batches; alone, then together."""
    fields = {f.name for f in dataclasses.fields(config)}
    devices = run.num_devices or target.num_devices
    candidates: list[tuple[str, str, dict[str, Any]]] = []
    if "mesh_fsdp" in fields:
        per_replica = config.mesh_tensor
        for fsdp in sorted(_divisors(devices // per_replica)):
            if fsdp > config.mesh_fsdp:
                tensor = f",tensor={per_replica}" if per_replica > 1 else ""
                candidates.append(
                    (
                        f"--mesh fsdp={fsdp}{tensor}",
                        f"parameters and optimizer state sharded over {fsdp} devices",
                        {"mesh_fsdp": fsdp},
                    )
                )
    if "remat" in fields and not config.remat:
        candidates.append(
            ("--remat", "layer activations recomputed in the backward pass", {"remat": True})
        )
    if "lora_rank" in fields and config.lora_rank == 0:
        candidates.append(
            (
                "--lora-rank 16",
                "LoRA adapters on a frozen base: no Adam moments for the base",
                {"lora_rank": 16},
            )
        )
    if "micro_batches" in fields:
        rows = getattr(config, "completions_per_update", None)
        for m in (2, 4, 8, 16):
            micro = config.micro_batches * m
            if rows is None or rows % (config.num_minibatches * micro) == 0:
                candidates.append(
                    (
                        f"--micro-batches {micro}",
                        f"gradient accumulated over {micro} smaller micro-batches",
                        {"micro_batches": micro},
                    )
                )
    # Alone: of each kind (fsdp sizes, micro-batch counts) the smallest change that fits,
    # searched from the largest down, so a kind that cannot fit costs one compile.
    kinds: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for candidate in candidates:
        kinds.setdefault(candidate[0].split()[0], []).append(candidate)
    for options in kinds.values():
        smallest = None
        for flags, why, change in reversed(options):
            fitted = _try(result, module, config, change, target, run, model_hf, full_depth)
            if fitted is None:
                break
            smallest = Suggestion(flags, why, fitted)
        if smallest is not None:
            result.suggestions.append(smallest)
    if result.suggestions:
        return
    combined: dict[str, Any] = {}
    combined_flags: list[str] = []
    best_fsdp = [c for c in candidates if c[0].startswith("--mesh")][-1:]
    others = [c for c in candidates if not c[0].startswith(("--mesh", "--micro"))]
    micro = [c for c in candidates if c[0].startswith("--micro")][-1:]
    for flags, _, change in best_fsdp + others + micro:
        combined.update(change)
        combined_flags.append(flags)
        fitted = _try(result, module, config, dict(combined), target, run, model_hf, full_depth)
        if fitted is not None:
            result.suggestions.append(Suggestion(" ".join(combined_flags), "together", fitted))
            return


def _try(result, module, config, change, target, run, model_hf, full_depth) -> dict | None:
    """Per-step totals of `config` with `change` if every step fits, else None (also
    None when the change is invalid for this model or mesh)."""
    label = ", ".join(f"{k}={v}" for k, v in change.items())
    result.tried.append(label)
    try:
        changed = cfg.replace(config, **change).validate()
        planned = plan_config(module, changed, target, run, model_hf, full_depth)
    except ConfigError:
        return None
    if not planned.fits:
        return None
    return {s.name: s.total for s in planned.steps}


# ---------------------------------------------------------------------------- the table
def _gib(n: float) -> str:
    if n >= GiB / 10:
        return f"{n / GiB:.2f} GiB"
    if n >= 2**20 / 10:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB"


def format_plan(p: Plan) -> str:
    """The plan as text: one table per step, the fit verdict, the roofline's assumptions
    and, when a step does not fit, the checked changes that would make it fit."""
    t, chip, budget = p.target, p.target.chip, p.target.memory_bytes
    lines = []
    if chip is not None:
        head = (
            f"{t.num_devices} x {chip.device_kind}: {_gib(chip.hbm_bytes)} HBM, "
            f"{chip.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16, "
            f"{chip.hbm_bandwidth / 1e9:.0f} GB/s per chip"
        )
    else:
        head = f"{t.num_devices} emulated CPU devices"
    if budget is not None and (chip is None or budget != chip.hbm_bytes):
        head += f"; budget {_gib(budget)} per device"
    lines.append(f"jaxrl plan: {p.algorithm} on {t.name} ({head})")
    mesh = " x ".join(f"{k}={v}" for k, v in p.mesh.items())
    lines.append(f"mesh: {mesh}; agents: {p.num_agents}")
    if p.model:
        lines.append(f"model: {p.model}")
    for s in p.steps:
        lines.append("")
        lines.append(f"step {s.name}: {s.description} (compiled in {s.compile_seconds:.1f} s)")
        if s.note:
            lines.append(f"  ({s.note})")
        lines.append(f"  {'per device':44s} {'bytes':>11s}")
        for label, value in s.memory.items():
            lines.append(f"  {label:44s} {_gib(value):>11s}")
        share = f"{s.total / budget:7.1%} of {_gib(budget)}" if budget else ""
        verdict = ""
        if budget:
            verdict = (
                "  fits"
                if s.total <= TIGHT * budget
                else ("  fits, tightly" if s.total <= budget else "  DOES NOT FIT")
            )
        lines.append(f"  {'total (peak)':44s} {_gib(s.total):>11s}  {share}{verdict}")
        mark = "" if s.loops_exact else " (a loop of unknown length counted once: a lower bound)"
        lines.append(f"  {'FLOPs':44s} {s.flops:11.3e}{mark}")
        lines.append(f"  {'HBM traffic':44s} {_gib(s.bytes_accessed):>11s}")
        if chip is not None:
            compute = s.flops / chip.peak_bf16_flops
            memory = s.bytes_accessed / chip.hbm_bandwidth
            bound = "compute" if compute >= memory else "memory"
            lines.append(
                f"  {'roofline step time':44s} {_seconds(max(compute, memory)):>11s}  "
                f"({bound}-bound: {_seconds(compute)} of FLOPs, {_seconds(memory)} of HBM traffic)"
            )
    lines.append("")
    lines.append(
        "per device: XLA's memory analysis of each compiled step (its peak; arguments by "
        "role from their shardings). FLOPs and HBM traffic: XLA's cost analysis, loop "
        "bodies weighted by their trip counts (sampling: every completion runs to "
        "max_new_tokens)."
    )
    if chip is not None:
        lines.append(
            f"roofline: max(FLOPs / {chip.peak_bf16_flops / 1e12:.0f} TFLOP/s, traffic / "
            f"{chip.hbm_bandwidth / 1e9:.0f} GB/s), the chip's published bf16 peak and HBM "
            "bandwidth; assumes compute and memory traffic overlap perfectly, ignores "
            "inter-chip communication and host phases; float32 matmuls run below the bf16 peak."
        )
    lines.append("")
    lines.extend(_verdict(p))
    return "\n".join(lines)


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def _verdict(p: Plan) -> list[str]:
    budget = p.target.memory_bytes
    if budget is None:
        return ["fit: not judged (no per-device memory for cpu:N; give --device-memory)"]
    failing = [s for s in p.steps if not s.fits(budget)]
    if not failing:
        return [f"fits: every step within {_gib(budget)} per device"]
    worst = max(failing, key=lambda s: s.total)
    lines = [
        f"does not fit: step {worst.name} needs {_gib(worst.total)} per device, "
        f"{worst.total / budget:.0%} of the {_gib(budget)} of each device"
        + (f" ({len(failing)} steps do not fit)" if len(failing) > 1 else "")
    ]
    if p.suggestions:
        lines.append(f"changes that fit (each compiled for {p.target.name}):")
        for s in p.suggestions:
            totals = ", ".join(f"{k} {_gib(v)}" for k, v in s.totals.items())
            lines.append(f"  {s.flags:28s} {s.why}: {totals}")
    elif p.tried:
        lines.append(
            f"no change tried fits ({'; '.join(p.tried)}): try a larger slice or a smaller batch"
        )
    return lines


class _CallableModule(types.ModuleType):
    """`jaxrl.plan(...)` is `jaxrl.plan.plan(...)`: the module is callable, so the public
    function and its module (`jaxrl.plan.resolve_topology`, ...) share one name."""

    def __call__(self, *args: Any, **kwargs: Any) -> Plan:
        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
