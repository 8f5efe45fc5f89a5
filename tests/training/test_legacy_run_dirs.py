"""Run directories written by an earlier jaxrl still resume, and end where they would have.

`fixtures/legacy_runs/<name>/` are small runs made by `fixtures/legacy_runs/make.py` with the
code before the core redesign (the commit is in each `expected.json`): each trained to its end,
then lost the checkpoints after its midpoint and its `summary.json`, as a run killed there. A
resume with today's code must read the old `config.json`, checkpoint layout and host state, and
finish with the `params_fingerprint` that the uninterrupted old run reached. The PPO run is a
fused step with two seeds; the GRPO run a staged one whose host state (the task's cursor) is in
its checkpoint.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

import jaxrl
from jaxrl import cli

LEGACY = pathlib.Path(__file__).parent / "fixtures" / "legacy_runs"


@pytest.mark.parametrize("name,through", [("ppo", "cli"), ("grpo", "cli"), ("ppo", "api")])
def test_a_run_directory_from_before_the_redesign_resumes_to_its_fingerprint(
    name, through, tmp_path
):
    run_dir = tmp_path / name
    shutil.copytree(LEGACY / name, run_dir)
    expected = json.loads((run_dir / "expected.json").read_text())
    if through == "cli":
        args = ["train", expected["algorithm"], "--run-dir", str(run_dir), "--resume"]
        assert cli.main([*args, "--no-progress"]) == 0
    else:
        jaxrl.train(expected["algorithm"], run_dir=run_dir, resume=True, progress=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["params_fingerprint"] == expected["params_fingerprint"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = expected["checkpoints_before"][-1]
    assert [row["update"] for row in rows] == list(range(1, last + 1))  # no duplicated rows


def test_a_config_field_added_after_the_run_started_resumes_at_its_default():
    """A run saved before a field existed (here GRPO's rollout correction, added after
    the legacy runs were made) resumes when the field keeps its default, and is refused,
    naming the field, when it does not."""
    from jaxrl import algorithms
    from jaxrl import config as cfg

    saved = json.loads((LEGACY / "grpo" / "config.json").read_text())["config"]
    assert "rollout_correction" not in saved
    entry = algorithms.get("grpo")
    algo = entry.make(cfg.replace(entry.Config(), **saved).validate())
    algo.check_resume(saved)
    changed = entry.make(
        cfg.replace(entry.Config(), **{**saved, "rollout_correction": "token_tis"}).validate()
    )
    with pytest.raises(cfg.ConfigError, match=r"rollout_correction: saved 'none', now 'token_tis'"):
        changed.check_resume(saved)
