"""Multi-device layout for the LM: logical axis names per parameter, mapped to a mesh.

Every parameter path gets logical axis names (`logical_axes`, a table keyed by the
param's module and leaf name, so loaded checkpoints need no boxing). `rules` map logical
names to axes of a `jax.sharding.Mesh` with axes ("data", "fsdp", "tensor"):

    embed (hidden) -> fsdp      ZeRO-3 / FSDP style: each device holds a slice of every matrix
    heads, kv_heads, mlp, vocab -> tensor   Megatron-style tensor parallelism
    batch -> (data, fsdp)       activations are split over both data-like axes

A dimension whose size is not divisible by its mesh axes is left replicated, so any mesh
works for any model (at some efficiency cost). Everything runs under `jax.jit` with
shardings (GSPMD inserts the collectives); no pmap. Model code lives in model.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl.lm.config import ModelConfig
from jaxrl.lm.model import Transformer

MESH_AXES = ("data", "fsdp", "tensor")

Rules = Mapping[str, str | tuple[str, ...] | None]
DEFAULT_RULES: Rules = {
    "batch": ("data", "fsdp"),
    "length": None,
    "embed": "fsdp",
    "vocab": "tensor",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "head_dim": None,
    "layers": None,
    "norm": None,
    "lora_rank": None,
}

# (module name, leaf name) -> logical axes of the flax array (Dense kernels are (in, out)).
_PARAM_AXES: dict[tuple[str, str], tuple[str | None, ...]] = {
    ("embed_tokens", "embedding"): ("vocab", "embed"),
    ("q_proj", "kernel"): ("embed", "heads"),
    ("q_proj", "bias"): ("heads",),
    ("k_proj", "kernel"): ("embed", "kv_heads"),
    ("k_proj", "bias"): ("kv_heads",),
    ("v_proj", "kernel"): ("embed", "kv_heads"),
    ("v_proj", "bias"): ("kv_heads",),
    ("o_proj", "kernel"): ("heads", "embed"),
    ("o_proj", "bias"): ("norm",),
    ("gate_proj", "kernel"): ("embed", "mlp"),
    ("up_proj", "kernel"): ("embed", "mlp"),
    ("down_proj", "kernel"): ("mlp", "embed"),
    ("lm_head", "kernel"): ("embed", "vocab"),
    ("value_head", "kernel"): ("embed", None),
    ("value_head", "bias"): (None,),
}


def make_mesh(
    data: int = 1, fsdp: int = -1, tensor: int = 1, devices: Sequence[Any] | None = None
) -> Mesh:
    """Mesh with axes ("data", "fsdp", "tensor"); one size may be -1 (= use the rest).

    The LM's axis names over `jaxrl.training.mesh.make_mesh`, the one mesh builder.
    """
    from jaxrl.training.mesh import make_mesh as make_named_mesh

    return make_named_mesh(dict(zip(MESH_AXES, (data, fsdp, tensor), strict=True)), devices)


def logical_axes(path: tuple[str, ...], ndim: int) -> tuple[str | None, ...]:
    """Logical axis names of the param at `path` (unknown params are replicated)."""
    if path[-1] == "scale":  # RMSNorm weights (also per-head q/k norms): tiny, replicate
        return ("norm",) * ndim
    axes = _PARAM_AXES.get(tuple(path[-2:]))
    if axes is None or len(axes) != ndim:
        return (None,) * ndim
    return axes


def spec_for(
    axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules: Rules = DEFAULT_RULES
) -> PartitionSpec:
    """PartitionSpec for logical `axes`; drops mesh axes that do not divide the dim or repeat."""
    used: set[str] = set()
    out: list[Any] = []
    for name, dim in zip(axes, shape, strict=True):
        target = rules.get(name) if name is not None else None
        mesh_axes = (target,) if isinstance(target, str) else tuple(target or ())
        mesh_axes = tuple(a for a in mesh_axes if a not in used and mesh.shape[a] > 1)
        size = int(np.prod([mesh.shape[a] for a in mesh_axes]))
        if not mesh_axes or dim % size:
            out.append(None)
            continue
        used.update(mesh_axes)
        out.append(mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes)
    return PartitionSpec(*out)


def tree_shardings(tree: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Any:
    """NamedSharding for every array (or ShapeDtypeStruct) leaf of a params dict, by path."""
    inner = tree.get("params", tree) if isinstance(tree, Mapping) else tree
    flat = flax.traverse_util.flatten_dict(inner)
    out = {
        p: NamedSharding(mesh, spec_for(logical_axes(p, len(x.shape)), x.shape, mesh, rules))
        for p, x in flat.items()
    }
    out = flax.traverse_util.unflatten_dict(out)
    return {"params": out} if isinstance(tree, Mapping) and "params" in tree else out


def param_shapes(config: ModelConfig) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Flat {flax path: shape} of `Transformer(config)`'s params (abstract init, no FLOPs).

    Lives here because the shardings are computed from it, and `checkpoint.py` (which
    imports this module to place loaded weights) checks loaded tensors against it.
    """
    model = Transformer(config)
    tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
    abstract = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    return {k: tuple(v.shape) for k, v in flax.traverse_util.flatten_dict(abstract).items()}


def param_shardings(config: ModelConfig, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> dict:
    """{"params": NamedSharding pytree} for `Transformer(config)` (no arrays allocated)."""
    shapes = {
        p: jax.ShapeDtypeStruct(s, config.params_dtype) for p, s in param_shapes(config).items()
    }
    return tree_shardings({"params": flax.traverse_util.unflatten_dict(shapes)}, mesh, rules)


def shard_params(params: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Any:
    """Place a params dict on `mesh` according to `rules` (returns new sharded arrays)."""
    return jax.device_put(params, tree_shardings(params, mesh, rules))


def batch_sharding(mesh: Mesh, ndim: int = 2, rules: Rules = DEFAULT_RULES) -> NamedSharding:
    """Sharding for (batch, ...) inputs such as tokens and masks: batch over data x fsdp.

    The batch size must be divisible by data*fsdp.
    """
    target = rules.get("batch")
    mesh_axes = tuple(
        a for a in ((target,) if isinstance(target, str) else target or ()) if mesh.shape[a] > 1
    )
    first = None if not mesh_axes else mesh_axes if len(mesh_axes) > 1 else mesh_axes[0]
    return NamedSharding(mesh, PartitionSpec(first, *([None] * (ndim - 1))))


def cache_sharding(
    config: ModelConfig, mesh: Mesh, batch: int, rules: Rules = DEFAULT_RULES
) -> NamedSharding:
    """Sharding for each layer's KV-cache array: K^T (batch, kv_heads, head_dim, max_len)
    and V (batch, kv_heads, max_len, head_dim) alike.

    Batch over the batch axes and kv heads over `tensor` when divisible; length and
    head_dim stay whole, so one sharding fits both layouts. Apply it to every leaf:
    `jax.device_put(cache.k, cache_sharding(...))` places the whole tuple.
    """
    axes = ("batch", "kv_heads", "length", "head_dim")
    shape = (batch, config.num_key_value_heads, 1, config.head_dim)
    return NamedSharding(mesh, spec_for(axes, shape, mesh, rules))
