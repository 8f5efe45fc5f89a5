"""The Python API, mirroring the CLI: `jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)`."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training.driver import RunConfig, TrainResult
from jaxrl.training.driver import train as _train

_RUN_FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def make_config(
    algorithm: str,
    env: str | None = None,
    config_file: str | pathlib.Path | None = None,
    **overrides: Any,
) -> Any:
    """The algorithm's config: preset for `env`, then `config_file`, then `overrides`."""
    module = algorithms.get(algorithm)
    file_values = cfg.load_file(config_file) if config_file else {}
    env = env or file_values.pop("env", None) or "CartPole-v1"
    file_values.pop("env", None)
    _check_env(env)
    config = module.default_config(env)
    config = cfg.replace(config, **file_values)
    return cfg.replace(config, **overrides).validate()


def _check_env(env: Any) -> None:
    """Unknown ids fail as a `ConfigError` (CLI exit code 2) listing the registered ones."""
    from jaxrl import envs

    if isinstance(env, str) and ":" in env:  # adapter prefixes ("gymnax:...") are checked on make
        return
    try:
        envs.spec(env)
    except ValueError as err:
        raise cfg.ConfigError(f"invalid env={env!r}: {err}") from None


def train(
    algorithm: str = "ppo",
    env: str | None = None,
    *,
    config_file: str | pathlib.Path | None = None,
    sweep: Mapping[str, Sequence[float]] | Sequence[str] | None = None,
    **kwargs: Any,
) -> TrainResult:
    """Trains `algorithm` on `env`; returns a `TrainResult` (state, metrics, summary).

    Keyword arguments are either run options (`num_seeds`, `seed`, `run_dir`,
    `checkpoint_every`, `resume`, `log_every`, `num_devices`, `progress`,
    `tensorboard`, `keep_checkpoints`) or algorithm hyperparameters
    (e.g. `total_steps`, `lr`, `num_envs`). `sweep` is a grid over sweepable
    hyperparameters, trained vmapped in one program, e.g.
    `sweep={"lr": [1e-3, 3e-4], "ent_coef": [0.0, 0.01]}`.

    Example:
        >>> result = jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)
        >>> result.summary["final_return_mean"]
    """
    run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _RUN_FIELDS}
    run_kwargs["sweep"] = cfg.parse_sweep(sweep)
    if "run_dir" in run_kwargs and run_kwargs["run_dir"] is not None:
        run_kwargs["run_dir"] = str(run_kwargs["run_dir"])
    config = make_config(algorithm, env, config_file, **kwargs)
    return _train(algorithm, config, RunConfig(**run_kwargs))
