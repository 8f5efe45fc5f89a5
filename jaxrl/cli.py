"""The `jaxrl` command line.

jaxrl envs                               list and smoke-step every environment
jaxrl train ppo --env CartPole-v1 ...    train (every hyperparameter is a flag)
jaxrl train sft --task addition          train a language model
jaxrl eval RUN_DIR                       evaluate a run's latest checkpoint
jaxrl plan grpo --topology v5e:4x4 ...    compile the steps for a TPU slice: fits?
jaxrl plot RUN_DIR... [--kind iqm]       learning curves; IQMs with intervals; profiles
jaxrl dataset collect --source RUN_DIR   an offline dataset from runs (docs/offline.md)
jaxrl train iql --dataset DATA.npz       train an offline learner on it

Expected errors (a bad flag, a missing file or optional dependency) print one
`jaxrl: error: ...` line and exit with status 2; anything unexpected prints one
line too, and its traceback with --debug (or JAXRL_DEBUG=1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import sys
import threading
import time
import traceback
import typing
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from jaxrl import algorithms
from jaxrl import config as cfg

EVAL_EPISODES = 10
"""Fresh episodes per agent `jaxrl eval` plays on an environment run by default."""


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one `jaxrl` command; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("JAXRL_DEBUG") == "1"
    argv = [a for a in argv if a != "--debug"]
    _one_line_warnings()
    with _signals_exit_at_once():
        return _run_command(argv, debug)


def _run_command(argv: list[str], debug: bool) -> int:
    try:
        parser = _build_parser(argv)
    except cfg.ConfigError as err:  # e.g. an unknown --env, whose preset the flags show
        print(f"jaxrl: error: {err}", file=sys.stderr)
        return 2
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the command's parser: `see jaxrl train ppo --help`
        command = getattr(args, "handler", None)
        _refuse_async_flags(parser.command_parsers.get(command, parser), args, unknown)
        parser.command_parsers.get(command, parser).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (cfg.ConfigError, FileNotFoundError, ImportError) as err:  # usage: one line
        if debug:
            traceback.print_exc()
        print(f"jaxrl: error: {err}", file=sys.stderr)
        return 2
    except FloatingPointError as err:  # NaNLossError: the run diverged; checkpoints are kept
        print(f"jaxrl: training stopped: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # raised by code that replaced our handler: same exit
        if debug:
            traceback.print_exc()
        _exit_now(signal.SIGINT, None)
    except Exception as err:
        from jaxrl.training.driver import TrainingInterrupted

        if isinstance(err, TrainingInterrupted):
            print(f"jaxrl: {err}", file=sys.stderr)
            return 128 + err.signum
        if debug:
            traceback.print_exc()
        print(
            f"jaxrl: unexpected error: {type(err).__name__}: {err} "
            "(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


ASYNC_FLAGS = ("--async-staleness", "--sampler-devices")
"""The flags of asynchronous sampling (`jaxrl/training/async_stages.py`): fields of the
algorithms that sample their own data, refused by name for the others."""


def _refuse_async_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]
) -> None:
    """An asynchronous-sampling flag given to an algorithm without that mode (SFT and DPO:
    fixed data) is an error that says so, rather than an unrecognized argument."""
    given = [flag.split("=")[0] for flag in unknown if flag.split("=")[0] in ASYNC_FLAGS]
    algorithm = getattr(args, "algorithm", None)
    if given and algorithm is not None:
        field = given[0].lstrip("-").replace("-", "_")
        parser.error(
            f"invalid {field}: {algorithm} has no asynchronous mode (SFT and DPO learn from "
            "fixed data, with no sampler to run apart); async_staleness and sampler_devices "
            "are fields of the algorithms that sample their own completions (grpo, ppo-lm "
            "and their variants)"
        )


def _exit_now(signum: int, frame: Any) -> typing.NoReturn:
    """Leaves the process at once, with status 128 + signum, after one line.

    Without the interpreter's teardown: a KeyboardInterrupt raised inside XLA (while it
    compiles or runs a computation) left its threads in a state where tearing the
    modules down crashed (a segmentation fault after "interrupted"), and a raised
    exception can land in a callback that swallows it (a garbage-collection hook).
    Files are closed by the kernel; a checkpoint being written is left unfinished, and
    resume skips it."""
    print("\njaxrl: interrupted", file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(128 + signum)


@contextlib.contextmanager
def _signals_exit_at_once() -> Iterator[None]:
    """While a command runs, Ctrl-C or SIGTERM leave at once (`_exit_now`), except while
    a run trains: the driver then turns the first one into a checkpoint and a clean stop,
    and calls this handler on the second. The previous handlers come back afterwards
    (tests call `main` in-process)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _exit_now) for signum in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _one_line_warnings() -> None:
    """Warnings from jaxrl (a skipped damaged checkpoint, a replicated state) print as
    one `jaxrl: warning: ...` line; other libraries' warnings keep their format."""
    default = warnings.formatwarning

    def format_warning(message, category, filename, lineno, line=None):
        if category.__module__.startswith("jaxrl") or "/jaxrl/" in filename:
            return f"jaxrl: warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, like jaxrl's own usage errors:
    `jaxrl: error: ...` naming the command, then exit status 2 (no usage block)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The sub-commands' parsers by handler, so that the top-level parser reports an
        # unknown flag in the command's name (filled in by `_build_parser`).
        self.command_parsers: dict[Any, argparse.ArgumentParser] = {}
        # A value like -1e-3 is a number, not a flag: argparse's own pattern knows only
        # -1 and -.5, so `--lr -1e-3` failed with "expected one argument".
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"jaxrl: error: {message} (see `{self.prog} --help`)\n")


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf$", re.IGNORECASE)


def _build_parser(argv: Sequence[str] = ()) -> _Parser:
    """The parser; `jaxrl train ALGO [--env ENV]` gets ALGO's flags with ENV's preset."""
    parser = _Parser(
        prog="jaxrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help="print tracebacks of errors")
    sub = parser.add_subparsers(title="commands")

    p_envs = sub.add_parser("envs", help="list and smoke-step every registered environment")
    p_envs.add_argument(
        "--steps",
        type=_positive_int,
        default=100,
        help="random steps per environment (default: %(default)s)",
    )
    p_envs.add_argument(
        "--suite",
        help="smoke-step the ids of one installed environment suite (craftax, jumanji, "
        "xminigrid, pgx, playground) instead of the built-in environments (default: none, "
        "the built-in ones)",
    )
    p_envs.set_defaults(handler=_cmd_envs)

    algorithm, env = _train_target(argv)
    p_train = sub.add_parser(
        "train",
        help="train an agent",
        argument_default=argparse.SUPPRESS,
        **_command_usage("train", algorithm),
    )
    p_train.add_argument("algorithm", choices=algorithms.names(), help="the algorithm to train")
    _add_run_flags(p_train, "train")
    if algorithm is not None:
        _add_config_flags(p_train, algorithm, env)
    p_train.set_defaults(handler=_cmd_train)

    p_plan = sub.add_parser(
        "plan",
        help="compile an algorithm's steps for a TPU slice and say whether they fit",
        description="Compiles the steps `jaxrl train ALGO` would run (same flags) for a TPU "
        "slice, without a TPU and without allocating parameters, and prints per-device "
        "memory, FLOPs and a roofline step time per step. Exits 1 when a step does not "
        "fit, listing changes that fit (each compiled). See docs/plan.md.",
        argument_default=argparse.SUPPRESS,
        **_command_usage("plan", algorithm),
    )
    p_plan.add_argument("algorithm", choices=algorithms.names(), help="the algorithm to plan")
    _add_plan_flags(p_plan)
    _add_run_flags(p_plan, "plan")
    if algorithm is not None:
        _add_config_flags(p_plan, algorithm, env)
    p_plan.set_defaults(handler=_cmd_plan)

    p_eval = sub.add_parser(
        "eval",
        help="evaluate the latest checkpoint of a run",
        description="Evaluates every agent of a run's newest intact checkpoint, prints the "
        "report and writes it to RUN_DIR/eval.json. Environment runs play fresh episodes "
        "(--episodes); language-model runs score held-out examples (--examples).",
    )
    p_eval.add_argument("run_dir", help="a run directory (written by `jaxrl train`)")
    p_eval.add_argument(
        "--episodes",
        type=_positive_int,
        help=f"environment runs: fresh episodes per agent (default: {EVAL_EPISODES})",
    )
    p_eval.add_argument(
        "--examples",
        type=_positive_int,
        help="language-model runs: the first N held-out examples (prompts, or preference "
        "pairs) scored per agent (default: all of them, the set summary.json reports)",
    )
    p_eval.add_argument(
        "--seed",
        type=int,
        help="seed of the evaluation (default: the one summary.json's evaluation used; 0 "
        "for environment runs)",
    )
    p_eval.add_argument(
        "--stochastic", action="store_true", help="sample actions instead of the mode"
    )
    p_eval.set_defaults(handler=_cmd_eval)

    p_plot = sub.add_parser("plot", help="plot learning curves of one or more runs")
    p_plot.add_argument("run_dirs", nargs="+", help="run directories, one curve each")
    p_plot.add_argument(
        "-o",
        "--output",
        help="image file (default: KIND.png, e.g. curves.png, in the first run directory)",
    )
    p_plot.add_argument(
        "--metric",
        help="metrics.jsonl field to plot (default: the algorithm's headline metric, e.g. "
        "episode_return)",
    )
    p_plot.add_argument(
        "--kind",
        choices=("curves", "iqm", "profile"),
        default="curves",
        help="curves: learning curves, mean and std over seeds; iqm: each run's "
        "interquartile mean of its seeds' final scores with a 95%% bootstrap interval; "
        "profile: the fraction of seeds above each final score (default: %(default)s)",
    )
    p_plot.add_argument("--force", action="store_true", help="overwrite an existing --output")
    p_plot.set_defaults(handler=_cmd_plot)

    p_dataset = sub.add_parser("dataset", help="collect and inspect offline datasets")
    dataset_sub = p_dataset.add_subparsers(title="dataset commands")
    p_collect = dataset_sub.add_parser(
        "collect",
        help="write a dataset from trained runs, random actions or a replay buffer",
        description="Collects transitions into a dataset file (.npz) for the offline "
        "learners (iql, td3-bc). Sources, concatenated in order: `random` (uniform "
        "actions), a run directory (its policy acting stochastically: a run stopped "
        "early gives a medium dataset, a finished one an expert dataset) or "
        "replay:RUN_DIR (an off-policy run's replay buffer: medium-replay). Records the "
        "behaviour returns and the reference returns of the normalised score. See "
        "docs/offline.md.",
    )
    p_collect.add_argument(
        "--source",
        action="append",
        required=True,
        help="random, RUN_DIR or replay:RUN_DIR; repeat for a mixed dataset",
    )
    p_collect.add_argument("-o", "--output", required=True, help="the dataset file (.npz)")
    p_collect.add_argument("--env", help="environment id (default: the runs')")
    p_collect.add_argument(
        "--steps",
        type=_positive_int,
        default=10_000,
        help="environment steps per policy source, all environments (default: %(default)s)",
    )
    p_collect.add_argument(
        "--num-envs", type=_positive_int, default=1, help="environments stepped in parallel"
    )
    p_collect.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    p_collect.add_argument("--agent", type=int, default=0, help="which agent of the runs acts")
    p_collect.add_argument(
        "--expert", help="a run directory whose deterministic return is the score's 100"
    )
    p_collect.add_argument("--expert-return", type=float, help="the score's 100 as a number")
    p_collect.add_argument(
        "--random-return",
        type=float,
        help="the score's 0 (default: the mean return of random episodes)",
    )
    p_collect.add_argument(
        "--reference-episodes",
        type=_positive_int,
        default=10,
        help="episodes that measure the reference returns (default: %(default)s)",
    )
    p_collect.add_argument("--force", action="store_true", help="overwrite an existing --output")
    p_collect.set_defaults(handler=_cmd_dataset_collect)
    p_info = dataset_sub.add_parser("info", help="size, episodes and returns of a dataset")
    p_info.add_argument("path", help="a dataset file (.npz)")
    p_info.set_defaults(handler=_cmd_dataset_info)
    parser.command_parsers = {
        _cmd_envs: p_envs,
        _cmd_train: p_train,
        _cmd_plan: p_plan,
        _cmd_eval: p_eval,
        _cmd_plot: p_plot,
        _cmd_dataset_collect: p_collect,
        _cmd_dataset_info: p_info,
    }
    return parser


def _command_usage(command: str, algorithm: str | None) -> dict[str, str]:
    """`prog` and `usage` of `jaxrl train ALGO` / `jaxrl plan ALGO` once ALGO is known,
    so that its help and errors name the whole command (`jaxrl train ppo --help`)."""
    if algorithm is None:
        return {}
    extra = " --topology TOPOLOGY" if command == "plan" else ""
    return {"prog": f"jaxrl {command} {algorithm}", "usage": f"%(prog)s{extra} [options]"}


def _train_target(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """`(algorithm, env)` of a `jaxrl train` (or `jaxrl plan`) command line, before full
    parsing."""
    args = list(argv)
    command = next((a for a in args if a in ("train", "plan")), None)
    if command is None:
        return None, None
    rest = args[args.index(command) + 1 :]
    algorithm = next((a for a in rest if not a.startswith("-")), None)
    if algorithm not in algorithms.names():
        return None, None
    env = None
    for i, a in enumerate(rest):
        if a == "--env" and i + 1 < len(rest):
            env = rest[i + 1]
        elif a.startswith("--env="):
            env = a.split("=", 1)[1]
    return algorithm, env


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_run_flags(p: argparse.ArgumentParser, command: str) -> None:
    """The run options of `jaxrl train` (`RunConfig`'s fields), each help showing its
    default; `jaxrl plan` gets only those that change what is compiled
    (`PLANNED_RUN_FIELDS`, plus the environment, config file and sweep)."""
    from jaxrl.training.run_config import PLANNED_RUN_FIELDS, RunConfig

    defaults = RunConfig()
    planned = {"env", "config_file", "sweep", *PLANNED_RUN_FIELDS}
    g = p.add_argument_group("run")

    def add(*names: str, dest: str, **kwargs: Any) -> None:
        if command == "plan" and dest not in planned:
            return
        g.add_argument(*names, dest=dest, **kwargs)

    add("--env", dest="env", help="environment id (see `jaxrl envs`; default: the algorithm's)")
    add(
        "--config",
        dest="config_file",
        help="file of hyperparameters (.toml/.json/.yaml; see examples/; default: none)",
    )
    add(
        "--num-seeds",
        dest="num_seeds",
        type=int,
        help=f"independent agents trained in one program (vmap; default: {defaults.num_seeds})",
    )
    add(
        "--seed",
        dest="seed",
        type=int,
        help=f"base seed: agent i uses fold_in(seed, i) (default: {defaults.seed})",
    )
    add(
        "--sweep",
        dest="sweep",
        nargs="+",
        metavar="NAME=V1,V2",
        help="grid over sweepable hyperparameters, trained vmapped, e.g. lr=1e-3,3e-4 "
        "(default: none)",
    )
    add(
        "--run-dir",
        dest="run_dir",
        help="output directory (default: runs/<algorithm>-<env>-<time>)",
    )
    add(
        "--checkpoint-every",
        dest="checkpoint_every",
        type=int,
        help="also checkpoint every N steps per agent (default: only by wall clock)",
    )
    add(
        "--checkpoint-minutes",
        dest="checkpoint_minutes",
        type=_parse_minutes,
        metavar="MINUTES",
        help="checkpoint after this much wall clock since the last one, or 'none' "
        f"(default: {defaults.checkpoint_minutes:g})",
    )
    add(
        "--keep-checkpoints",
        dest="keep_checkpoints",
        type=int,
        help=f"how many recent checkpoints to keep (default: {defaults.keep_checkpoints})",
    )
    add("--resume", dest="resume", action="store_true", help="continue the run in --run-dir")
    add(
        "--fresh",
        dest="fresh",
        action="store_true",
        help="start over in a --run-dir that holds a run (replaces its checkpoints)",
    )
    add(
        "--reschedule",
        dest="reschedule",
        action="store_true",
        help="with --resume and a larger --total-steps: let schedules follow the new total",
    )
    add(
        "--log-every",
        dest="log_every",
        type=int,
        help="log every N steps per agent (default: about 50 rows over the run)",
    )
    add(
        "--num-devices",
        dest="num_devices",
        type=int,
        help="devices of the mesh (default: all)",
    )
    add(
        "--agent-execution",
        dest="agent_execution",
        metavar="{vmap,map}",
        help="how a device runs its seeds: vmap (batched) or map (one after another; "
        f"faster on CPU for small networks) (default: {defaults.agent_execution})",
    )
    add(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide the progress bar",
    )
    add(
        "--no-memory-check",
        dest="check_memory",
        action="store_false",
        help="run even when the state or a compiled step needs more memory than the "
        "machine has available (checked before allocating or running them)",
    )
    add(
        "--tensorboard",
        dest="tensorboard",
        action="store_true",
        help="also write TensorBoard events",
    )
    add(
        "--coordinator",
        dest="coordinator",
        help="multi-host: coordinator address host:port (default: one process)",
    )
    add(
        "--num-processes",
        dest="num_processes",
        type=int,
        help="multi-host: number of processes (default: 1)",
    )
    add(
        "--process-id",
        dest="process_id",
        type=int,
        help="multi-host: this process's index (default: 0)",
    )


def _add_plan_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("plan")
    g.add_argument(
        "--topology",
        required=True,
        help="what to compile for: a TPU slice v5e:AxB, v6e:AxB, v4:AxBxC, v5p:AxBxC "
        '(needs libtpu: pip install -e ".[plan]") or cpu:N (N emulated CPU devices)',
    )
    g.add_argument(
        "--mesh",
        metavar="AXIS=N,...",
        help="mesh axes, e.g. data=4,fsdp=4 (language models: data, fsdp, tensor; data "
        "takes the devices the others leave) (default: the config's mesh_* fields)",
    )
    g.add_argument(
        "--model-config",
        metavar="CONFIG_JSON",
        help="plan this Hugging Face architecture (a config.json; no weights needed) "
        "instead of the random model, e.g. examples/models/llama-3-8b.json (default: the "
        "config's model)",
    )
    g.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="per-device memory budget, e.g. 8GiB (default: the chip's HBM; cpu:N has none, "
        "so it is needed there to judge fit)",
    )
    g.add_argument(
        "--full-depth",
        action="store_true",
        help="compile a deep language model whole (default: at 1 and 2 layers, extended "
        "by the per-layer growth; much faster)",
    )
    g.add_argument(
        "--no-suggest",
        dest="suggest",
        action="store_false",
        help="when a step does not fit, do not search for changes that fit",
    )


def _add_config_flags(p: argparse.ArgumentParser, algorithm: str, env: str | None) -> None:
    """One flag per field of the algorithm's config; the help shows the preset for `env`
    (or the algorithm's defaults) and the field's docstring."""
    from jaxrl import api

    module = algorithms.get(algorithm)
    config_cls = module.Config
    preset, heading = module.default_config(), "hyperparameters (defaults)"
    if api.uses_env(module):  # an unknown --env is an error here, before --help shows
        preset = api.make_config(algorithm, env)
        heading = f"hyperparameters (defaults: the preset for --env {preset.env})"
    g = p.add_argument_group(heading)
    docs = cfg.field_docs(config_cls)
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        if field.name == "env":
            continue
        hint, default = hints[field.name], getattr(preset, field.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        # argparse %-formats help strings: a literal "%" in a docstring must be doubled.
        text = f"{docs.get(field.name, '')} (default: {shown})".strip().replace("%", "%%")
        if hint is bool:
            g.add_argument(
                _flag(field.name),
                dest=field.name,
                type=_parse_bool,
                nargs="?",
                const=True,
                metavar="BOOL",
                help=text,
            )
        else:
            choices = field.metadata.get("choices")  # a registry's names (jaxrl.objectives)
            g.add_argument(
                _flag(field.name),
                dest=field.name,
                type=str,
                choices=choices,
                metavar=_metavar(hint) if choices is None else None,
                help=text,
            )


def _metavar(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "N,N,..."
    return getattr(hint, "__name__", "VALUE").upper()


def _positive_int(value: str) -> int:
    """argparse type of counts (`--episodes`, `--steps`): an integer >= 1, checked before
    any work (0 or a negative count would fail deep inside JAX)."""
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"invalid value {value!r}: must be an integer >= 1")
    return number


def _parse_bool(value: str) -> bool:
    """argparse type of boolean flags: true/false, yes/no, on/off, 1/0."""
    try:
        return bool(cfg.coerce("flag", value, bool))
    except cfg.ConfigError:
        raise argparse.ArgumentTypeError(
            f"invalid value {value!r}: must be true or false (also yes/no, on/off, 1/0)"
        ) from None


def _parse_minutes(value: str) -> float | None:
    """argparse type of `--checkpoint-minutes`: minutes > 0, or 'none'."""
    if value.lower() == "none":
        return None
    try:
        minutes = float(value)
    except ValueError:
        minutes = float("nan")
    if not minutes > 0:  # also NaN
        raise argparse.ArgumentTypeError(
            f"invalid value {value!r}: must be a number of minutes > 0, or 'none'"
        )
    return minutes


def _cmd_train(args: argparse.Namespace) -> int:
    from jaxrl import api
    from jaxrl.training import mesh

    values = vars(args).copy()
    values.pop("handler")
    values.pop("debug", None)
    algorithm = values.pop("algorithm")
    mesh.initialize_distributed(
        values.pop("coordinator", None),
        values.pop("num_processes", None),
        values.pop("process_id", None),
    )
    import jaxrl

    sweep = values.pop("sweep", None)
    run_kwargs = {k: values.pop(k) for k in api.RUN_FIELDS if k in values}
    env = values.pop("env", None)
    config_file = values.pop("config_file", None)
    if (run_kwargs.get("resume") or run_kwargs.get("fresh")) and "run_dir" not in run_kwargs:
        flag = "--resume" if run_kwargs.get("resume") else "--fresh"
        raise cfg.ConfigError(f"invalid {flag}: needs --run-dir of the run")
    if "run_dir" not in run_kwargs:
        import jax

        if jax.process_count() > 1:  # each host would stamp its own directory name
            raise cfg.ConfigError(
                "invalid --run-dir: a multi-process run needs an explicit --run-dir shared "
                "by all processes"
            )
        config = api.make_config(algorithm, env, config_file, **values)
        target = algorithms.get(algorithm).algorithm.target_name(config)
        name = str(target).replace(":", "-").replace("/", "-")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_kwargs["run_dir"] = str(pathlib.Path("runs") / f"{algorithm}-{name}-{stamp}")
    # --resume: jaxrl.train fills in what is not given from the run's config.json.
    result = jaxrl.train(
        algorithm, env, config_file=config_file, sweep=sweep, **run_kwargs, **values
    )
    _print_summary(result.summary)
    print(f"run directory: {result.run_dir}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    """`jaxrl plan`: the tables on stdout; exit 1 (and one line on stderr) when a step
    does not fit."""
    values = vars(args).copy()
    for name in ("handler", "debug", "coordinator", "num_processes", "process_id"):
        values.pop(name, None)
    algorithm, topology = values.pop("algorithm"), values.pop("topology")
    from jaxrl import plan as plan_lib

    plan_lib.prepare_process(topology)  # before JAX starts: CPU backend, cpu:N devices
    result = plan_lib.plan(
        algorithm,
        values.pop("env", None),
        topology=topology,
        mesh=values.pop("mesh", None),
        config_file=values.pop("config_file", None),
        model_config=values.pop("model_config", None),
        device_memory=values.pop("device_memory", None),
        suggest=values.pop("suggest", True),
        full_depth=values.pop("full_depth", False),
        sweep=values.pop("sweep", None),
        **values,
    )
    print(result.report(), flush=True)
    if not result.fits:
        failing = [s.name for s in result.steps if not s.fits(result.target.memory_bytes)]
        print(
            f"jaxrl: plan: {', '.join(failing)} does not fit on {result.target.name}"
            + ("; see the changes that fit above" if result.suggestions else ""),
            file=sys.stderr,
        )
        return 1
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    """The headline numbers: one line, plus one per sweep point (mean/std over its seeds)."""
    keys = (
        "final_return_mean",
        "final_return_std",
        "final_return_agents",
        "eval_accuracy",
        "eval_reward_accuracy",
        "pass@1_before",
        "pass@1_after",
        "steps_per_second",
        "tokens_per_second",
        "compile_seconds",
        "wall_seconds",
    )
    print(json.dumps({k: summary[k] for k in keys if k in summary}))
    for point in summary.get("sweep", []):
        print("  sweep point " + json.dumps(point))


def _cmd_eval(args: argparse.Namespace) -> int:
    import jax

    from jaxrl import api
    from jaxrl.evaluation import load_run, read_run
    from jaxrl.training.run_dir import write_json

    _, entry = read_run(args.run_dir)
    count = _eval_count(entry, args.episodes, args.examples)
    algo, state, resolved = load_run(args.run_dir)
    if not api.uses_env(entry):
        size = algo.held_out_size()
        if count is not None and count > size:
            raise cfg.ConfigError(
                f"invalid --examples={count}: this run's held-out set has {size} examples"
            )
        count = size if count is None else count
    seed = algo.eval_seed if args.seed is None else args.seed
    result = algo.evaluate(state, jax.random.key(seed), count)
    report = _eval_report(type(algo), result, resolved, count)
    report["seed"] = seed
    print(json.dumps(report))
    write_json(pathlib.Path(args.run_dir) / "eval.json", report)
    return 0


def _eval_count(entry: Any, episodes: int | None, examples: int | None) -> int | None:
    """What `jaxrl eval` evaluates per agent: `--episodes` (default `EVAL_EPISODES`) for
    an environment run, `--examples` (None: the whole held-out set) for the others; the
    other kind's flag is an error naming the run's algorithm."""
    from jaxrl import api

    if api.uses_env(entry):
        if examples is not None:
            raise cfg.ConfigError(
                f"invalid --examples: {entry.name} runs play environment episodes; use --episodes"
            )
        return EVAL_EPISODES if episodes is None else episodes
    if episodes is not None:
        raise cfg.ConfigError(
            f"invalid --episodes: {entry.name} runs score held-out examples; use --examples"
        )
    return examples


def _eval_report(
    algorithm: type, result: dict[str, Any], resolved: dict[str, Any], count: int
) -> dict:
    """eval.json: per agent and, with a sweep, per sweep point (mean/std over its seeds).

    `result` comes from `algo.evaluate`; the report leads with the algorithm's declared
    `eval_metric` (named `eval_name` in eval.json): per-agent scalars (e.g. an LM's
    `eval_accuracy`), or per-episode values (agents, episodes) averaged per agent (the
    environment algorithms' `returns`, reported as `return`).
    """
    import numpy as np

    from jaxrl.training.contract import TARGET_FIELDS, acts_in_env, declared
    from jaxrl.training.summary import aggregate

    metric = declared(algorithm, "eval_metric")
    name = algorithm.eval_name or metric
    values = np.asarray(result[metric], np.float64)
    per_episode = values.ndim == 2
    per_agent = values.mean(axis=1) if per_episode else values.reshape(-1)
    trains_on = declared(algorithm, "trains_on")
    grid = cfg.expand_grid(cfg.parse_sweep(resolved["run"].get("sweep") or {}))
    report: dict[str, Any] = {trains_on: resolved["config"].get(TARGET_FIELDS[trains_on])}
    if trains_on != "env" and acts_in_env(algorithm):  # an offline run: where it was evaluated
        report["env"] = resolved["config"].get("env")
    report |= {
        **aggregate(per_agent, grid, resolved["run"]["num_seeds"], name),
        f"{name}_per_agent": [float(x) for x in per_agent],
    }
    for other in algorithm.eval_extra:  # e.g. an offline run's normalized_score
        if other in result:
            extra = np.asarray(result[other], np.float64)
            per = extra.mean(axis=1) if per_episode else extra.reshape(-1)
            report.update(aggregate(per, grid, resolved["run"]["num_seeds"], other))
            report[f"{other}_per_agent"] = [float(x) for x in per]
    report["episodes_per_agent" if per_episode else "examples_per_agent"] = count
    return report


def _cmd_plot(args: argparse.Namespace) -> int:
    from jaxrl.plotting import check_output_format, plot_runs

    output = pathlib.Path(args.output or pathlib.Path(args.run_dirs[0]) / f"{args.kind}.png")
    check_output_format(output)
    if args.output and output.exists() and not args.force:
        raise cfg.ConfigError(
            f"invalid --output={str(output)!r}: it exists; pass --force to replace it"
        )
    plot_runs(args.run_dirs, str(output), metric=args.metric, kind=args.kind)
    print(f"wrote {output}")
    return 0


def _cmd_dataset_collect(args: argparse.Namespace) -> int:
    from jaxrl import datasets
    from jaxrl.datasets import collect

    output = pathlib.Path(args.output)
    if output.suffix != ".npz":
        raise cfg.ConfigError(f"invalid --output={args.output!r}: must end in .npz")
    if output.exists() and not args.force:
        raise cfg.ConfigError(
            f"invalid --output={args.output!r}: it exists; pass --force to replace it"
        )
    data = collect.collect(
        args.source,
        args.steps,
        env_id=args.env,
        num_envs=args.num_envs,
        seed=args.seed,
        agent=args.agent,
        expert=args.expert,
        expert_return=args.expert_return,
        random_return=args.random_return,
        reference_episodes=args.reference_episodes,
    )
    datasets.save(data, output)
    print(json.dumps({"path": str(output), **datasets.summary(data)}))
    return 0


def _cmd_dataset_info(args: argparse.Namespace) -> int:
    from jaxrl import datasets

    data = datasets.load(args.path)
    print(json.dumps({**dict(data.metadata), **datasets.summary(data)}))
    return 0


def _cmd_envs(args: argparse.Namespace) -> int:
    """Smoke-steps the built-in environments (or one suite's, `--suite`); lists the
    installed suites' ids after the built-ins."""
    import jax
    import numpy as np

    from jaxrl import envs
    from jaxrl.envs import registry

    env_ids = envs.registered() if args.suite is None else registry.suite_ids(args.suite)
    print(f"{'id':28s} {'observation':28s} {'action':24s} {'steps':>6s} {'return':>9s}")
    failures = 0
    multi_agent_ids = envs.registered(multi_agent=True) if args.suite is None else []
    for env_id in env_ids + multi_agent_ids:
        if multi_agent_ids and env_id == multi_agent_ids[0]:
            print("multi-agent (per agent: observation, action; return: mean over agents)")
        try:
            env, params = envs.make(env_id)
            obs_space, act_space = env.observation_space(params), env.action_space(params)
            if env_id in multi_agent_ids:  # describe one agent's spaces
                obs_space = env.agent_observation_space(params)
                act_space = env.agent_action_space(params)

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
    if args.suite is None:
        for suite in registry.installed_suites():
            ids = registry.suite_ids(suite)
            print(f"\n{suite} (installed; step them with `jaxrl envs --suite {suite}`):")
            print("  " + ", ".join(ids))
    return 1 if failures else 0


def _smoke_rollout(env: Any, params: Any, steps: int, key: Any) -> tuple[Any, Any]:
    """Random-policy rollout: `(total reward, whether every observation was in its space)`."""
    import jax
    import jax.numpy as jnp

    obs_space, act_space = env.observation_space(params), env.action_space(params)
    _, state = env.reset(key, params)

    def step(carry, key):
        state, total = carry
        k_act, k_step = jax.random.split(key)
        action = act_space.sample(k_act)
        obs, state, reward, _, _, _ = env.step(k_step, state, action, params)
        # A multi-agent environment's rewards `(N,)` count their mean over agents.
        return (state, total + jnp.mean(reward)), obs_space.contains(obs)

    (_, total), valid = jax.lax.scan(step, (state, 0.0), jax.random.split(key, steps))
    return total, valid.all()


def _short(space: Any) -> str:
    text = repr(space)
    return text if len(text) <= 28 else f"{type(space).__name__}{getattr(space, 'shape', '')}"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
