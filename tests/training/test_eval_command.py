"""`jaxrl eval` tells the truth (issue 36, item 3): a language-model run is scored on the
held-out set summary.json reports (all of it, with the seed `finish` used), eval.json
records how many prompts or episodes it scored, and each kind of run takes its own flag."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import pytest

from jaxrl import cli

LEGACY = pathlib.Path(__file__).parent / "fixtures" / "legacy_runs"

# A GRPO run small enough to train in seconds: a 1-layer model on 1-digit addition.
TINY_GRPO = {
    "digits": "1",
    "num-eval": "6",
    "num-layers": "1",
    "hidden-size": "16",
    "num-heads": "2",
    "num-kv-heads": "2",
    "mlp-size": "32",
    "total-steps": "8",
    "num-prompts": "2",
    "group-size": "2",
    "eval-samples": "2",
}


def _run(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return int(exit_.code)


def test_lm_eval_defaults_to_the_summarys_held_out_set_and_reproduces_it(tmp_path, capsys):
    run_dir = tmp_path / "grpo"
    flags = [f"--{k}={v}" for k, v in TINY_GRPO.items()]
    assert cli.main(["train", "grpo", "--run-dir", str(run_dir), "--no-progress", *flags]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir)]) == 0
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["examples_per_agent"] == 6 and "episodes_per_agent" not in report
    assert report["seed"] == 0  # the run's split_seed, which finish() sampled with
    assert report["pass@1_per_agent"] == summary["pass@1_after_per_agent"]

    assert cli.main(["eval", str(run_dir), "--examples", "2"]) == 0
    assert json.loads((run_dir / "eval.json").read_text())["examples_per_agent"] == 2


@pytest.mark.parametrize(
    ("run", "flags", "message"),
    [
        ("grpo", ["--episodes", "3"], r"invalid --episodes: grpo runs score held-out examples; "),
        ("grpo", ["--examples", "5"], r"invalid --examples=5: this run's held-out set has 4 "),
        ("ppo", ["--examples", "3"], r"invalid --examples: ppo runs play environment episodes"),
    ],
)
def test_eval_flag_of_the_other_kind_of_run_is_an_error(tmp_path, capsys, run, flags, message):
    run_dir = tmp_path / run
    shutil.copytree(LEGACY / run, run_dir)
    capsys.readouterr()
    assert _run(["eval", str(run_dir), *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxrl: error: "), lines
    assert re.search(message, lines[0]), lines[0]
    assert not (run_dir / "eval.json").exists()
