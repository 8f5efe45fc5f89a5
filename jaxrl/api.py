"""The Python API, mirroring the CLI: `jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)`.

This layer resolves names: an algorithm name to its module (the registry in
`jaxrl.algorithms`), an environment id to its preset. The driver below it takes
algorithm objects and knows no names.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from jaxrl import algorithms
from jaxrl import config as cfg
from jaxrl.training.contract import acts_in_env
from jaxrl.training.driver import RunConfig, TrainResult
from jaxrl.training.driver import train as _train

# Keyword arguments of `train` that describe how to run, not what is learned (the CLI too).
RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig))


def default_env(module: Any) -> str:
    """The environment an algorithm trains on when none is given: its config's `env`
    default (CartPole-v1 for the discrete-action algorithms, Pendulum-v1 for SAC and TD3).
    `module` is a registry entry (`jaxrl.algorithms.get`)."""
    return module.Config().env


def uses_env(module: Any) -> bool:
    """Whether the algorithm takes an environment: it acts in one (`acts_in_env`), to
    train (`trains_on` "env") or to be evaluated (the offline learners, "dataset");
    language-model algorithms train on a task. `module` is a registry entry."""
    return acts_in_env(module.algorithm)


def make_config(
    algorithm: str,
    env: str | None = None,
    config_file: str | pathlib.Path | None = None,
    **overrides: Any,
) -> Any:
    """The algorithm's config: preset for `env`, then `config_file`, then `overrides`."""
    entry = algorithms.get(algorithm)
    file_values = cfg.load_file(config_file) if config_file else {}
    if uses_env(entry):
        env = env or file_values.pop("env", None) or default_env(entry)
        file_values.pop("env", None)
        _check_env(env, algorithm, getattr(entry.algorithm, "multi_agent", False))
        config = entry.default_config(env)
    else:
        if env is not None:
            raise cfg.ConfigError(
                f"invalid env={env!r}: {algorithm} trains on a {entry.trains_on}, not an "
                "environment (see its --task)"
            )
        config = entry.default_config()
    config = cfg.replace(config, **file_values)
    return cfg.replace(config, **overrides).validate()


def _check_env(env: Any, algorithm: str = "", multi_agent: bool = False) -> None:
    """Unknown ids fail as a `ConfigError` (CLI exit code 2) listing the registered ones;
    so does a multi-agent environment for a single-agent algorithm and the reverse."""
    from jaxrl import envs

    if isinstance(env, str) and ":" in env:  # adapter prefixes ("gymnax:...") are checked on make
        env_is_multi = envs.is_multi_agent(env)
    else:
        try:
            env_is_multi = envs.spec(env).multi_agent
        except ValueError as err:
            raise cfg.ConfigError(f"invalid env={env!r}: {err}") from None
    if env_is_multi != multi_agent:
        kind, ids = (
            ("multi-agent", envs.registered(multi_agent=True))
            if multi_agent
            else ("single-agent", envs.registered())
        )
        raise cfg.ConfigError(
            f"invalid env={env!r}: {algorithm} is a {kind} algorithm and {env!r} is "
            f"{'a multi-agent' if env_is_multi else 'a single-agent'} environment; "
            f"{kind} environments: {ids}"
            + ("" if multi_agent else " (multi-agent ones train with ippo, mappo or pqn-vdn)")
        )


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

    `resume=True` continues the run in `run_dir` from its saved `config.json`: what is
    not given (the environment, hyperparameters, sweep, `num_seeds`, `seed`,
    `checkpoint_every`, `log_every`, `agent_execution`) is the saved run's, so
    `jaxrl.train(algorithm, run_dir=d, resume=True)` continues it as
    `jaxrl train ALGORITHM --run-dir d --resume` does; what is given must agree with
    it (a larger `total_steps` extends the run).

    Example:
        >>> result = jaxrl.train("ppo", env="CartPole-v1", num_seeds=8)
        >>> result.summary["final_return_mean"]
    """
    run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_FIELDS}
    file_values = cfg.load_file(config_file) if config_file else {}
    if run_kwargs.get("resume"):
        env, sweep, kwargs = _resume_defaults(
            algorithm, run_kwargs, env, sweep, kwargs, file_values
        )
    run_kwargs["sweep"] = cfg.parse_sweep(sweep)
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
    entry = algorithms.get(algorithm)
    algo = entry.make(make_config(algorithm, env, config_file, **kwargs))
    return _train(algo, RunConfig(**run_kwargs), init_params=init_params)


# Run options a resumed run keeps from its config.json unless given (agent_execution is
# absent from older runs' config.json).
RESUMED_RUN_FIELDS = ("num_seeds", "seed", "checkpoint_every", "log_every", "agent_execution")


def _resume_defaults(
    algorithm: str,
    run_kwargs: dict[str, Any],
    env: str | None,
    sweep: Any,
    overrides: dict[str, Any],
    file_values: Mapping[str, Any],
) -> tuple[str | None, Any, dict[str, Any]]:
    """`(env, sweep, overrides)` of a resumed run: the saved run's config.json fills in
    what neither the arguments nor the config file give (modifies `run_kwargs` the same
    way). The driver then checks that what was given agrees with the saved run."""
    run_dir = run_kwargs.get("run_dir")
    if run_dir is None:
        raise cfg.ConfigError("invalid resume=True: needs the run_dir of the run to continue")
    path = pathlib.Path(run_dir) / "config.json"
    if not path.exists():
        raise cfg.ConfigError(f"invalid resume=True: {run_dir} has no config.json to resume from")
    saved = json.loads(path.read_text())
    if saved.get("algorithm", algorithm) != algorithm:
        raise cfg.ConfigError(
            f"invalid resume=True: {run_dir} holds a {saved['algorithm']} run, not {algorithm}; "
            f"resume it with `jaxrl train {saved['algorithm']} --run-dir {run_dir} --resume`"
        )
    saved_config = saved["config"]
    if env is None and "env" not in file_values:
        env = saved_config.get("env")
    for key in RESUMED_RUN_FIELDS:
        if key in saved["run"]:
            run_kwargs.setdefault(key, saved["run"][key])
    sweep = saved["run"]["sweep"] if sweep is None else sweep
    swept = set(cfg.parse_sweep(sweep))  # their saved single values are not overrides
    given = swept | set(file_values) | {"env"}
    defaults = {k: v for k, v in saved_config.items() if k not in given}
    return env, sweep, {**defaults, **overrides}
