"""The `jaxrl` command line.

jaxrl envs                               list and smoke-step every environment
jaxrl train ppo --env CartPole-v1 ...    train (every hyperparameter is a flag)
jaxrl eval RUN_DIR                       evaluate a run's latest checkpoint
jaxrl plot RUN_DIR... -o curves.png      learning curves, mean and spread over seeds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time
import typing
from collections.abc import Sequence
from typing import Any

from jaxrl import algorithms
from jaxrl import config as cfg


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (cfg.ConfigError, FileNotFoundError) as err:  # usage errors: no traceback
        print(f"jaxrl: error: {err}", file=sys.stderr)
        return 2
    except FloatingPointError as err:  # NaNLossError: the run diverged; checkpoints are kept
        print(f"jaxrl: training stopped: {err}", file=sys.stderr)
        return 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(title="commands")

    p_envs = sub.add_parser("envs", help="list and smoke-step every registered environment")
    p_envs.add_argument("--steps", type=int, default=100, help="random steps per environment")
    p_envs.set_defaults(handler=_cmd_envs)

    p_train = sub.add_parser("train", help="train an agent", argument_default=argparse.SUPPRESS)
    p_train.add_argument("algorithm", choices=algorithms.names())
    _add_run_flags(p_train)
    _add_config_flags(p_train)
    p_train.set_defaults(handler=_cmd_train)

    p_eval = sub.add_parser("eval", help="evaluate the latest checkpoint of a run")
    p_eval.add_argument("run_dir")
    p_eval.add_argument("--episodes", type=int, default=10)
    p_eval.add_argument("--seed", type=int, default=0)
    p_eval.add_argument(
        "--stochastic", action="store_true", help="sample actions instead of the mode"
    )
    p_eval.set_defaults(handler=_cmd_eval)

    p_plot = sub.add_parser("plot", help="plot learning curves of one or more runs")
    p_plot.add_argument("run_dirs", nargs="+")
    p_plot.add_argument("-o", "--output", default="curves.png")
    p_plot.add_argument("--metric", default="episode_return")
    p_plot.set_defaults(handler=_cmd_plot)
    return parser


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--env", help="environment id (see `jaxrl envs`)")
    g.add_argument(
        "--config", dest="config_file", help="config file (.toml/.json/.yaml) of hyperparameters"
    )
    g.add_argument("--num-seeds", type=int, help="independent agents trained in one program (vmap)")
    g.add_argument("--seed", type=int)
    g.add_argument(
        "--sweep",
        nargs="+",
        metavar="NAME=V1,V2",
        help="grid over sweepable hyperparameters, trained vmapped, e.g. lr=1e-3,3e-4",
    )
    g.add_argument("--run-dir", help="output directory (default: runs/<algorithm>-<env>-<time>)")
    g.add_argument(
        "--checkpoint-every", type=int, help="checkpoint every N environment steps per agent"
    )
    g.add_argument("--keep-checkpoints", type=int)
    g.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    g.add_argument("--log-every", type=int, help="log every N environment steps per agent")
    g.add_argument("--num-devices", type=int, help="devices of the data mesh (default: all)")
    g.add_argument("--no-progress", dest="progress", action="store_false")
    g.add_argument("--tensorboard", action="store_true", help="also write TensorBoard events")
    g.add_argument("--coordinator", help="multi-host: coordinator address host:port")
    g.add_argument("--num-processes", type=int, help="multi-host: number of processes")
    g.add_argument("--process-id", type=int, help="multi-host: this process's index")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per field of every algorithm's config (validated per algorithm later)."""
    g = p.add_argument_group("hyperparameters (defaults: the preset for --env)")
    seen: set[str] = {"env"}
    for name in algorithms.names():
        config_cls = algorithms.get(name).Config
        hints = typing.get_type_hints(config_cls)
        for field in dataclasses.fields(config_cls):
            if field.name in seen:
                continue
            seen.add(field.name)
            hint = hints[field.name]
            default = field.default if field.default is not dataclasses.MISSING else None
            if hint is bool:
                g.add_argument(
                    _flag(field.name),
                    dest=field.name,
                    type=_parse_bool,
                    nargs="?",
                    const=True,
                    metavar="BOOL",
                    help=f"(default {default})",
                )
            else:
                g.add_argument(
                    _flag(field.name),
                    dest=field.name,
                    type=str,
                    metavar=_metavar(hint),
                    help=f"(default {default})",
                )


def _metavar(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "N,N,..."
    return getattr(hint, "__name__", "VALUE").upper()


def _parse_bool(value: str) -> bool:
    return bool(cfg.coerce("flag", value, bool))


_RUN_KEYS = (
    "num_seeds",
    "seed",
    "run_dir",
    "checkpoint_every",
    "keep_checkpoints",
    "resume",
    "log_every",
    "num_devices",
    "progress",
    "tensorboard",
)


def _cmd_train(args: argparse.Namespace) -> int:
    from jaxrl.training import mesh

    values = vars(args).copy()
    values.pop("handler")
    algorithm = values.pop("algorithm")
    mesh.initialize_distributed(
        values.pop("coordinator", None),
        values.pop("num_processes", None),
        values.pop("process_id", None),
    )
    import jaxrl

    run_kwargs = {k: values.pop(k) for k in _RUN_KEYS if k in values}
    env = values.pop("env", None)
    config_file = values.pop("config_file", None)
    sweep = values.pop("sweep", None)
    if run_kwargs.get("resume") and "run_dir" not in run_kwargs:
        raise cfg.ConfigError("invalid --resume: needs --run-dir of the run to continue")
    if "run_dir" not in run_kwargs:
        import jax

        if jax.process_count() > 1:  # each host would stamp its own directory name
            raise cfg.ConfigError(
                "invalid --run-dir: a multi-process run needs an explicit --run-dir shared "
                "by all processes"
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_kwargs["run_dir"] = str(
            pathlib.Path("runs") / f"{algorithm}-{env or 'CartPole-v1'}-{stamp}"
        )
    if run_kwargs.get("resume"):
        saved = _saved_config(run_kwargs["run_dir"])
        # Resuming: the saved config is the default; explicit flags must agree with it.
        env = env or saved["config"]["env"]
        values = {**{k: v for k, v in saved["config"].items() if k != "env"}, **values}
        for key in ("num_seeds", "seed", "checkpoint_every", "keep_checkpoints", "log_every"):
            run_kwargs.setdefault(key, saved["run"][key])
        sweep = sweep or [f"{k}={','.join(map(str, v))}" for k, v in saved["run"]["sweep"].items()]
    result = jaxrl.train(
        algorithm, env, config_file=config_file, sweep=sweep, **run_kwargs, **values
    )
    summary = result.summary
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "final_return_mean",
                    "final_return_std",
                    "steps_per_second",
                    "compile_seconds",
                    "wall_seconds",
                )
            }
        )
    )
    print(f"run directory: {result.run_dir}")
    return 0


def _saved_config(run_dir: str) -> dict[str, Any]:
    path = pathlib.Path(run_dir) / "config.json"
    if not path.exists():
        raise cfg.ConfigError(f"invalid --resume: {run_dir} has no config.json")
    return json.loads(path.read_text())


def _cmd_eval(args: argparse.Namespace) -> int:
    import jax
    import numpy as np

    from jaxrl.evaluation import evaluate, load_run

    algo, state, resolved = load_run(args.run_dir)
    returns = evaluate(
        algo, state, jax.random.key(args.seed), args.episodes, deterministic=not args.stochastic
    )
    per_agent = returns.mean(axis=1)
    result = {
        "env": resolved["config"]["env"],
        "episodes_per_agent": args.episodes,
        "return_mean": float(per_agent.mean()),
        "return_std": float(per_agent.std()),
        "return_per_agent": [float(x) for x in per_agent],
    }
    print(json.dumps(result))
    (pathlib.Path(args.run_dir) / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    del np
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from jaxrl.plotting import plot_runs

    plot_runs(args.run_dirs, args.output, metric=args.metric)
    print(f"wrote {args.output}")
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    import jax
    import numpy as np

    from jaxrl import envs

    print(f"{'id':28s} {'observation':28s} {'action':24s} {'steps':>6s} {'return':>9s}")
    failures = 0
    for env_id in envs.registered():
        try:
            env, params = envs.make(env_id)
            obs_space, act_space = env.observation_space(params), env.action_space(params)

            # A closure, not functools.partial: jit would trace partial's bound params.
            def rollout(key, env=env, params=params):
                return _smoke_rollout(env, params, args.steps, key)

            total, valid = jax.jit(rollout)(jax.random.key(0))
            status = "" if bool(valid) else "  (observation outside its space!)"
            failures += not bool(valid)
            print(
                f"{env_id:28s} {_short(obs_space):28s} {_short(act_space):24s} "
                f"{args.steps:6d} {float(np.asarray(total)):9.2f}{status}"
            )
        except Exception as err:  # noqa: BLE001 - report every environment
            failures += 1
            print(f"{env_id:28s} FAILED: {type(err).__name__}: {err}")
    return 1 if failures else 0


def _smoke_rollout(env: Any, params: Any, steps: int, key: Any) -> tuple[Any, Any]:
    """Random-policy rollout: `(total reward, whether every observation was in its space)`."""
    import jax

    obs_space, act_space = env.observation_space(params), env.action_space(params)
    _, state = env.reset(key, params)

    def step(carry, key):
        state, total = carry
        k_act, k_step = jax.random.split(key)
        action = act_space.sample(k_act)
        obs, state, reward, _, _, _ = env.step(k_step, state, action, params)
        return (state, total + reward), obs_space.contains(obs)

    (_, total), valid = jax.lax.scan(step, (state, 0.0), jax.random.split(key, steps))
    return total, valid.all()


def _short(space: Any) -> str:
    text = repr(space)
    return text if len(text) <= 28 else f"{type(space).__name__}{getattr(space, 'shape', '')}"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
