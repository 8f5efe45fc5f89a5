"""Hugging Face checkpoint I/O: `config.json` + `*.safetensors` <-> (Transformer, params).

Reads a local directory only (never the network), single-file or sharded with
`model.safetensors.index.json`, through the safetensors numpy API (no torch). Writes the
same layout back so transformers and other tools can load it. The flax <-> HF name map
is derived from the model's own parameter tree (`hf_name`), so every expected tensor is
checked by name and shape. Sampling, sharding rules and adapters live elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers numpy "bfloat16" so safetensors can read bf16)
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxrl.lm.config import ModelConfig
from jaxrl.lm.model import Transformer
from jaxrl.lm.sharding import param_shapes, param_shardings  # param_shapes re-exported

CONFIG_NAME = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3  # transformers' classic "5GB" shard size
# Tensors HF checkpoints may carry that we recompute or do not use.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

Path_ = str | os.PathLike


# -- name mapping -------------------------------------------------------------------------


def hf_name(path: tuple[str, ...]) -> str:
    """HF tensor name for a flax param path, e.g. ('layers_0','mlp','up_proj','kernel') ->
    'model.layers.0.mlp.up_proj.weight'."""
    *mods, leaf = path
    suffix = "bias" if leaf == "bias" else "weight"
    top = mods[0]
    if top in ("lm_head", "value_head"):
        return f"{top}.{suffix}"
    if top.startswith("layers_"):
        mods = ["layers", top.removeprefix("layers_"), *mods[1:]]
    return ".".join(["model", *mods, suffix])


def _is_transposed(path: tuple[str, ...]) -> bool:
    """Flax Dense kernels are (in, out); torch Linear weights are (out, in)."""
    return path[-1] == "kernel"


# -- reading ------------------------------------------------------------------------------


def _weight_files(path: Path) -> dict[str, Path]:
    """{tensor name: file} for a checkpoint directory (index, single file, or any *.safetensors)."""
    index = path / INDEX_FILE
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: path / fname for name, fname in weight_map.items()}
    files = (
        [path / SINGLE_FILE]
        if (path / SINGLE_FILE).exists()
        else sorted(path.glob("*.safetensors"))
    )
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {path}")
    out: dict[str, Path] = {}
    for f in files:
        with safe_open(f, framework="np") as st:
            out.update({name: f for name in st.keys()})  # noqa: SIM118 (safe_open has no iter)
    return out


def read_hf_config(path: Path_) -> dict:
    """The raw `config.json` dict of a checkpoint directory."""
    cfg_file = Path(path) / CONFIG_NAME
    if not cfg_file.exists():
        raise FileNotFoundError(f"{cfg_file} not found (expected a HF checkpoint directory)")
    return json.loads(cfg_file.read_text())


def load_params(
    path: Path_,
    config: ModelConfig,
    *,
    shardings: Any | None = None,
) -> dict:
    """Read safetensors weights of `config`'s architecture into a flax params dict.

    Each tensor is checked (missing -> KeyError naming it; wrong shape -> ValueError with
    both shapes), converted to `config.param_dtype` and placed on device -- with its
    `jax.sharding.Sharding` from the matching `shardings` pytree if given, so a large model
    never has to fit on one device. Returns {"params": ...}.
    """
    path = Path(path)
    files = _weight_files(path)
    expected = param_shapes(config)
    flat_shardings = (
        flax.traverse_util.flatten_dict(shardings["params"]) if shardings is not None else {}
    )
    flat: dict[tuple[str, ...], jax.Array] = {}
    handles: dict[Path, Any] = {}
    with contextlib.ExitStack() as stack:
        for p, shape in expected.items():
            name = hf_name(p)
            if name not in files:
                if p[0] == "value_head":  # base LMs have none: start it at zero (V = 0)
                    flat[p] = jnp.zeros(shape, config.params_dtype)
                    continue
                raise KeyError(f"checkpoint {path} is missing tensor {name!r}")
            f = files[name]
            if f not in handles:
                handles[f] = stack.enter_context(safe_open(f, framework="np"))
            h = handles[f]
            hf_shape = tuple(h.get_slice(name).get_shape())
            want = shape[::-1] if _is_transposed(p) else shape
            if hf_shape != want:
                raise ValueError(
                    f"tensor {name!r} has shape {hf_shape} in the checkpoint, "
                    f"expected {want} for this config"
                )
            arr = h.get_tensor(name)
            if _is_transposed(p):
                arr = arr.T
            arr = np.asarray(arr, dtype=config.params_dtype)
            sharding = flat_shardings.get(p)
            flat[p] = jax.device_put(arr, sharding) if sharding is not None else jnp.asarray(arr)
    used = {hf_name(p) for p in expected}
    unused = [
        n
        for n in files
        if n not in used
        and not n.endswith(_IGNORED_SUFFIXES)
        and not (config.tie_word_embeddings and n == "lm_head.weight")
    ]
    if unused:
        warnings.warn(f"ignoring {len(unused)} unexpected tensors, e.g. {unused[:3]}", stacklevel=2)
    return {"params": flax.traverse_util.unflatten_dict(flat)}


def from_pretrained(
    path: Path_,
    dtype: str | Any = "float32",
    *,
    param_dtype: str | Any = "float32",
    mesh: jax.sharding.Mesh | None = None,
    **overrides: Any,
) -> tuple[Transformer, dict]:
    """Load a local HF checkpoint directory -> (Transformer, {"params": ...}).

    dtype: compute dtype ("float32" | "bfloat16"); param_dtype: storage dtype of params.
    mesh: if given, params are placed sharded on it by `sharding.DEFAULT_RULES`.
    overrides: extra `ModelConfig` fields (e.g. value_head=True). No network access.
    """
    hf = read_hf_config(path)
    config = ModelConfig.from_hf(
        hf, dtype=jnp.dtype(dtype).name, param_dtype=jnp.dtype(param_dtype).name, **overrides
    )
    shardings = None
    if mesh is not None:
        shardings = param_shardings(config, mesh)
    return Transformer(config), load_params(path, config, shardings=shardings)


# -- writing ------------------------------------------------------------------------------


def to_hf_tensors(params: dict, dtype: str | Any | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Yield (HF name, host numpy array) for every param, transposing Dense kernels."""
    inner = params.get("params", params)
    for p, leaf in flax.traverse_util.flatten_dict(inner).items():
        arr = np.asarray(jax.device_get(leaf))
        if _is_transposed(p):
            arr = arr.T
        if dtype is not None:
            arr = arr.astype(jnp.dtype(dtype))
        yield hf_name(p), np.ascontiguousarray(arr)


def save_pretrained(
    path: Path_,
    config: ModelConfig,
    params: dict,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    dtype: str | Any | None = None,
) -> None:
    """Write `config.json` + safetensors in HF layout (loadable by transformers).

    Above `max_shard_bytes` the weights are split into `model-0000i-of-0000n.safetensors`
    with a `model.safetensors.index.json`. dtype: optional storage dtype (default: as the
    params are). Old weight files of ours in `path` are replaced.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in [*path.glob("model*.safetensors"), path / INDEX_FILE]:
        if old.exists():
            old.unlink()
    hf = config.to_hf()
    if dtype is not None:
        hf["torch_dtype"] = jnp.dtype(dtype).name
    (path / CONFIG_NAME).write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")

    shards: list[dict[str, np.ndarray]] = [{}]
    sizes = [0]
    for name, arr in to_hf_tensors(params, dtype):
        if sizes[-1] and sizes[-1] + arr.nbytes > max_shard_bytes:
            shards.append({})
            sizes.append(0)
        shards[-1][name] = arr
        sizes[-1] += arr.nbytes
    metadata = {"format": "pt"}  # transformers refuses safetensors files without it
    if len(shards) == 1:
        save_file(shards[0], path / SINGLE_FILE, metadata=metadata)
        return
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, path / fname, metadata=metadata)
        weight_map.update({name: fname for name in shard})
    index = {"metadata": {"total_size": sum(sizes)}, "weight_map": dict(sorted(weight_map.items()))}
    (path / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
