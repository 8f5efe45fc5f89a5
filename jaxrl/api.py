"""The Python API, mirroring the CLI: `jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)`.

This layer resolves names: an algorithm name to its module (the registry in
`jaxrl.algorithms`), an environment id to its preset. The driver below it takes
algorithm objects and knows no names.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training.driver import RunConfig, TrainResult
from jaxrl.training.driver import train as _train

# Keyword arguments of `train` that describe how to run, not what is learned (the CLI too).
RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))


def default_env(module: ModuleType) -> str:
    """The environment an algorithm trains on when none is given: its config's `env`
    default (CartPole-v1 for the discrete-action algorithms, Pendulum-v1 for SAC and TD3)."""
    return module.Config().env


def uses_env(module: ModuleType) -> bool:
    """Whether the algorithm trains in an environment (its config has an `env` field);
    language-model algorithms train on a task instead."""
    return "env" in {f.name for f in dataclasses.fields(module.Config)}


def make_config(
    algorithm: str,
    env: str | None = None,
    config_file: str | pathlib.Path | None = None,
    **overrides: Any,
) -> Any:
    """The algorithm's config: preset for `env`, then `config_file`, then `overrides`."""
    module = algorithms.get(algorithm)
    file_values = cfg.load_file(config_file) if config_file else {}
    if uses_env(module):
        env = env or file_values.pop("env", None) or default_env(module)
        file_values.pop("env", None)
        _check_env(env)
        config = module.default_config(env)
    else:
        if env is not None:
            raise cfg.ConfigError(
                f"invalid env={env!r}: {algorithm} trains on a task, not an environment "
                "(see its --task)"
            )
        config = module.default_config()
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
    init_params: Any = None,
    **kwargs: Any,
) -> TrainResult:
    """Trains `algorithm` on `env` (or its task); returns a `TrainResult`.

    Keyword arguments are either run options (`RUN_FIELDS`: `num_seeds`, `seed`,
    `run_dir`, `checkpoint_every`, `checkpoint_minutes`, `resume`, `fresh`,
    `log_every`, `num_devices`, `agent_execution`, `progress`, `tensorboard`,
    `keep_checkpoints`) or the algorithm's hyperparameters (e.g. `total_steps`, `lr`,
    `num_envs`). `sweep` is a grid over sweepable hyperparameters, trained in one
    program like the seeds, e.g. `sweep={"lr": [1e-3, 3e-4], "ent_coef": [0.0, 0.01]}`; a swept
    hyperparameter may not also be given as a keyword or in `config_file`.
    `init_params` warm-starts every agent from given parameters.

    Example:
        >>> result = jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)
        >>> result.summary["final_return_mean"]
    """
    run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_FIELDS}
    run_kwargs["sweep"] = cfg.parse_sweep(sweep)
    file_values = cfg.load_file(config_file) if config_file else {}
    both = sorted(set(run_kwargs["sweep"]) & (set(kwargs) | set(file_values)))
    if both:
        name = both[0]
        where = (
            f"{name}={kwargs[name]!r}"
            if name in kwargs
            else f"{name}={file_values[name]!r} in {config_file}"
        )
        raise cfg.ConfigError(
            f"invalid sweep: {both} also given as a single value ({where}); give each "
            "hyperparameter either as a sweep or as a value"
        )
    if run_kwargs.get("run_dir") is not None:
        run_kwargs["run_dir"] = str(run_kwargs["run_dir"])
    module = algorithms.get(algorithm)
    algo = module.make(make_config(algorithm, env, config_file, **kwargs))
    return _train(algo, RunConfig(**run_kwargs), init_params=init_params)
