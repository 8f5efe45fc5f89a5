"""The README's commands are the ones CI runs and the CLI accepts.

* The quick start's test command (`pip install ... && pytest`) is the line
  `.ci/run` executes, character for character, so CI tests exactly what a new
  user is told to run.
* Every `jaxrl ...` command in the README's shell blocks parses with the CLI's
  own parser (`jaxrl.cli._build_parser`), without running anything, and the
  config files it names exist in the repository.
* The example config file (examples/pendulum.toml) loads and validates.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import jaxrl
from jaxrl import config as cfg
from jaxrl.cli import _build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"


def shell_blocks(markdown: str) -> list[str]:
    """The bodies of the fenced ```bash / ```sh blocks, in order."""
    return re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", markdown, flags=re.M | re.S)


def section(markdown: str, title: str) -> str:
    """The text of the `## title` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", markdown, flags=re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def commands(block: str) -> list[str]:
    """The non-empty command lines of a shell block, comments stripped."""
    lines = (line.split(" #")[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def jaxrl_invocations(line: str) -> list[list[str]]:
    """The argument lists of every `jaxrl ...` command in a `&&`-joined line."""
    parts = (shlex.split(part) for part in line.split("&&"))
    return [argv[1:] for argv in parts if argv and argv[0] == "jaxrl"]


def readme_commands(title: str | None = None) -> list[str]:
    text = README.read_text()
    text = section(text, title) if title else text
    return [line for block in shell_blocks(text) for line in commands(block)]


def test_helpers_on_a_known_snippet() -> None:
    text = "## A\n```bash\npip x && pytest  # run\n# only a comment\n```\n## B\n```bash\nls\n```\n"
    assert [commands(b) for b in shell_blocks(section(text, "A"))] == [["pip x && pytest"]]
    assert jaxrl_invocations("pip install -e . && jaxrl train ppo --env X") == [
        ["train", "ppo", "--env", "X"]
    ]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    quick_start = [line for line in readme_commands("Quick start") if "pytest" in line]
    assert len(quick_start) == 1, f"expected one test command in the quick start: {quick_start}"
    ci_lines = [line.strip() for line in CI_RUN.read_text().splitlines()]
    assert quick_start[0] in ci_lines, (
        f".ci/run must run the README's test command {quick_start[0]!r} verbatim"
    )


def test_quick_start_trains_with_a_valid_invocation() -> None:
    invocations = [
        argv for line in readme_commands("Quick start") for argv in jaxrl_invocations(line)
    ]
    train = [argv for argv in invocations if argv[:1] == ["train"]]
    assert len(train) == 1, f"expected one `jaxrl train` in the quick start: {invocations}"
    args = _build_parser(train[0]).parse_args(train[0])
    assert (args.algorithm, args.env) == ("ppo", "CartPole-v1")
    assert args.handler.__name__ == "_cmd_train"


def every_readme_invocation() -> list[list[str]]:
    return [argv for line in readme_commands() for argv in jaxrl_invocations(line)]


@pytest.mark.parametrize("argv", every_readme_invocation(), ids=" ".join)
def test_every_readme_command_parses(argv: list[str]) -> None:
    parser = _build_parser(argv)  # `train ALGO` adds ALGO's hyperparameter flags
    try:
        args = parser.parse_args(argv)
    except SystemExit as err:  # argparse exits with 2 on a bad command line
        raise AssertionError(f"README command `jaxrl {shlex.join(argv)}` does not parse") from err
    config_file = getattr(args, "config_file", None)
    if config_file is not None:
        assert (ROOT / config_file).is_file(), f"README names a missing config file {config_file}"


def test_readme_shows_every_cli_command() -> None:
    shown = {argv[0] for argv in every_readme_invocation()}
    assert shown >= {"train", "eval", "plot", "envs"}, shown


def test_example_config_file_loads_and_validates() -> None:
    """`jaxrl train ppo --env Pendulum-v1 --config examples/pendulum.toml` builds this config."""
    path = ROOT / "examples" / "pendulum.toml"
    values = cfg.load_file(path)
    config = jaxrl.make_config("ppo", "Pendulum-v1", config_file=path)
    assert config.env == "Pendulum-v1" and config.total_steps == 500_000
    for name, value in values.items():  # every value in the file reaches the config
        expected = tuple(value) if isinstance(value, list) else value
        assert getattr(config, name) == expected, name
    # Flags override the file (applied after it), as the file's header says.
    assert jaxrl.make_config("ppo", "Pendulum-v1", config_file=path, lr=3e-4).lr == 3e-4
    argv = ["train", "ppo", "--env", "Pendulum-v1", "--config", "examples/pendulum.toml"]
    args = _build_parser(argv).parse_args(argv)
    assert args.config_file == "examples/pendulum.toml"
