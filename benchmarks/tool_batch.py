"""Host seconds per turn of a multi-turn tool task: the turn's calls one after another or
concurrently (`ToolRunner.run_many`, issue 33).

    python benchmarks/tool_batch.py                      # every case, 128 rows (python: 16)
    python benchmarks/tool_batch.py --cases calculator wait --rows 16 --repeats 3

One turn of `--rows` episodes (multi-turn GRPO's defaults: 16 prompts x 8 episodes), each
row's reply a call, answered by the task the way `jaxrl/algorithms/lm_multiturn.py`'s
`respond` does: `ToolUse.steps` for the whole turn (the calls concurrently, at most
`--concurrency` at once; default: the cores) against `ToolUse.step` row after row (the
calls one by one, as before issue 33's batching). Both give the same turns (checked).
Each mode's turn is timed `--repeats` times, the modes alternating, after one warm-up
turn each (the tool server started, the tool's module imported): median and minimum
wall seconds per turn.

Cases, each a registered tool task or one built like them:
* `calculator`: `tool_multiply`'s calculator (a few milliseconds of work per call);
* `search`: `tool_lookup`'s BM25 search over its 2000 documents;
* `python`: the sandboxed interpreter (`jaxrl.tools.python`), a one-line program, on
  `--python-rows` rows (each call imports `jaxrl.rewards`, and with it JAX, in its own
  process before the sandbox starts, so it is by far the slowest);
* `wait`: a tool that waits `--latency` seconds, as a call to a service would, which
  takes time but no core.

Writes JSON to `--out` (default benchmarks/results/tool_batch.json; `python -m
benchmarks.reproduce --only tool_batch` passes its own and keeps it under `raw`).
Nothing here imports JAX at module level: the tool server imports this module for the
`wait` tool.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from _harness import HERE, run_metadata, warn_if_loaded, write_results

DEFAULT_OUT = HERE / "results" / "tool_batch.json"
CASES = ("calculator", "search", "python", "wait")


def wait(seconds: float) -> str:
    """Waits, then answers: a call to a service, which takes time but no core.

    Args:
        seconds: How long to wait.
    """
    time.sleep(seconds)
    return "ready"


def workload(case: str, rows: int, concurrency: int | None, latency: float) -> tuple[Any, list]:
    """The case's tool task and one turn of `rows` episodes: `(example, history, reply)`
    with a call in each reply."""
    import tool_batch  # by its module name, so that the tool server imports `wait`

    from jaxrl.tasks import make_task
    from jaxrl.tasks.tool_use import ToolUse
    from jaxrl.tools import Tool, python

    if case == "search":
        registered = make_task("tool_lookup", num_eval=rows)
        names = [
            e.prompt.removeprefix("code ").removesuffix("=") for e in registered.eval_examples()
        ]
        replies = [f'<<search("{name}")>>' for name in names]
    else:
        registered = make_task("tool_multiply", num_eval=rows)
        products = [e.prompt.rstrip("=") for e in registered.eval_examples()]
        replies = {
            "calculator": [f'<<calculator("{p}")>>' for p in products],
            "python": [f'<<python("print({p})")>>' for p in products],
            "wait": [f"<<wait({latency!r})>>"] * rows,
        }[case]
    tools = {
        "calculator": registered.tools,
        "search": registered.tools,
        "python": [Tool.from_function(python, timeout=10.0, output_chars=32)],
        "wait": [Tool.from_function(tool_batch.wait, timeout=latency + 10.0)],
    }[case]
    task = ToolUse(
        registered.task,
        tools,
        format="plain",
        longest_call=registered.longest_call,
        max_concurrent_calls=concurrency,
    )
    examples = registered.eval_examples()
    requests = [(e, [task.reset(e)], reply) for e, reply in zip(examples, replies, strict=True)]
    return task, requests


def measure(case: str, rows: int, concurrency: int | None, latency: float, repeats: int):
    """Seconds per turn of both modes (see the module docstring)."""
    task, requests = workload(case, rows, concurrency, latency)
    modes = {
        "one by one": lambda: [task.step(*request) for request in requests],
        "concurrent": lambda: task.steps(requests),
    }
    try:
        turns = {mode: run() for mode, run in modes.items()}  # warm-up, and the check
        if turns["one by one"] != turns["concurrent"]:
            raise AssertionError(f"{case}: the two modes gave different turns")
        failed = sum(
            turn.reward < 0 or turn.feedback.startswith("=error") for turn in turns["concurrent"]
        )
        walls: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(repeats):
            for mode, run in modes.items():
                start = time.perf_counter()
                run()
                walls[mode].append(time.perf_counter() - start)
    finally:
        task.runner.close()
    result = {
        "case": case,
        "rows": rows,
        "concurrency": task.runner.max_concurrent_calls,
        "failed_calls": failed,
        "modes": {
            mode: {
                "seconds_per_turn": statistics.median(times),
                "seconds_per_turn_min": min(times),
                "seconds_per_call": statistics.median(times) / rows,
            }
            for mode, times in walls.items()
        },
    }
    one, both = (result["modes"][m]["seconds_per_turn"] for m in modes)
    result["speedup"] = one / both
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--rows", type=int, default=128, help="episodes in the turn")
    p.add_argument("--python-rows", type=int, default=16, help="episodes in the python case")
    p.add_argument("--concurrency", type=int, help="max_concurrent_calls (default: the cores)")
    p.add_argument("--latency", type=float, default=0.05, help="the wait tool's seconds")
    p.add_argument("--repeats", type=int, default=5, help="timed turns per mode")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    warn_if_loaded("concurrent calls share the cores with whatever else runs")
    result = {**run_metadata("tool_batch", __file__, argv), "cases": []}
    print(f"{'case':<11} {'rows':>5} {'one by one s':>13} {'concurrent s':>13} {'speedup':>8}")
    for case in args.cases:
        rows = args.python_rows if case == "python" else args.rows
        row = measure(case, rows, args.concurrency, args.latency, args.repeats)
        result["cases"].append(row)
        one, both = (row["modes"][m]["seconds_per_turn"] for m in ("one by one", "concurrent"))
        print(
            f"{case:<11} {rows:>5} {one:>13.4f} {both:>13.4f} {row['speedup']:>7.2f}x",
            flush=True,
        )
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
