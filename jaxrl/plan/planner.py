"""The story of a plan (`plan`): the algorithm built from `jaxrl train`'s flags, its
steps compiled for the target and measured, deep models probed at two depths, and,
when a step does not fit, the algorithm's own suggestions (`plan_suggestions`), each
compiled before it is shown.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from concurrent import futures
from typing import Any

from jaxrl import algorithms, api
from jaxrl import config as cfg
from jaxrl.config import ConfigError
from jaxrl.lm import ModelConfig, Transformer
from jaxrl.training.contract import Algorithm, ConfigChange, check_algorithm
from jaxrl.training.run_config import PLANNED_RUN_FIELDS, RunConfig
from jaxrl.training.steppers import check_agent_execution

from .measure import DERIVED_ROWS, PROGRAM_ROW, not_donated, plan_steps, program_bytes, resolve
from .report import Plan, StepPlan, Suggestion
from .topology import Target, mesh_overrides, parse_mesh, resolve_topology


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
    the run options only those in `PLANNED_RUN_FIELDS` and `sweep` change what is
    compiled). `mesh` is `"data=4,fsdp=4"` or a dict of axis sizes; `model_config` a
    Hugging Face `config.json` (file or directory) whose architecture replaces the
    random model's, without weights or tokenizer (language-model algorithms);
    `device_memory` a per-device budget that replaces the chip's HBM (e.g. `"8GiB"`;
    required to judge fit on `cpu:N`). `suggest=False` skips the search for changes
    that fit. `full_depth=True` compiles a deep language model whole instead of
    extrapolating from shallow probes (`plan_algorithm`).

    Example:
        >>> p = jaxrl.plan.plan("grpo", topology="v5e:4x4", mesh="fsdp=16",
        ...                     model_config="examples/models/llama-3-8b.json")
        >>> print(p.report()); p.fits
    """
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
    algo = make_algorithm(module, config, model_hf)
    result = plan_algorithm(algo, target, run, full_depth=full_depth)
    result.overrides = dict(overrides)
    if suggest and not result.fits:
        _suggest(result, algo, module, config, target, run, model_hf, full_depth)
    return result


def _plan_run(run_kwargs: dict[str, Any], sweep: Any) -> RunConfig:
    """The run options that change what is compiled (`PLANNED_RUN_FIELDS`); the others
    (resuming, progress, TensorBoard) are accepted, so a `jaxrl train` command line
    plans as is."""
    kept = {k: run_kwargs[k] for k in PLANNED_RUN_FIELDS if k in run_kwargs}
    return RunConfig(**kept, sweep=cfg.parse_sweep(sweep), progress=False)


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
    run: RunConfig,
    model_hf: Mapping[str, Any] | None = None,
    full_depth: bool = False,
) -> Plan:
    """Builds the algorithm for `config` and plans it (no suggestions)."""
    algo = make_algorithm(module, config, model_hf)
    return plan_algorithm(algo, target, run, full_depth=full_depth)


def make_algorithm(module: Any, config: Any, model_hf: Mapping[str, Any] | None = None) -> Any:
    """`module.make(config)`, its model replaced by the architecture `model_hf` if given."""
    algo = module.make(config)
    if model_hf is not None:
        _replace_model(algo, model_hf)
    return algo


def _replace_model(algo: Any, hf: Mapping[str, Any]) -> None:
    """The algorithm's model becomes the architecture of `hf` (the task's tokenizer stays:
    its vocabulary is a prefix of the model's)."""
    c = algo.config
    model_config = ModelConfig.from_hf(dict(hf), dtype=c.dtype)
    algo.model = Transformer(model_config, remat=c.remat)


# Language models deeper than this are compiled at PROBE_LAYERS layers and their
# per-layer growth extrapolated (see `plan_algorithm`).
MAX_EXACT_LAYERS = 4
PROBE_LAYERS = (1, 2)
# Steps compiled at once. One: the main thread traces and lowers the next step while
# the pool compiles the previous one (XLA compiles outside the GIL). A second compile
# at once barely shortens a plan but holds a second large program in memory, which
# raises the peak RSS of an 8B-shaped plan by about a third (the slow test in
# tests/test_plan.py bounds it).
COMPILE_THREADS = 1


def plan_algorithm(
    algo: Algorithm, target: Target, run: RunConfig, *, full_depth: bool = False
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
    check_agent_execution(algo, run)
    layers = _num_layers(algo)
    with futures.ThreadPoolExecutor(COMPILE_THREADS) as pool:
        if layers is None or layers <= MAX_EXACT_LAYERS or full_depth:
            return resolve(plan_steps(algo, target, run, pool))
        full = resolve(plan_steps(algo, target, run, pool, compile_steps=False))
        probes = [plan_steps(_at_depth(algo, d), target, run, pool) for d in PROBE_LAYERS]
        probes = [resolve(p) for p in probes]
    full.steps = [
        _extrapolate(step, [p.step(step.name) for p in probes], layers) for step in full.steps
    ]
    return full


def _num_layers(algo: Any) -> int | None:
    config = getattr(getattr(algo, "model", None), "config", None)
    return getattr(config, "num_hidden_layers", None)


def _at_depth(algo: Any, layers: int) -> Any:
    """A shallow copy of `algo` whose model has `layers` layers (a probe)."""
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
            memory={**full.memory, **{k: v for k, v in worst.memory.items() if k in DERIVED_ROWS}},
        )

    def extend(x1: float, x2: float) -> float:
        return max(0.0, x2 + (layers - d2) * (x2 - x1) / (d2 - d1))

    raw_a, raw_b = a.memory_analysis, b.memory_analysis
    outputs = extend(not_donated(raw_a), not_donated(raw_b))
    temp = extend(raw_a["temp_size_in_bytes"], raw_b["temp_size_in_bytes"])
    kv = full.memory.get("KV cache", 0)
    rows = {k: v for k, v in full.memory.items() if k not in DERIVED_ROWS}
    rows["step inputs (batch)"] = b.memory["step inputs (batch)"]
    rows["outputs (not donated)"] = int(outputs)
    if kv:
        rows["KV cache"] = int(min(kv, temp))
    rows["activations and temporaries"] = int(temp - rows.get("KV cache", 0))
    rows[PROGRAM_ROW] = int(extend(program_bytes(raw_a), program_bytes(raw_b)))
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


# ---------------------------------------------------------------------------- suggestions
def _suggest(
    result: Plan,
    algo: Algorithm,
    module: Any,
    config: Any,
    target: Target,
    run: RunConfig,
    model_hf: Mapping[str, Any] | None,
    full_depth: bool,
) -> None:
    """The algorithm's suggestions (`Algorithm.plan_suggestions`: e.g. more fsdp, remat,
    LoRA, more micro-batches) that make every step fit, each planned (compiled) before
    it is shown: of each kind alone, the smallest change that fits, searched from the
    largest down so that a kind that cannot fit costs one compile; if none fits alone,
    the largest of each kind added together, in the algorithm's order, until they fit."""
    kinds: dict[str, list[ConfigChange]] = {}
    for change in algo.plan_suggestions(run.num_devices or target.num_devices):
        kinds.setdefault(change.kind, []).append(change)

    def fits(fields: Mapping[str, Any]) -> dict[str, int] | None:
        return _try(result, module, config, dict(fields), target, run, model_hf, full_depth)

    for options in kinds.values():
        smallest = None
        for change in reversed(options):
            fitted = fits(change.fields)
            if fitted is None:
                break
            smallest = Suggestion(change.flags, change.why, fitted)
        if smallest is not None:
            result.suggestions.append(smallest)
    if result.suggestions:
        return
    combined: dict[str, Any] = {}
    combined_flags: list[str] = []
    for options in kinds.values():
        combined.update(options[-1].fields)
        combined_flags.append(options[-1].flags)
        fitted = fits(combined)
        if fitted is not None:
            result.suggestions.append(Suggestion(" ".join(combined_flags), "together", fitted))
            return


def _try(
    result: Plan,
    module: Any,
    config: Any,
    change: dict[str, Any],
    target: Target,
    run: RunConfig,
    model_hf: Mapping[str, Any] | None,
    full_depth: bool,
) -> dict[str, int] | None:
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
