"""LoRA adapters (Hu et al. 2021, arXiv:2106.09685) as a separate, small params pytree.

A target Dense kernel W (in, out) is replaced by W + s * A @ B with A (in, r), B (r, out),
s = alpha / r (or alpha / sqrt(r) with rsLoRA, Kalajdzievski 2023). A is Gaussian and B
zero at init (LoRA sec. 4.1), so the adapted model starts exactly equal to the base.

Training only the adapters: keep the base params fixed and differentiate w.r.t. the
adapter pytree alone, e.g.

    opt = optax.adamw(1e-4); opt_state = opt.init(lora_params)
    loss = lambda lp: loss_fn(model.apply(apply_lora(params, lp, cfg), tokens))
    grads = jax.grad(loss)(lora_params)           # same structure as lora_params
    updates, opt_state = opt.update(grads, opt_state, lora_params)

`apply_lora` also stops gradients into the base params, so even a grad w.r.t. both is
zero for the base. Optimiser state and checkpoints then scale with the adapter size.
`merge_lora` + `checkpoint.save_pretrained` exports a plain model; `save_lora` /
`load_lora` store only the adapters (PEFT-style names, safetensors).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxrl.lm.checkpoint import hf_name
from jaxrl.lm.config import ModelConfig

LINEAR_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Which projections get adapters, their rank and scale."""

    targets: tuple[str, ...] | str = ("q_proj", "v_proj")  # or "all-linear"
    rank: int = 8
    alpha: float = 16.0
    use_rslora: bool = False  # scale alpha/sqrt(rank) instead of alpha/rank

    def __post_init__(self) -> None:
        if self.rank <= 0:
            raise ValueError(f"rank must be positive, got {self.rank}")
        bad = [t for t in self.target_modules if t not in LINEAR_TARGETS]
        if bad:
            raise ValueError(f"unknown LoRA targets {bad}; choose from {LINEAR_TARGETS}")

    @property
    def target_modules(self) -> tuple[str, ...]:
        if self.targets == "all-linear":
            return LINEAR_TARGETS
        if isinstance(self.targets, str):
            return (self.targets,)
        return tuple(self.targets)

    @property
    def scale(self) -> float:
        """s in W + s*A@B."""
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)


def _target_kernels(params: Any, lora_config: LoRAConfig) -> dict[tuple[str, ...], Any]:
    """{path of module: kernel} for every targeted Dense kernel in a params dict."""
    flat = flax.traverse_util.flatten_dict(params.get("params", params))
    targets = set(lora_config.target_modules)
    return {p[:-1]: v for p, v in flat.items() if p[-1] == "kernel" and p[-2] in targets}


def init_lora(key: jax.Array, config: ModelConfig, lora_config: LoRAConfig, params: Any) -> dict:
    """Adapter params {module path...: {"a": (in, r), "b": (r, out)}}, float32, B = 0.

    A ~ N(0, 1/in) keeps A@x at the scale of x; `config` is accepted for symmetry with
    the rest of the API (shapes are read from `params`).
    """
    del config
    kernels = _target_kernels(params, lora_config)
    if not kernels:
        raise ValueError(f"no parameters match LoRA targets {lora_config.target_modules}")
    keys = jax.random.split(key, len(kernels))
    flat = {}
    for k, (path, w) in zip(keys, sorted(kernels.items()), strict=True):
        fan_in, fan_out = w.shape
        a = jax.random.normal(k, (fan_in, lora_config.rank), jnp.float32) / math.sqrt(fan_in)
        flat[(*path, "a")] = a
        flat[(*path, "b")] = jnp.zeros((lora_config.rank, fan_out), jnp.float32)
    return flax.traverse_util.unflatten_dict(flat)


def _merge(params: Any, lora_params: dict, lora_config: LoRAConfig, stop_base: bool) -> Any:
    inner = params.get("params", params)
    flat = flax.traverse_util.flatten_dict(inner)
    if stop_base:
        flat = {p: jax.lax.stop_gradient(v) for p, v in flat.items()}
    adapters = flax.traverse_util.flatten_dict(lora_params)
    for path in {p[:-1] for p in adapters}:
        kernel = flat.get((*path, "kernel"))
        if kernel is None:
            raise KeyError(f"LoRA adapter {'/'.join(path)} has no matching kernel in params")
        a, b = adapters[(*path, "a")], adapters[(*path, "b")]
        delta = lora_config.scale * (a.astype(jnp.float32) @ b.astype(jnp.float32))
        flat[(*path, "kernel")] = (kernel.astype(jnp.float32) + delta).astype(kernel.dtype)
    out = flax.traverse_util.unflatten_dict(flat)
    return {"params": out} if "params" in params else out


def apply_lora(params: Any, lora_params: dict, lora_config: LoRAConfig) -> Any:
    """Base params with adapters merged in, for the forward pass (pure, jit-safe).

    Gradients flow only to `lora_params`: base params go through stop_gradient.
    """
    return _merge(params, lora_params, lora_config, stop_base=True)


def merge_lora(params: Any, lora_params: dict, lora_config: LoRAConfig) -> Any:
    """Plain params with W <- W + s*A@B, to export with `save_pretrained`."""
    return _merge(params, lora_params, lora_config, stop_base=False)


# -- adapter-only checkpoints ----------------------------------------------------------------


def save_lora(path: str | os.PathLike, lora_params: dict, lora_config: LoRAConfig) -> None:
    """Write only the adapters: `adapter_model.safetensors` + `adapter_config.json`.

    Names/layout follow PEFT (`...q_proj.lora_A.weight` (r, in), `lora_B.weight` (out, r)).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for p, v in flax.traverse_util.flatten_dict(lora_params).items():
        module = hf_name((*p[:-1], "kernel")).removesuffix(".weight")
        which = "lora_A" if p[-1] == "a" else "lora_B"
        # ours: a (in, r), b (r, out) -> PEFT/torch Linear: A (r, in), B (out, r)
        arr = np.ascontiguousarray(np.asarray(jax.device_get(v)).T)
        tensors[f"{_PEFT_PREFIX}{module}.{which}.weight"] = arr
    save_file(tensors, path / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    cfg = {
        "peft_type": "LORA",
        "r": lora_config.rank,
        "lora_alpha": lora_config.alpha,
        "use_rslora": lora_config.use_rslora,
        "target_modules": list(lora_config.target_modules),
        "bias": "none",
        "lora_dropout": 0.0,
    }
    (path / ADAPTER_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")


def load_lora(path: str | os.PathLike) -> tuple[dict, LoRAConfig]:
    """Read adapters written by `save_lora` -> (lora_params, LoRAConfig)."""
    path = Path(path)
    cfg = json.loads((path / ADAPTER_CONFIG).read_text())
    lora_config = LoRAConfig(
        targets=tuple(cfg["target_modules"]),
        rank=int(cfg["r"]),
        alpha=float(cfg["lora_alpha"]),
        use_rslora=bool(cfg.get("use_rslora", False)),
    )
    flat = {}
    with safe_open(path / ADAPTER_WEIGHTS, framework="np") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            module, which, _ = name.removeprefix(_PEFT_PREFIX).rsplit(".", 2)
            parts = module.split(".")
            if parts[0] == "model":
                parts = parts[1:]
            if parts[0] == "layers":
                parts = [f"layers_{parts[1]}", *parts[2:]]
            leaf = "a" if which == "lora_A" else "b"
            flat[(*parts, leaf)] = jnp.asarray(f.get_tensor(name).T)
    return flax.traverse_util.unflatten_dict(flat), lora_config
