"""RLPD's warm start (`init_from`): an offline run's actor and critics mapped onto RLPD's
squashed-Gaussian actor and critic ensemble.

What maps onto what (agent 0 of the run's newest checkpoint):

* **Critics** (every source's are an `EnsembleQ`): copied as they are, when the hidden
  sizes, activation, number of critics and LayerNorm agree with this config's.
* **Actor**, by the source's kind (`jaxrl/algorithms/actor_critic.py`), when hidden
  sizes, activation and LayerNorm agree:
  - `SquashedGaussianActor` (cql, sac-n; an online sac run): copied.
  - `GaussianActor` (iql): the hidden layers and the mean head are copied, so the mode
    `tanh(mean head)` is IQL's mean exactly; the log-std head becomes a constant (zero
    weights, a bias that `squash_log_std` maps to IQL's learned log std, now of the
    pre-tanh Gaussian).
  - `DeterministicActor` (td3-bc, rebrac): the hidden layers and the output layer (as the
    mean head) are copied, so the mode is the deterministic policy's action exactly; the
    log-std head gets zero weights and bias, the log std a fresh head starts near,
    `squash_log_std(0)` (std e^-1.5, about 0.22).
* **Observation normalisation** (a source trained with `normalize_obs`, as TD3+BC is by
  default): RLPD acts on raw observations, so the dataset's statistics are folded into
  the first layer of the actor and of the critics: `W' = W / sigma` on the observation's
  rows, `b' = b - (mu / sigma) W`, which computes the same function of the raw
  observation (up to float32 round-off).

Anything else is refused before training with a `ConfigError` naming the field that
differs and the value to set. IQL's value network has no counterpart in RLPD and is
left behind.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxrl import config as cfg
from jaxrl.algorithms.actor_critic import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    DeterministicActor,
    GaussianActor,
    SquashedGaussianActor,
)

__all__ = ["fold_obs_norm", "from_run", "map_actor"]

# tanh(raw) of the log-std head is kept this far inside (-1, 1), so that a log std at a
# bound of [LOG_STD_MIN, LOG_STD_MAX] maps to a finite bias.
_TANH_MARGIN = 1e-6


def from_run(agent: Any, source: Any, state: Any, run_dir: str) -> dict[str, Any]:
    """`{"actor", "critic"}` for RLPD `agent` from agent 0 of a restored run (`source`, the
    run's algorithm; `state`, its state with the agent axis); see the module docstring."""
    name = getattr(source, "name", type(source).__name__)
    where = f"invalid init_from={run_dir!r}"
    if not (hasattr(source, "actor") and hasattr(source, "critic")):
        raise cfg.ConfigError(
            f"{where}: a {name} run has no actor and critics to start from; use an offline "
            "run of cql, sac-n, iql, td3-bc or rebrac"
        )
    if source.config.env != agent.config.env:
        raise cfg.ConfigError(
            f"{where}: it trained on env={source.config.env!r}, this run's env is "
            f"{agent.config.env!r}; they must be the same"
        )
    params = jax.tree.map(lambda x: np.asarray(x[0]), state.params)
    actor = map_actor(source.actor, params["actor"], agent.actor, f"{where}: its {name} actor has")
    _check_fields(
        source.critic,
        agent.critic,
        ("hidden_sizes", "activation", "num_critics", "layer_norm"),
        f"{where}: its {name} critics have",
        {},
    )
    critic = params["critic"]
    if getattr(source.config, "normalize_obs", False):
        norm = jax.tree.map(lambda x: np.asarray(x[0]), state.obs_norm)
        actor = fold_obs_norm(actor, _first_layer(agent.actor), norm.mean, norm.scale)
        critic = fold_obs_norm(critic, _first_layer(agent.critic), norm.mean, norm.scale)
    return {"actor": actor, "critic": critic}


def map_actor(source: Any, params: Any, target: SquashedGaussianActor, what: str) -> Any:
    """The parameters of `target` (RLPD's actor) that act as the `source` actor's
    `params` (see the module docstring); `what` begins the error message."""
    fields = ("hidden_sizes", "activation", "layer_norm")
    _check_fields(source, target, fields, what, {"layer_norm": "actor_layer_norm"})
    if isinstance(source, SquashedGaussianActor):
        return params
    if not isinstance(source, GaussianActor | DeterministicActor):
        raise cfg.ConfigError(
            f"{what} the type {type(source).__name__}; rlpd starts from a "
            "SquashedGaussianActor, GaussianActor or DeterministicActor"
        )
    layers = params["params"]
    layer_norm, hidden = _layer_norm(source), len(source.hidden_sizes)
    torso = {k: v for k, v in layers.items() if _is_hidden(k, layer_norm, hidden)}
    mean_head = layers[_head(layer_norm, hidden, 0)]
    if isinstance(source, GaussianActor):
        log_std = np.clip(np.asarray(layers["log_std"], np.float64), LOG_STD_MIN, LOG_STD_MAX)
    else:
        log_std = np.full(mean_head["bias"].shape, _squash(0.0))
    std_head = {
        "kernel": np.zeros_like(mean_head["kernel"]),
        "bias": _unsquash(log_std).astype(mean_head["bias"].dtype),
    }
    return {
        "params": {
            **torso,
            _head(layer_norm, hidden, 0): mean_head,
            _head(layer_norm, hidden, 1): std_head,
        }
    }


def fold_obs_norm(params: Any, path: tuple[str, ...], mean: Any, scale: Any) -> Any:
    """`params` with the first layer at `path` (under `params["params"]`) computing on raw
    observations what it computed on `(obs - mean) / scale`: its kernel's first
    `obs_dim` input rows (the observation's; a critic's next rows are the action's) are
    divided by `scale` and its bias loses `(mean / scale) W`. Works for one layer
    (`kernel (in, H)`) and an ensemble's (`(N, in, H)`); computed in float64."""
    mean = np.asarray(mean, np.float64).reshape(-1)
    scale = np.asarray(scale, np.float64).reshape(-1)
    layers = params["params"]
    layer = _get(layers, path)
    kernel = np.asarray(layer["kernel"], np.float64)
    bias = np.asarray(layer["bias"], np.float64)
    obs_rows = kernel[..., : mean.size, :]
    bias = bias - np.einsum("d,...dh->...h", mean / scale, obs_rows)
    kernel = np.concatenate([obs_rows / scale[:, None], kernel[..., mean.size :, :]], axis=-2)
    dtype = layer["kernel"].dtype
    folded = {**layer, "kernel": kernel.astype(dtype), "bias": bias.astype(layer["bias"].dtype)}
    return {**params, "params": _set(layers, path, folded)}


# ----------------------------------------------------------------------------- helpers


def _check_fields(
    source: Any, target: Any, fields: tuple[str, ...], what: str, options: dict[str, str]
) -> None:
    """Raises `ConfigError` at the first of `fields` where the source network differs from
    RLPD's, naming RLPD's option for it (`options`, default the field's own name)."""
    for field in fields:
        theirs, ours = getattr(source, field, False), getattr(target, field, False)
        if field == "hidden_sizes":
            theirs, ours = tuple(theirs), tuple(ours)
        if theirs != ours:
            option = options.get(field, field)
            raise cfg.ConfigError(
                f"{what} {field}={theirs!r}, this rlpd config's {option}={ours!r}; they must "
                f"match (set {option}={theirs!r}, or train the offline run with {ours!r})"
            )


def _layer_norm(module: Any) -> bool:
    return bool(getattr(module, "layer_norm", False))


def _is_hidden(name: str, layer_norm: bool, hidden: int) -> bool:
    """Whether parameter group `name` of an actor is one of its hidden layers: the MLP, or
    with LayerNorm each `Dense_i` (i < hidden) and `LayerNorm_i` (`normed_mlp`)."""
    if not layer_norm:
        return name == "MLP_0"
    kind, _, index = name.partition("_")
    return kind == "LayerNorm" or (kind == "Dense" and int(index) < hidden)


def _head(layer_norm: bool, hidden: int, i: int) -> str:
    """The name flax gives an actor's `i`-th output layer (after its hidden layers)."""
    return f"Dense_{hidden + i}" if layer_norm else f"Dense_{i}"


def _first_layer(module: Any) -> tuple[str, ...]:
    """Path of a network's first dense layer under `params["params"]` (actors: the MLP's
    or `normed_mlp`'s; critics: inside the ensemble's `critics`)."""
    first = ("Dense_0",) if _layer_norm(module) else ("MLP_0", "Dense_0")
    return first if isinstance(module, SquashedGaussianActor) else ("critics", *first)


def _squash(raw: float) -> float:
    """`squash_log_std` in numpy: the log std a head's raw output `raw` gives."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(raw) + 1.0)


def _unsquash(log_std: np.ndarray) -> np.ndarray:
    """The inverse of `_squash`: the raw output whose log std is `log_std`."""
    t = 2.0 * (log_std - LOG_STD_MIN) / (LOG_STD_MAX - LOG_STD_MIN) - 1.0
    return np.arctanh(np.clip(t, -1.0 + _TANH_MARGIN, 1.0 - _TANH_MARGIN))


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: Any, path: tuple[str, ...], value: Any) -> Any:
    if not path:
        return value
    return {**tree, path[0]: _set(tree[path[0]], path[1:], value)}
