"""No internal error reaches the user: a table of bad command lines, each run in-process
through `jaxrl.cli.main`, must exit 2 with exactly one `jaxrl: error: ...` line on stderr
naming the argument, with no traceback and no "unexpected error".

Every case is rejected before any compilation or training, so the whole table is fast.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import warnings

import numpy as np
import pytest

import jaxrl
from jaxrl import cli
from jaxrl import config as cfg

from .test_cli import USAGE_ERRORS

# name -> (argv, pattern the error line must match); "{tmp}" is the test's tmp_path, where
# `run` is a minimal PPO run directory (config.json and metrics.jsonl, no checkpoints),
# `damaged` the same with a broken line in the middle of metrics.jsonl and `file` a file.
BAD_COMMANDS: dict[str, tuple[list[str], str]] = {
    "eval-episodes-0": (
        ["eval", "{tmp}/run", "--episodes", "0"],
        r"argument --episodes: invalid value '0': must be an integer >= 1",
    ),
    "eval-episodes-negative": (
        ["eval", "{tmp}/run", "--episodes", "-3"],
        r"argument --episodes: invalid value '-3': must be an integer >= 1",
    ),
    "eval-examples-on-an-environment-run": (
        ["eval", "{tmp}/run", "--examples", "3"],
        r"invalid --examples: ppo runs play environment episodes; use --episodes",
    ),
    "eval-examples-0": (
        ["eval", "{tmp}/run", "--examples", "0"],
        r"argument --examples: invalid value '0': must be an integer >= 1",
    ),
    "eval-not-a-run": (["eval", "{tmp}"], r"is not a jaxrl run directory \(no config\.json\)"),
    "eval-no-checkpoint": (["eval", "{tmp}/run"], r"no intact checkpoint to evaluate"),
    "eval-missing-run-dir": (["eval"], r"the following arguments are required: run_dir"),
    "envs-steps-negative": (
        ["envs", "--steps", "-5"],
        r"argument --steps: invalid value '-5': must be an integer >= 1",
    ),
    "envs-steps-0": (["envs", "--steps", "0"], r"argument --steps: invalid value '0'"),
    "plot-damaged-middle-line": (
        ["plot", "{tmp}/damaged", "-o", "{tmp}/x.png"],
        r"invalid metrics file .*damaged/metrics\.jsonl: line 2 is not a JSON row",
    ),
    "plot-unknown-format": (
        ["plot", "{tmp}/run", "-o", "{tmp}/x.jpg2"],
        r"invalid --output='.*x\.jpg2': must be an image file ending in one of \[.*'\.png'.*\]",
    ),
    "plot-unknown-metric": (
        ["plot", "{tmp}/run", "-o", "{tmp}/x.png", "--metric", "reward"],
        r"unknown metric 'reward'; available: \['episode_return'\]",
    ),
    "plot-not-a-run": (["plot", "{tmp}/nowhere", "-o", "{tmp}/x.png"], r"nowhere"),
    "train-run-dir-is-a-file": (
        ["train", "ppo", "--run-dir", "{tmp}/file", "--no-progress"],
        r"invalid run_dir='.*file': must be a directory path .*is an existing file",
    ),
    "train-run-dir-inside-a-file": (
        ["train", "ppo", "--run-dir", "{tmp}/file/run", "--no-progress"],
        r"invalid run_dir='.*file/run': .*file' is an existing file",
    ),
    "train-run-dir-empty": (
        ["train", "ppo", "--run-dir", "", "--no-progress"],
        r"invalid run_dir='': must be a directory path",
    ),
    "train-resume-without-run-dir": (
        ["train", "ppo", "--resume"],
        r"invalid --resume: needs --run-dir of the run",
    ),
    "train-config-bad-suffix": (
        ["train", "ppo", "--config", "{tmp}/ppo.ini", "--run-dir", "{tmp}/r"],
        r"unsupported suffix '\.ini'; use \.toml, \.json or \.yaml",
    ),
    "train-unknown-flag": (["train", "ppo", "--bogus"], r"unrecognized arguments: --bogus"),
    "train-unknown-algorithm": (
        ["train", "trpo"],
        r"argument algorithm: invalid choice: 'trpo' \(choose from .*ppo",
    ),
    "train-num-seeds-not-an-int": (
        ["train", "ppo", "--num-seeds", "two"],
        r"argument --num-seeds: invalid int value: 'two'",
    ),
    "train-bool-not-a-bool": (
        ["train", "ppo", "--normalize-obs", "maybe"],
        r"argument --normalize-obs: invalid value 'maybe': must be true or false",
    ),
    # The train flags of test_cli.py's usage-error table, each in one command line.
    **{
        f"train-{name}": (
            ["train", "ppo", "--total-steps", "4096", "--run-dir", "{tmp}/r", "--no-progress"]
            + flags,
            patterns[0],
        )
        for name, (flags, patterns) in USAGE_ERRORS.items()
    },
}


def _write_run(run_dir: pathlib.Path, metrics: str) -> None:
    """A minimal PPO run directory: what `jaxrl plot` reads, and no checkpoint."""
    run_dir.mkdir()
    resolved = {
        "algorithm": "ppo",
        "config": cfg.to_dict(jaxrl.make_config("ppo")),
        "run": {"num_seeds": 1, "sweep": {}},
    }
    (run_dir / "config.json").write_text(json.dumps(resolved))
    (run_dir / "metrics.jsonl").write_text(metrics)


def _rows(n: int) -> list[str]:
    """`n` metrics.jsonl rows of a one-seed PPO run (no newlines)."""
    return [
        json.dumps({"env_steps": 512 * (i + 1), "episode_return": [10.0 + i]}) for i in range(n)
    ]


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    _write_run(tmp_path / "run", "\n".join(_rows(3)) + "\n")
    rows = _rows(3)
    rows[1] = rows[1][:20]
    _write_run(tmp_path / "damaged", "\n".join(rows) + "\n")
    (tmp_path / "file").write_text("not a directory\n")
    (tmp_path / "ppo.ini").write_text("lr = 1\n")
    return tmp_path


def _run(argv: list[str]) -> int:
    """`cli.main(argv)`'s exit status, whether returned or raised (argparse exits)."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return int(exit_.code)


@pytest.mark.parametrize("case", sorted(BAD_COMMANDS))
def test_bad_command_exits_2_with_one_error_line(workspace, capsys, case):
    argv, pattern = BAD_COMMANDS[case]
    argv = [a.replace("{tmp}", str(workspace)) for a in argv]
    before = sorted(p.name for p in workspace.rglob("*"))
    assert _run(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("jaxrl: error: "), err
    assert re.search(pattern, lines[0]), f"{pattern!r} not in {lines[0]!r}"
    assert "Traceback" not in err and "unexpected error" not in err
    assert sorted(p.name for p in workspace.rglob("*")) == before, "a rejected command wrote"


def test_plot_skips_a_torn_last_line_with_a_warning(workspace, capsys):
    """A run being written (or killed mid-write) may end in a line without its newline:
    the plot skips it, naming the file and line, and draws the complete rows."""
    rows = _rows(3)
    (workspace / "run" / "metrics.jsonl").write_text("\n".join(rows)[:-7])
    output = workspace / "curves.png"
    with pytest.warns(UserWarning, match=r"run/metrics\.jsonl: skipped line 3, an incomplete"):
        assert cli.main(["plot", str(workspace / "run"), "-o", str(output)]) == 0
    assert output.read_bytes().startswith(b"\x89PNG")
    assert "Traceback" not in capsys.readouterr().err


def test_api_sweep_of_a_single_value_says_to_give_a_list():
    with pytest.raises(cfg.ConfigError, match=r"a sweep takes a list of values, e\.g\. \{'lr': \["):
        jaxrl.train("ppo", sweep={"lr": 1e-3})
    with pytest.raises(cfg.ConfigError, match=r"invalid sweep \{'lr': \['fast'\]\}: values must"):
        jaxrl.train("ppo", sweep={"lr": ["fast"]})


def test_api_empty_run_dir_is_an_error_not_a_run_that_saves_nothing():
    with pytest.raises(cfg.ConfigError, match=r"invalid run_dir='': must be a directory path"):
        jaxrl.train("ppo", run_dir="", total_steps=4096, progress=False)


def test_resuming_a_run_with_another_algorithm_names_the_runs_algorithm(tmp_path, capsys):
    """Issue 36, item 7: `train dqn --resume` on a PPO run listed PPO's config fields as
    unknown; it says whose run it is and how to resume it, and changes nothing."""
    legacy = pathlib.Path(__file__).parent / "fixtures" / "legacy_runs" / "ppo"
    run_dir = tmp_path / "ppo-run"
    shutil.copytree(legacy, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert _run(["train", "dqn", "--run-dir", str(run_dir), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert re.search(r"holds a ppo run, not dqn; resume it with `jaxrl train ppo ", lines[0])
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_plot_of_rows_before_any_episode_ended_warns_nothing_and_labels_the_band(workspace):
    """Issue 36, item 9: an early row where no seed had finished an episode (None in
    every column) printed numpy's "Mean of empty slice"; the figure had no title and its
    legend did not say what the band is."""
    from jaxrl.plotting import _mean_std_over_seeds, curves_figure

    rows = [json.dumps({"env_steps": 512, "episode_return": [None]}), *_rows(3)[1:]]
    (workspace / "run" / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = curves_figure([workspace / "run"])
    (axes,) = figure.axes
    assert axes.get_title() == "episode return: ppo on CartPole-v1"
    assert axes.get_legend().get_title().get_text() == "mean over n seeds, band: \u00b11 std"

    values = np.array([[np.nan, np.nan], [1.0, np.nan], [1.0, 3.0]])
    mean, std = _mean_std_over_seeds(values)
    np.testing.assert_array_equal(mean, [np.nan, 1.0, 2.0])
    np.testing.assert_array_equal(std, [np.nan, 0.0, 1.0])
