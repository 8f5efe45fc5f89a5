"""Runs `jaxrl.cli.main(argv)` with a signal sent to itself at a chosen moment of the run.

    python _signal_harness.py MOMENT SIGNAL COUNT -- jaxrl-arguments...

MOMENT is where the signal lands: `setup` (building the initial state), `compile` (from a
timer, while XLA compiles the first chunk's program), `chunk` (as the first chunk starts),
`checkpoint` (while the first checkpoint is written), `finish` (after the last chunk) or
`evaluate` (during `jaxrl eval`'s episodes); COUNT signals are sent, 0.1 s apart. Each
moment patches the function that starts it, so the signal lands there on every run
instead of at a time that depends on the machine. The harness prints `harness: <moment>
took <seconds>` for the timed moments, so a test can check the signal landed inside.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from jaxrl import cli
from jaxrl.training import checkpoint, loop, steppers


def _send(signum: int, count: int, delay: float) -> None:
    """`count` signals to this process, the first after `delay` seconds, from a thread:
    the main thread may be inside XLA, where a signal waits for Python to run again."""

    def send() -> None:
        time.sleep(delay)
        for _ in range(count):
            os.kill(os.getpid(), signum)
            time.sleep(0.1)

    threading.Thread(target=send, daemon=True).start()


def _timed(moment: str, function, signum: int, count: int, delay: float, once: list):
    def wrapper(*args, **kwargs):
        if once:
            return function(*args, **kwargs)
        once.append(True)
        print(f"harness: {moment} started", file=sys.stderr, flush=True)
        _send(signum, count, delay)
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            print(f"harness: {moment} took {time.perf_counter() - start:.3f}", file=sys.stderr)

    return wrapper


def main() -> int:
    moment, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    signum = getattr(signal, name)
    once: list = []
    if moment == "setup":
        loop.initial_state = _timed(moment, loop.initial_state, signum, count, 0.0, once)
    elif moment == "compile":
        steppers.FusedStepper.compile = _timed(
            moment, steppers.FusedStepper.compile, signum, count, 0.2, once
        )
    elif moment == "chunk":
        steppers.FusedStepper.run = _timed(
            moment, steppers.FusedStepper.run, signum, count, 0, once
        )
    elif moment == "checkpoint":
        checkpoint.Checkpointer.save = _timed(
            moment, checkpoint.Checkpointer.save, signum, count, 0.0, once
        )
    elif moment == "finish":
        loop.run_summary = _timed(moment, loop.run_summary, signum, count, 0.0, once)
    elif moment == "evaluate":
        from jaxrl import evaluation

        original = evaluation.load_run

        def load_run(run_dir):
            algo, state, resolved = original(run_dir)
            algo.evaluate = _timed(moment, algo.evaluate, signum, count, 0.3, once)
            return algo, state, resolved

        evaluation.load_run = load_run
    else:
        raise SystemExit(f"unknown moment {moment!r}")
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
