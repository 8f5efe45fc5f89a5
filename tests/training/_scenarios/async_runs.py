"""Asynchronous GRPO / PPO-LM runs on 2 emulated CPU devices (sampler 1, learner 1),
for tests/training/test_async_stages.py: `python async_runs.py OUT.json SCENARIO...`.

Must start with `XLA_FLAGS=--xla_force_host_platform_device_count=2`. Each scenario
writes what the test asserts on: the summary's `params_fingerprint`, the per-update
`async_staleness` / `async_dropped` metrics and the losses.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

import jax

import jaxrl
from jaxrl import algorithms
from jaxrl.training import async_stages
from jaxrl.training.driver import RunConfig, train

TINY = dict(
    digits=2,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=1,
    mlp_size=64,
    eval_batch_size=16,
    eval_samples=2,
    num_prompts=4,
    group_size=4,
    reward="correct+length:3:2",  # a random model's rewards differ within a group
)
ROWS = 16  # completions per update
UPDATES = 4


def run(algorithm: str = "grpo", updates: int = UPDATES, run_dir=None, resume=False, **over):
    config = jaxrl.make_config(algorithm, None, **{**TINY, "total_steps": ROWS * updates, **over})
    algo = algorithms.get(algorithm).make(config)
    result = train(
        algo,
        RunConfig(
            seed=0,
            num_devices=2,
            progress=False,
            log_every=ROWS,  # one update per chunk: a checkpoint may come after any
            checkpoint_every=ROWS if run_dir else None,
            run_dir=run_dir,
            resume=resume,
        ),
    )
    rows = result.metrics

    def column(name: str) -> list[float]:  # agent 0's value per update
        return [r[name][0] for r in rows if name in r]

    return {
        "fingerprint": result.summary["params_fingerprint"],
        "staleness": column("async_staleness"),
        "dropped": column("async_dropped"),
        "loss": column("loss"),
        "keys": sorted(rows[0]),
    }


def schedule() -> dict:
    return {f"k{k}": run(async_staleness=k) for k in (1, 2)}


def delays() -> dict:
    """The same run with a slow reward function and a stalled sampler: prompts are
    prepared (and sampling dispatched) late, and every batch is scored late."""
    from jaxrl.algorithms.lm_rollout import RolloutAlgorithm

    prepare, process = RolloutAlgorithm.prepare, RolloutAlgorithm.process

    def stalled_prepare(self, host_state):
        time.sleep(0.3)
        return prepare(self, host_state)

    def slow_process(self, collected, host_state):
        time.sleep(0.3)
        return process(self, collected, host_state)

    RolloutAlgorithm.prepare, RolloutAlgorithm.process = stalled_prepare, slow_process
    try:
        return {"delayed": run(async_staleness=1)}
    finally:
        RolloutAlgorithm.prepare, RolloutAlgorithm.process = prepare, process


def resume() -> dict:
    """Two updates, then resumed to four (the queue of rows in flight from the
    checkpoint), against four uninterrupted."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = str(pathlib.Path(tmp) / "run")
        first = run(async_staleness=2, updates=2, run_dir=run_dir)
        second = run(async_staleness=2, updates=4, run_dir=run_dir, resume=True)
    whole = run(async_staleness=2, updates=4)
    return {"first": first, "resumed": second, "whole": whole}


def sigterm() -> dict:
    """SIGTERM once the first checkpoint is written (as a scheduler sends it), then
    `resume`, against the uninterrupted run."""
    import os
    import signal
    import threading

    from jaxrl.training.loop import TrainingInterrupted

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = pathlib.Path(tmp) / "run"

        def signal_after_first_checkpoint() -> None:
            checkpoints = run_dir / "checkpoints"
            while not (
                checkpoints.exists() and any(p.name.isdigit() for p in checkpoints.iterdir())
            ):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=signal_after_first_checkpoint, daemon=True).start()
        try:
            run(async_staleness=2, run_dir=str(run_dir))
            stopped = "not stopped"
        except TrainingInterrupted as err:
            stopped = str(err)
        resumed = run(async_staleness=2, run_dir=str(run_dir), resume=True)
    return {"stopped": stopped, "after_signal": resumed, "uninterrupted": run(async_staleness=2)}


def guard() -> dict:
    """A queued batch far older than the bound (as if restored from elsewhere) is dropped
    and replaced by one sampled by the current version."""
    start = async_stages.AsyncStagedStepper._start

    def corrupt(self, state, host_state, saved):
        host_state = start(self, state, host_state, saved)
        self.queue[0].version = -5
        return host_state

    async_stages.AsyncStagedStepper._start = corrupt
    try:
        return {"guarded": run(async_staleness=1)}
    finally:
        async_stages.AsyncStagedStepper._start = start


def variants() -> dict:
    """PPO-LM, and GRPO re-scoring on the learner (two epochs) with a KL reference."""
    return {
        "ppo_lm": run("ppo-lm", updates=3, async_staleness=1),
        "grpo_kl_epochs": run(
            updates=3, async_staleness=1, kl_coef=0.1, num_epochs=2, num_minibatches=2
        ),
    }


def planned() -> dict:
    """`jaxrl plan` of an asynchronous run on the 2 CPU devices, and the trained
    parameters' bytes it should say one weight update moves."""
    from jaxrl import plan as plan_lib
    from jaxrl.training import memory

    over = {**TINY, "total_steps": ROWS * UPDATES, "async_staleness": 1}
    p = plan_lib.plan("grpo", topology="cpu:2", device_memory="4GiB", suggest=False, **over)
    algo = algorithms.get("grpo").make(jaxrl.make_config("grpo", None, **over))
    state = jax.eval_shape(algo.init, jax.random.key(0), algo.hyperparams())
    return {
        "plan": {
            "steps": [s.name for s in p.steps],
            "mesh": p.mesh,
            "sampler_mesh": p.sampler_mesh,
            "weight_update_bytes": p.weight_update_bytes,
            "param_bytes": memory.tree_bytes(state.params),
            "totals": {s.name: s.total for s in p.steps},
            "report": p.report(),
        }
    }


SCENARIOS = {
    "plan": planned,
    "schedule": schedule,
    "delays": delays,
    "resume": resume,
    "guard": guard,
    "sigterm": sigterm,
    "variants": variants,
}

if __name__ == "__main__":
    assert jax.device_count() == 2, jax.devices()
    out = {}
    for name in sys.argv[2:]:
        out.update(SCENARIOS[name]())
    pathlib.Path(sys.argv[1]).write_text(json.dumps(out))
