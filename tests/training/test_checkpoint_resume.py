"""Checkpoints, resumption, crash safety, NaN handling and determinism of the driver.

Every training run here uses the shared STD program (see conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl import cli
from jaxrl.config import ConfigError
from jaxrl.evaluation import load_run
from jaxrl.training.checkpoint import Checkpointer, CorruptCheckpointWarning, tree_fingerprint
from jaxrl.training.driver import NaNLossError, checkpointed_fields

from .conftest import (
    NUM_AGENTS,
    NUM_UPDATES,
    STD_CHECKPOINT_EVERY,
    STEPS_PER_UPDATE,
    checkpoint_steps,
    jaxrl_command,
    learning_fields,
    read_metrics,
    std_api_kwargs,
    std_train_args,
    subprocess_env,
    tmp_checkpoint_dirs,
)

# Restoring a damaged checkpoint leaves orbax's abandoned read coroutines to the garbage
# collector, which reports them (in whichever test runs then) as unraisable exceptions.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

REFERENCE_STEPS = [24, 28, 32]  # kept by the reference run (every 4 updates, keep 3)


def snapshot(root: pathlib.Path) -> dict[str, str]:
    """Relative path -> content hash ("dir" for directories) of everything under root."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_same_learning(run_dir: pathlib.Path, reference_run: pathlib.Path) -> None:
    """metrics.jsonl has each update exactly once, with the reference run's values."""
    rows = read_metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, NUM_UPDATES + 1))
    assert [r["env_steps"] for r in rows] == [
        u * STEPS_PER_UPDATE for u in range(1, NUM_UPDATES + 1)
    ]
    reference = read_metrics(reference_run)
    for row, ref in zip(rows, reference, strict=True):
        assert learning_fields(row) == learning_fields(ref), f"update {row['update']} differs"


def assert_same_result(run_dir: pathlib.Path, reference_run: pathlib.Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    reference = json.loads((reference_run / "summary.json").read_text())
    assert summary["params_fingerprint"] == reference["params_fingerprint"]
    for key in ("sweep", "final_return_per_agent", "env_steps_per_agent"):
        assert summary[key] == reference[key], key
    assert_same_learning(run_dir, reference_run)


# ----------------------------------------------------------------------------- kill and resume
class _Launch:
    """One `jaxrl train` subprocess, its output in a log file."""

    def __init__(self, run_dir: pathlib.Path, log: pathlib.Path, *extra: str):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                jaxrl_command(*std_train_args(run_dir, *extra, checkpoint_every=512)),
                env=subprocess_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_for(self, condition, timeout: float = 400.0) -> bool:
        """Polls `condition` every few ms; False if the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            if self.proc.poll() is not None:
                return condition()
            time.sleep(0.003)
        self.kill()
        pytest.fail(f"timed out; log:\n{self.log.read_text()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout: float = 600.0) -> None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"did not finish; log:\n{self.log.read_text()}")
        assert code == 0, self.log.read_text()


def test_sigkill_and_resume_matches_uninterrupted_run(tmp_path, reference_run):
    """SIGKILL mid-save, then at a random moment after a checkpoint, then resume to the end."""
    seed = int(os.environ.get("JAXRL_TEST_KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    note = f"(kill times from seed {seed}; rerun with JAXRL_TEST_KILL_SEED={seed})"
    run_dir = tmp_path / "run"
    ckpt_dir = run_dir / "checkpoints"

    def finalised() -> list[int]:
        return checkpoint_steps(run_dir) if ckpt_dir.exists() else []

    # 1. Fresh run, killed while orbax is writing a checkpoint (its temporary directory exists).
    launch = _Launch(run_dir, tmp_path / "1.log")
    assert launch.wait_for(lambda: len(finalised()) >= 1), launch.log.read_text()
    launch.wait_for(lambda: bool(tmp_checkpoint_dirs(run_dir)))
    launch.kill()
    config = (run_dir / "config.json").read_text()
    killed_mid_save = bool(tmp_checkpoint_dirs(run_dir))
    print(f"kill 1 at steps {finalised()}, leftover {tmp_checkpoint_dirs(run_dir)} {note}")

    # 2. Resumed, killed at a random moment after its first new checkpoint.
    before = max(finalised())
    launch = _Launch(run_dir, tmp_path / "2.log", "--resume")
    launch.wait_for(lambda: max(finalised(), default=0) > before)
    time.sleep(rng.uniform(0.0, 1.5))
    launch.kill()
    print(f"kill 2 at steps {finalised()}, leftover {tmp_checkpoint_dirs(run_dir)} {note}")
    # A crash can also tear the last metrics line; resuming must cope with that too.
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"update": 999, "env_steps": 25')

    # 3. Resumed to completion.
    launch = _Launch(run_dir, tmp_path / "3.log", "--resume")
    launch.finish()

    assert (run_dir / "config.json").read_text() == config
    assert_same_result(run_dir, reference_run)
    assert tmp_checkpoint_dirs(run_dir) == [], "temporary checkpoint directories left behind"
    assert checkpoint_steps(run_dir) == [28, 30, 32]
    if not killed_mid_save:
        print(f"note: kill 1 did not land inside a save {note}")


# ----------------------------------------------------------------------------- damaged checkpoints
def _largest_file(directory: pathlib.Path) -> pathlib.Path:
    return max((p for p in directory.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate_data(step_dir: pathlib.Path) -> None:
    path = _largest_file(step_dir / "state")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble_data(step_dir: pathlib.Path) -> None:
    path = _largest_file(step_dir / "state")
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 4, 3 * len(data) // 4, 7):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _garble_meta(step_dir: pathlib.Path) -> None:
    (next(p for p in (step_dir / "meta").iterdir() if p.name == "metadata")).write_text("{not json")


def _delete_state_metadata(step_dir: pathlib.Path) -> None:
    (step_dir / "state" / "_METADATA").unlink()


DAMAGE = {
    "truncated-data": _truncate_data,
    "garbled-data": _garble_data,
    "garbled-meta": _garble_meta,
    "missing-state-metadata": _delete_state_metadata,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_latest_checkpoint_is_skipped(copy_run, restore_target, damage):
    run_dir = copy_run()
    assert checkpoint_steps(run_dir) == REFERENCE_STEPS
    DAMAGE[damage](run_dir / "checkpoints" / "32")
    _, target = restore_target
    checkpointer = Checkpointer(run_dir / "checkpoints", read_only=True)
    with pytest.warns(CorruptCheckpointWarning, match=r"checkpoints/32"):
        step, state, meta = checkpointer.restore_latest(target)
    checkpointer.close()
    assert step == 28
    assert meta["step"] == 28 and meta["env_steps"] == 28 * STEPS_PER_UPDATE
    assert tree_fingerprint(state) == meta["fingerprint"]
    assert int(np.asarray(state["update_step"])[0]) == 28


def test_all_checkpoints_damaged_restores_nothing(copy_run, restore_target):
    run_dir = copy_run()
    for step in REFERENCE_STEPS:
        _truncate_data(run_dir / "checkpoints" / str(step))
    checkpointer = Checkpointer(run_dir / "checkpoints", read_only=True)
    with pytest.warns(CorruptCheckpointWarning) as record:
        assert checkpointer.restore_latest(restore_target[1]) is None
    assert len(record) == 3


def test_abandoned_reads_of_a_skipped_checkpoint_are_not_reported_later(
    copy_run, restore_target, caplog
):
    """orbax leaves the other reads of a damaged checkpoint as failed futures nobody
    awaits; when the garbage collector finds them (often at exit) asyncio logs each with
    its whole tensorstore spec. After the one-line warning, those reports are dropped;
    the same report about a checkpoint that was not skipped still shows."""
    import asyncio
    import gc
    import logging

    run_dir = copy_run()
    _truncate_data(run_dir / "checkpoints" / "32")
    checkpointer = Checkpointer(run_dir / "checkpoints", read_only=True)
    with pytest.warns(CorruptCheckpointWarning, match=r"checkpoints/32"):
        checkpointer.restore_latest(restore_target[1])
    checkpointer.close()

    def abandon(step_dir: pathlib.Path) -> None:
        loop = asyncio.new_event_loop()
        future = loop.create_future()
        future.set_exception(ValueError(f'Error reading "a/.zarray" at "{step_dir}/state/"'))
        del future  # never retrieved: asyncio reports it when it is collected
        gc.collect()
        loop.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        abandon(run_dir / "checkpoints" / "32")
        assert not caplog.records, caplog.text
        abandon(run_dir / "checkpoints" / "28")
    assert len(caplog.records) == 1 and "never retrieved" in caplog.records[0].getMessage()


def test_interleaved_closed_loop_tracebacks_are_dropped_whole():
    """tensorstore's reads report from several native threads at once, so their
    tracebacks interleave and can leave a piece such as ": Event loop is closed" on a
    line of its own (seen in test_cli_runs); those go too, anything else stays."""
    from jaxrl.training.checkpoint import _without_closed_loop_tracebacks

    block = (
        "Traceback (most recent call last):\n"
        '  File "/py/asyncio/base_events.py", line 806, in call_soon_threadsafe\n'
        "    self._check_closed()\n"
        '  File "/py/asyncio/base_events.py", line 519, in _check_closed\n'
        "    raise RuntimeError('Event loop is closed')\n"
    )
    text = block + "Traceback (most recent call last):\nRuntimeError" + block
    text += "RuntimeError: Event loop is closed\n: Event loop is closed\nno space left on device\n"
    assert _without_closed_loop_tracebacks(text) == "no space left on device\n"
    assert _without_closed_loop_tracebacks("unrelated\n") == "unrelated\n"
    glued = "RuntimeErrorEvent loop is closed\nRuntimeError\nno space left on device\n"
    assert _without_closed_loop_tracebacks(glued) == "no space left on device\n"


def test_resume_after_damaged_checkpoint_matches_uninterrupted_run(copy_run, reference_run):
    """Restores step 28 and trains again over the damaged step 32 (which it replaces)."""
    run_dir = copy_run()
    _truncate_data(run_dir / "checkpoints" / "32")
    with pytest.warns(CorruptCheckpointWarning, match=r"checkpoints/32"):
        result = jaxrl.train(
            "ppo",
            run_dir=run_dir,
            resume=True,
            checkpoint_every=STD_CHECKPOINT_EVERY,
            **std_api_kwargs(),
        )
    assert (
        result.summary["params_fingerprint"]
        == json.loads((reference_run / "summary.json").read_text())["params_fingerprint"]
    )
    assert_same_result(run_dir, reference_run)
    assert checkpoint_steps(run_dir) == REFERENCE_STEPS
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCheckpointWarning)
        step, _, _ = Checkpointer(run_dir / "checkpoints", read_only=True).restore_latest(
            checkpointed_fields(result.algorithm, result.state)
        )
    assert step == 32


def test_leftover_temporary_checkpoint_is_ignored(copy_run, restore_target):
    """A partial save (orbax's temporary directory) is never restored; eval leaves it alone."""
    run_dir = copy_run()
    ckpt_dir = run_dir / "checkpoints"
    partial = ckpt_dir / "36.orbax-checkpoint-tmp"
    shutil.copytree(ckpt_dir / "32", partial)
    (partial / "state").rename(partial / "state.orbax-checkpoint-tmp")

    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCheckpointWarning)
        reader = Checkpointer(ckpt_dir, read_only=True)
        assert reader.steps() == REFERENCE_STEPS
        step, _, _ = reader.restore_latest(restore_target[1])
        reader.close()
        assert step == 32
        # `jaxrl eval` may run next to a training run: it must not delete a save in progress.
        _, state, _ = load_run(run_dir)
    assert partial.exists()
    assert int(np.asarray(state.update_step)[0]) == 32

    # A training run's checkpointer (e.g. on --resume) cleans it up before it returns:
    # a clean-up thread left running prints a traceback if the process then exits
    # without saving (a refused resume did, in CI).
    Checkpointer(ckpt_dir).close()
    assert not partial.exists()
    assert checkpoint_steps(run_dir) == REFERENCE_STEPS


# ---------------------------------------------------------------- resuming from config.json
def _interrupt_after(run_dir: pathlib.Path, update: int) -> None:
    """Leaves `run_dir` as a run killed after its checkpoint of `update` (later
    checkpoints and summary.json gone; later metrics rows are dropped on resume)."""
    for step in (run_dir / "checkpoints").iterdir():
        if step.name.isdigit() and int(step.name) > update:
            shutil.rmtree(step)
    (run_dir / "summary.json").unlink()


def test_api_resume_with_only_run_dir_continues_as_saved(copy_run, reference_run):
    """`jaxrl.train("ppo", run_dir=d, resume=True)`: the hyperparameters, sweep,
    num_seeds, seed and checkpoint_every come from d/config.json, as with the CLI."""
    run_dir = copy_run()
    _interrupt_after(run_dir, 24)
    result = jaxrl.train("ppo", run_dir=run_dir, resume=True, progress=False)
    assert (
        result.summary["params_fingerprint"]
        == (json.loads((reference_run / "summary.json").read_text())["params_fingerprint"])
    )
    assert_same_result(run_dir, reference_run)
    assert checkpoint_steps(run_dir) == REFERENCE_STEPS


def test_cli_resume_with_only_run_dir_continues_as_saved(copy_run, reference_run):
    run_dir = copy_run()
    _interrupt_after(run_dir, 24)
    assert cli.main(["train", "ppo", "--run-dir", str(run_dir), "--resume", "--no-progress"]) == 0
    assert_same_result(run_dir, reference_run)
    assert checkpoint_steps(run_dir) == REFERENCE_STEPS


def test_api_resume_checks_a_config_file_against_the_saved_run(copy_run, tmp_path):
    """A config file's values are not overridden by the saved ones: a changed value is
    refused by name (and nothing is written)."""
    run_dir = copy_run()
    before = snapshot(run_dir)
    config_file = tmp_path / "changed.toml"
    config_file.write_text("ent_coef = 0.02\n")
    with pytest.raises(ConfigError, match=r"ent_coef: saved 0.01, now 0.02"):
        jaxrl.train("ppo", run_dir=run_dir, resume=True, config_file=config_file, progress=False)
    assert snapshot(run_dir) == before


def test_api_resume_of_a_directory_without_config_json_fails(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid resume=True: .* has no config.json"):
        jaxrl.train("ppo", run_dir=tmp_path, resume=True, progress=False)


# ----------------------------------------------------------------------------- refusing to resume
@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--total-steps", "4096"], "total_steps"),  # shorter: a run can only be extended
        (["--ent-coef", "0.02"], "ent_coef"),
        (["--num-seeds", "3"], "num_seeds"),
        (["--checkpoint-every", "512"], "checkpoint_every"),
    ],
)
def test_resume_with_different_config_fails_naming_the_field(copy_run, capsys, flags, field):
    run_dir = copy_run()
    before = snapshot(run_dir)
    args = ["train", "ppo", "--run-dir", str(run_dir), "--resume", "--no-progress", *flags]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "cannot resume with a different config" in err
    assert re.search(rf"\b{field}: saved ", err), err
    assert snapshot(run_dir) == before


def test_api_resume_with_different_sweep_fails(copy_run):
    run_dir = copy_run()
    before = snapshot(run_dir)
    with pytest.raises(ConfigError, match=r"sweep: saved \{'lr': \[0.001, 0.0003\]\}"):
        jaxrl.train(
            "ppo",
            run_dir=run_dir,
            resume=True,
            checkpoint_every=STD_CHECKPOINT_EVERY,
            **std_api_kwargs(sweep={"lr": [1e-3]}),
        )
    assert snapshot(run_dir) == before


def test_new_run_into_dir_with_checkpoints_fails_and_deletes_nothing(copy_run, capsys):
    run_dir = copy_run()
    before = snapshot(run_dir)
    assert cli.main(std_train_args(run_dir)) == 2
    err = capsys.readouterr().err
    assert "already holds checkpoints" in err and "--resume" in err and "nothing was deleted" in err
    assert snapshot(run_dir) == before
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        jaxrl.train("ppo", run_dir=run_dir, **std_api_kwargs(total_steps=4096))
    assert snapshot(run_dir) == before


def test_resume_without_run_dir_fails(capsys):
    assert cli.main(["train", "ppo", "--resume", "--no-progress"]) == 2
    assert "--run-dir" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="resume"):
        jaxrl.train("ppo", resume=True, **std_api_kwargs())


# ----------------------------------------------------------------------------- NaN
_NAN_MESSAGE = re.compile(
    r"loss is (nan|inf|-inf) at update (\d+) \(env step (\d+) per agent\), agent (\d+)"
)


def test_nan_loss_stops_the_run_naming_update_and_env_step(tmp_path):
    """lr=1e30 on the first sweep point (agents 0 and 1) diverges immediately."""
    run_dir = tmp_path / "run"
    with pytest.raises(NaNLossError) as info:
        jaxrl.train(
            "ppo",
            run_dir=run_dir,
            checkpoint_every=STD_CHECKPOINT_EVERY,
            **std_api_kwargs(sweep={"lr": [1e30, 1e-3]}),
        )
    match = _NAN_MESSAGE.search(str(info.value))
    assert match, str(info.value)
    update, env_step, agent = int(match[2]), int(match[3]), int(match[4])
    assert env_step == update * STEPS_PER_UPDATE
    assert agent in (0, 1)
    rows = read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    assert all(r["update"] < update for r in rows)
    assert all(s < update for s in checkpoint_steps(run_dir))
    assert not (run_dir / "summary.json").exists()


def test_nan_loss_from_the_cli_exits_1_without_a_traceback(tmp_path, capsys):
    args = std_train_args(tmp_path / "run")
    args[args.index("--sweep") + 1] = "lr=1e30,1e-3"  # agents 0 and 1 diverge
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("jaxrl: training stopped: loss is nan at update"), err
    assert "last good checkpoint is kept" in err and "Traceback" not in err


def test_nan_after_resume_keeps_last_good_checkpoint(copy_run, restore_target):
    """A state whose next update diverges: the run stops there, its checkpoint stays loadable."""
    run_dir = copy_run()
    ckpt_dir = run_dir / "checkpoints"
    for step in (28, 32):
        shutil.rmtree(ckpt_dir / str(step))
    # Make the update after step 24 diverge for agent 2 (lr 1e30), leaving the state itself finite.
    checkpointer = Checkpointer(ckpt_dir)
    _, good, meta = checkpointer.restore_latest(restore_target[1])
    lr = good["hparams"].lr.at[2].set(1e30)
    good = {**good, "hparams": good["hparams"].replace(lr=lr)}
    assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(good["params"]))
    checkpointer.save(24, good, {"env_steps": meta["env_steps"]})
    checkpointer.close()
    before = snapshot(ckpt_dir)

    with pytest.raises(NaNLossError, match="last good checkpoint is kept") as info:
        jaxrl.train(
            "ppo",
            run_dir=run_dir,
            resume=True,
            checkpoint_every=STD_CHECKPOINT_EVERY,
            **std_api_kwargs(),
        )
    match = _NAN_MESSAGE.search(str(info.value))
    assert match, str(info.value)
    assert (int(match[2]), int(match[3]), int(match[4])) == (25, 25 * STEPS_PER_UPDATE, 2)

    assert snapshot(ckpt_dir) == before
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorruptCheckpointWarning)
        step, state, meta = Checkpointer(ckpt_dir, read_only=True).restore_latest(restore_target[1])
    assert step == 24 and tree_fingerprint(state) == tree_fingerprint(good) == meta["fingerprint"]
    assert [r["update"] for r in read_metrics(run_dir)] == list(range(1, 25))
    assert not (run_dir / "summary.json").exists(), (
        "stale summary.json of the earlier run left behind"
    )


# ----------------------------------------------------------------------------- determinism
@pytest.fixture(scope="module")
def seed_runs():
    """The STD config without a run directory, with seed 0 (as the reference) and seed 1."""
    return {seed: jaxrl.train("ppo", seed=seed, **std_api_kwargs()) for seed in (0, 1)}


def test_same_config_and_seed_give_identical_results(seed_runs, reference_run, reference_summary):
    """Seed 0 in-process without checkpoints == the reference CLI run with checkpoints."""
    result = seed_runs[0]
    assert result.summary["params_fingerprint"] == reference_summary["params_fingerprint"]
    assert result.summary["sweep"] == reference_summary["sweep"]
    reference_rows = read_metrics(reference_run)
    assert [learning_fields(r) for r in result.metrics] == [
        learning_fields(r) for r in reference_rows
    ]


def test_different_seed_gives_different_results(seed_runs):
    a, b = seed_runs[0], seed_runs[1]
    assert a.summary["params_fingerprint"] != b.summary["params_fingerprint"]

    def agent_fingerprints(result):
        return [
            tree_fingerprint(jax.tree.map(lambda x, i=i: x[i], result.state.params))
            for i in range(NUM_AGENTS)
        ]

    fa, fb = agent_fingerprints(a), agent_fingerprints(b)
    assert len(set(fa)) == NUM_AGENTS, "agents within a run must differ"
    assert not set(fa) & set(fb), "no agent of seed 1 may equal one of seed 0"
