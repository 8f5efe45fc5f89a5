"""What a user meets at the command line: signals, resume without checkpoints, --help,
sweep conflicts, one-line errors, the progress bar, plot output (issue: runs that
never lose work, and a CLI that tells the truth).

The signal tests run real `jaxrl train` subprocesses on a config of 1-update chunks
(so the run is still going when the signal arrives) and share one compiled program
through the persistent compilation cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from jaxrl import cli

from .conftest import (
    checkpoint_steps,
    jaxrl_command,
    read_metrics,
    std_train_args,
    subprocess_env,
)

# 4 envs x 64 steps = 256 steps per update; 256 updates, one per chunk (log every update).
LONG = ["--total-steps", "65536", "--log-every", "256"]


def _long_args(run_dir: pathlib.Path, *extra: str) -> list[str]:
    args = std_train_args(run_dir, checkpoint_every=None)
    i = args.index("--total-steps")
    del args[i : i + 2]
    return [*args, *LONG, *extra]


def _start(run_dir: pathlib.Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        jaxrl_command(*_long_args(run_dir, *extra)),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _resume(run_dir: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        jaxrl_command(*_long_args(run_dir, "--resume")),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )


def _wait_for_rows(proc: subprocess.Popen, run_dir: pathlib.Path, n: int = 1) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        path = run_dir / "metrics.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no metrics row within 10 minutes")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_chunk_with_a_checkpoint_and_resume_finishes(tmp_path, signum):
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    _wait_for_rows(proc, run_dir)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert f"{signal.Signals(signum).name} received" in err and "--resume" in err
    rows = read_metrics(run_dir)
    assert 1 <= len(rows) < 256, "the signal came too late to test anything"
    # The checkpoint holds exactly the state after the last logged chunk.
    assert checkpoint_steps(run_dir) == [rows[-1]["update"]]
    assert not (run_dir / "summary.json").exists()

    # The command it printed is all it takes to continue (the saved config fills in the rest).
    printed = re.search(r"continue with `(jaxrl train [^`]+)`", err)
    assert printed, err
    argv = shlex.split(printed[1])
    done = subprocess.run(
        [sys.executable, "-m", "jaxrl.cli", *argv[1:]],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert f"resuming from update {rows[-1]['update']}" in done.stderr
    assert [r["update"] for r in read_metrics(run_dir)] == list(range(1, 257))
    assert json.loads((run_dir / "summary.json").read_text())["env_steps_per_agent"] == 65536


# A tiny SFT run: a staged algorithm, so Python runs between the updates of a chunk and
# a signal is handled mid-chunk; 400 updates per chunk (about 3 s on 2 cores) leave the
# second Ctrl-C time to land while the first one is still finishing its chunk.
SFT_TINY = [
    "train", "sft", "--task", "addition", "--digits", "2", "--num-eval", "16",
    "--num-layers", "1", "--hidden-size", "32", "--num-heads", "2", "--num-kv-heads", "2",
    "--mlp-size", "64", "--batch-size", "8", "--warmup", "0", "--eval-batch-size", "16",
    "--total-steps", "32000", "--log-every", "3200", "--stop-at-train-accuracy", "none",
    "--no-progress",
]  # fmt: skip


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """The first Ctrl-C asks for a checkpoint at the end of the chunk; a second one, sent
    once the first is acknowledged, stops there and then, without that checkpoint."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        jaxrl_command(*SFT_TINY, "--run-dir", str(run_dir)),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_rows(proc, run_dir)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    proc.send_signal(signal.SIGINT)
    err = []
    while not any("SIGINT received" in line for line in err):
        err.append(lines.get(timeout=300))
    proc.send_signal(signal.SIGINT)
    proc.wait(300)
    time.sleep(0.2)  # let the reader drain the pipe
    while not lines.empty():
        err.append(lines.get())
    err = "".join(err)
    assert proc.returncode == 130, err
    assert "jaxrl: interrupted" in err, err
    assert "after writing a checkpoint" not in err and "Traceback" not in err, err
    assert checkpoint_steps(run_dir) == [], "the first Ctrl-C's checkpoint was still written"
    rows = read_metrics(run_dir)
    assert rows[-1]["update"] < 4000, "the run finished before the signals: nothing tested"


def test_resume_of_a_run_killed_before_its_first_checkpoint_fails_clearly(tmp_path):
    """Default checkpoints come every 10 minutes: a run killed at once has none."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir)
    _wait_for_rows(proc, run_dir, n=2)
    proc.kill()
    proc.wait(60)
    before = (run_dir / "metrics.jsonl").read_text()
    done = _resume(run_dir)
    assert done.returncode == 2, done.stderr
    assert "no checkpoint" in done.stderr and "--fresh" in done.stderr
    assert "Traceback" not in done.stderr
    assert (run_dir / "metrics.jsonl").read_text() == before  # nothing overwritten


# ----------------------------------------------------------------------------- damaged
def _scramble(run_dir: pathlib.Path, *steps: int) -> None:
    """Overwrites every array data file of these checkpoints with random bytes (the damage
    after which orbax's in-flight reads printed dozens of asyncio tracebacks)."""
    for step in steps:
        for path in (run_dir / "checkpoints" / str(step) / "state").rglob("*"):
            if path.is_file() and path.parent.name == "d":
                path.write_bytes(os.urandom(100))


def _snapshot(root: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _cli(*args: str) -> subprocess.CompletedProcess:
    """A real `jaxrl` process: orbax's noise goes to file descriptor 2 from native threads
    and at interpreter exit, where an in-process capture would not see it."""
    return subprocess.run(
        jaxrl_command(*args), env=subprocess_env(), capture_output=True, text=True, timeout=900
    )


def test_resume_skips_a_damaged_checkpoint_in_one_line_and_says_which_step_it_used(
    reference_run, tmp_path
):
    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    _scramble(run_dir, 32)
    done = _cli("train", "ppo", "--run-dir", str(run_dir), "--resume", "--no-progress")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(
        f"jaxrl: warning: skipping damaged checkpoint {run_dir}/checkpoints/32"
    )
    assert lines[1] == "jaxrl: resuming from update 28 (skipped damaged [32])"
    summary = json.loads((run_dir / "summary.json").read_text())
    reference = json.loads((reference_run / "summary.json").read_text())
    assert summary["params_fingerprint"] == reference["params_fingerprint"]


def test_resume_with_every_checkpoint_damaged_fails_clearly_and_changes_nothing(
    reference_run, tmp_path
):
    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    _scramble(run_dir, 24, 28, 32)
    before = _snapshot(run_dir)
    done = _cli("train", "ppo", "--run-dir", str(run_dir), "--resume", "--no-progress")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 4, done.stderr  # one per checkpoint, then the error; no noise
    for line, step in zip(lines, (32, 28, 24), strict=False):
        assert line.startswith(
            f"jaxrl: warning: skipping damaged checkpoint {run_dir}/checkpoints/{step} "
        )
    assert lines[3].startswith("jaxrl: error: ")
    assert "3 checkpoint(s), all damaged ([24, 28, 32])" in lines[3] and "--fresh" in lines[3]
    assert _snapshot(run_dir) == before  # metrics.jsonl, summary.json, checkpoints untouched


# ----------------------------------------------------------------------------- help
def test_help_shows_the_presets_values_and_a_description_per_flag(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "ppo", "--env", "Pendulum-v1", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    assert "the preset for --env Pendulum-v1" in out
    assert "(default: 16)" in out.rsplit("--num-envs INT", 1)[1][:200]  # Pendulum: 16 envs
    assert "(default: 0.95)" in out.rsplit("--gamma FLOAT", 1)[1][:200]
    from jaxrl import algorithms
    from jaxrl.config import field_docs

    for name in algorithms.names():
        config_cls = algorithms.get(name).Config
        docs = field_docs(config_cls)
        missing = [f for f in config_cls.__dataclass_fields__ if not docs.get(f)]
        assert not missing, f"{name}: fields without a docstring: {missing}"


def test_every_flag_of_every_command_has_a_description():
    """Run flags, eval and plot options and positionals too, not only the config fields."""
    import argparse

    from jaxrl import algorithms

    def undescribed(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from undescribed(sub, [*path, name])
            elif not (action.help and action.help.strip()):
                yield " ".join(
                    [*path, action.option_strings[-1:][0] if action.option_strings else action.dest]
                )

    for name in algorithms.names():
        missing = sorted(set(undescribed(cli._build_parser(["train", name]), ["jaxrl"])))
        assert not missing, f"flags without a description (train {name}): {missing}"


# ----------------------------------------------------------------------------- errors
def test_a_swept_hyperparameter_given_as_a_flag_is_refused(tmp_path, capsys):
    args = std_train_args(tmp_path / "r") + ["--lr", "5e-4"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "jaxrl: error: invalid sweep: ['lr'] also given as a single value" in err
    assert not (tmp_path / "r").exists()


def test_a_swept_hyperparameter_given_in_the_config_file_is_refused(tmp_path, capsys):
    """The file is a value too: config.json would record it while the sweep trains."""
    path = tmp_path / "ppo.toml"
    path.write_text("lr = 5e-4\ngamma = 0.98\n")
    args = std_train_args(tmp_path / "r") + ["--config", str(path)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"invalid sweep: ['lr'] also given as a single value (lr=0.0005 in {path})" in err
    assert not (tmp_path / "r").exists()


def test_a_missing_optional_dependency_is_one_line(tmp_path, capsys):
    if importlib.util.find_spec("brax") is not None:
        pytest.skip("brax is installed here")
    assert cli.main(["train", "ppo", "--env", "brax:ant", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxrl: error: ") and "pip install brax" in err[0]


def test_unexpected_errors_are_one_line_without_debug(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("something broke")

    monkeypatch.setattr(cli, "_cmd_envs", boom)
    assert cli.main(["envs"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "jaxrl: unexpected error: RuntimeError: something broke "
        "(run with --debug for the traceback)"
    )
    assert cli.main(["--debug", "envs"]) == 1
    assert "Traceback" in capsys.readouterr().err


# ----------------------------------------------------------------------------- output
def test_sweep_summary_has_one_row_per_point_and_progress_counts_per_agent(tmp_path, capsys):
    import jaxrl

    result = jaxrl.train(
        "ppo",
        total_steps=512,
        num_envs=4,
        num_steps=64,
        update_epochs=1,
        num_minibatches=1,
        num_seeds=2,
        sweep={"lr": [1e-3, 3e-4]},
        progress=True,
    )
    err = capsys.readouterr().err
    assert "4 agents" in err and "512/512" in err.replace(" ", "")  # per agent, not 2048
    cli._print_summary(result.summary)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    points = [json.loads(line.split("sweep point ", 1)[1]) for line in lines[1:]]
    assert [p["lr"] for p in points] == [1e-3, 3e-4]
    per_agent = result.summary["final_return_per_agent"]
    assert points[0]["final_return_mean"] == pytest.approx(np.mean(per_agent[:2]))


def test_plot_writes_into_the_run_directory_and_never_overwrites_silently(reference_run, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(reference_run, run_dir)
    assert cli.main(["plot", str(run_dir)]) == 0
    assert (run_dir / "curves.png").exists()
    taken = tmp_path / "taken.png"
    taken.write_bytes(b"mine")
    assert cli.main(["plot", str(run_dir), "-o", str(taken)]) == 2
    assert taken.read_bytes() == b"mine"
    assert cli.main(["plot", str(run_dir), "-o", str(taken), "--force"]) == 0
    assert taken.read_bytes() != b"mine"
