"""`--help` reads as written (issue 36, items 5 and 6): whole first sentences (never cut
at a line break or inside parentheses), every default shown, usage lines that name the
whole command, only the flags that apply, and parser errors in the user's terms."""

from __future__ import annotations

import argparse
import re

import pytest

from jaxrl import algorithms, cli
from jaxrl import config as cfg

# Words a description cannot end on when its sentence is complete.
DANGLING = {"a", "an", "the", "of", "to", "and", "or", "when", "with", "for", "in", "by", "as"}


def _command_parsers(argv: list[str]) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers `jaxrl argv...` builds, by `prog` (`jaxrl train ppo`)."""
    return {p.prog: p for p in cli._build_parser(argv).command_parsers.values()}


def _flag_helps(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        action.option_strings[-1]: action
        for action in parser._actions
        if action.option_strings and action.help != argparse.SUPPRESS
    }


def _description(text: str) -> str:
    """A flag's help without its shown default."""
    return re.sub(r"\s*\(default: [^()]*(\([^()]*\)[^()]*)*\)$", "", text).strip()


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


COMMANDS = [
    ["envs"],
    ["eval", "x"],
    ["plot", "x"],
    *(["train", name] for name in algorithms.names()),
    *(["plan", name, "--topology", "cpu:1"] for name in algorithms.names()),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_flag_has_a_whole_description_and_a_shown_default(argv):
    parsers = _command_parsers(argv)
    prog = f"jaxrl {argv[0]}" + (f" {argv[1]}" if argv[0] in ("train", "plan") else "")
    problems = []
    for flag, action in _flag_helps(parsers[prog]).items():
        if flag == "--help":
            continue
        text = action.help % {"default": action.default} if "%(" in action.help else action.help
        description = _description(text.replace("%%", "%"))
        if not _balanced(description):
            problems.append(f"{flag}: unbalanced parentheses: {text!r}")
        last_word = description.split()[-1].lower().strip(",;:")
        if description[-1] in ",:;" or (not description.endswith(".") and last_word in DANGLING):
            problems.append(f"{flag}: ends mid-sentence: {text!r}")
        switch = action.nargs == 0  # --resume, --no-progress: off unless given
        if not (switch or action.required) and "default" not in text:
            problems.append(f"{flag}: no default shown: {text!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", algorithms.names())
def test_config_flags_show_the_first_sentence_of_the_field_docstring(name):
    """The help is the docstring's whole first sentence (for `--total-steps` of SFT it was
    cut at the line break: '...per agent (a cap when (default 128000)')."""
    config_cls = algorithms.get(name).Config
    docs = cfg.field_docs(config_cls)
    parser = _command_parsers(["train", name])[f"jaxrl train {name}"]
    helps = _flag_helps(parser)
    for field, doc in docs.items():
        flag = "--" + field.replace("_", "-")
        if field == "env" or flag not in helps:
            continue  # `env` is a run flag
        assert helps[flag].help.replace("%%", "%").startswith(doc + " (default: "), flag
        assert _balanced(doc) and (doc.endswith(".") or "." not in doc), (flag, doc)


def test_sft_total_steps_help_is_a_whole_sentence():
    parser = _command_parsers(["train", "sft"])["jaxrl train sft"]
    text = _flag_helps(parser)["--total-steps"].help
    assert re.fullmatch(r"Training samples .* stops the run earlier\)\. \(default: \d+\)", text)


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("One. Two.", "One."),
        ("Cut (not here. nor here) but here. Then", "Cut (not here. nor here) but here."),
        ("A line\nthat wraps. Then more.", "A line that wraps."),
        ("Use e.g. 0.5 or foo.bar here. Next.", "Use e.g. 0.5 or foo.bar here."),
        ("No period at all", "No period at all"),
        ("First paragraph\n\nSecond. paragraph.", "First paragraph"),
    ],
)
def test_first_sentence(text, first):
    assert cfg.first_sentence(text) == first


def test_usage_names_the_whole_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "ppo", "--help"])
    assert capsys.readouterr().out.startswith("usage: jaxrl train ppo [options]")
    with pytest.raises(SystemExit):
        cli.main(["plan", "grpo", "--help"])
    assert capsys.readouterr().out.startswith("usage: jaxrl plan grpo --topology TOPOLOGY")


def test_plan_lists_only_the_run_flags_that_change_what_is_compiled():
    flags = _flag_helps(_command_parsers(["plan", "ppo"])["jaxrl plan ppo"])
    for name in ("--resume", "--fresh", "--tensorboard", "--coordinator", "--no-progress"):
        assert name not in flags
    for name in ("--num-seeds", "--seed", "--num-devices", "--agent-execution", "--sweep"):
        assert name in flags


def _error_line(argv: list[str], capsys) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_an_unknown_env_is_an_error_even_with_help(capsys):
    line = _error_line(["train", "ppo", "--env", "Nope", "--help"], capsys)
    assert re.match(r"jaxrl: error: invalid env='Nope': Unknown environment id", line)


@pytest.mark.parametrize("value", ["-1e-3", "-1E-3", "-.001"])
def test_a_negative_number_in_scientific_notation_is_a_value(capsys, value):
    line = _error_line(["train", "ppo", "--lr", value, "--no-progress"], capsys)
    assert line == "jaxrl: error: invalid lr=-0.001: must be > 0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--normalize-obs", "maybe"], "argument --normalize-obs: invalid value 'maybe': must"),
        (["--checkpoint-minutes", "soon"], "argument --checkpoint-minutes: invalid value 'soon'"),
        (["--checkpoint-minutes", "0"], "argument --checkpoint-minutes: invalid value '0'"),
    ],
)
def test_parser_errors_name_no_internal_function(capsys, argv, message):
    line = _error_line(["train", "ppo", *argv], capsys)
    assert message in line and "_parse" not in line


def test_an_unknown_flag_points_at_the_commands_help(capsys):
    line = _error_line(["train", "ppo", "--bogus"], capsys)
    assert line.endswith("(see `jaxrl train ppo --help`)")
