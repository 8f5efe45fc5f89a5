"""GRPO step speed: jaxrl vs TRL's GRPOTrainer (torch CPU), side by side in one run.

    python benchmarks/grpo_step.py                              # 8 and 64 new tokens
    python benchmarks/grpo_step.py --steps 3 --warmup 2 --out /tmp/grpo_step.json   # smoke run
    python benchmarks/grpo_step.py --workload skewed            # repeat task, 256 new tokens

Workload, the same on both sides: a tiny Llama (4 layers, hidden 128, MLP 256, 4 heads
of 32, 2 KV heads, untied embeddings, float32; 616k parameters with the 99-character
vocabulary of jaxrl's character tokenizer), random init (seed 0) written once by this
script in Hugging Face layout and loaded by both; 3-digit addition prompts ("123+456=",
9 tokens with bos); 8 prompts x 8 completions per step, at most `--lengths` new tokens
(8 and 64), temperature 1 with no top-k / top-p, EOS ends a completion (both samplers
stop when every row has ended); reward = exact match after stripping; one AdamW step
per update (one epoch, one minibatch, no gradient accumulation), no reference model (KL
coefficient 0), GRPO's group-normalised advantages and per-sequence token-mean loss.
`--workload skewed` swaps the addition prompts for the repetition task's
(jaxrl/tasks/repeat.py: answers of 1-255 characters, lengths log-uniform) at 256 new
tokens, the model's context 272 (the task and context: `WORKLOADS` in
workers/jaxrl_grpo.py; lengths and targets: `WORKLOADS` here). The model is random, so
its completions end at EOS by chance, not by the answers' lengths: every step's rows
end at very different steps and a few run to the budget (the mean length is in the
table).

* jaxrl (project venv, `workers/jaxrl_grpo.py`): the GRPO algorithm object stepped
  exactly as the driver's staged step runs it (prepare -> jitted collect -> host process
  -> jitted learn), with `collect` and `learn` compiled ahead of time; compile time is
  reported separately and the timed steps contain none.
* TRL 1.16.0 (venv `benchmarks/.venvs/trl`: the local torch 2.13.0+cpu wheel through
  pip's find-links, transformers 5.24.0; `workers/trl_grpo.py`): `GRPOTrainer.train()`
  on the same weights and tokenizer, float32 and no gradient checkpointing (TRL's GRPO
  defaults are bf16 and checkpointing), timed by callbacks and by wrapping its
  generation and reward methods.

Threads: XLA's CPU client runs on every core of the machine (2 here); torch gets the
same number of intra-op threads (`--threads`, default: the cores this process may use).

Layouts: each library also runs data-parallel and with gradient accumulation, and the
target is judged between each library's fastest layout on this machine. A layout PxM
(`--jaxrl-layouts`, `--trl-layouts`; default 1x1 2x1 1x2 2x2 for both) is P
data-parallel shares of the rows and M micro-batches per update; every layout computes
the same update. jaxrl: P XLA CPU devices (`--xla_force_host_platform_device_count=P`,
the rows sharded over a P-way `data` mesh, the gradients averaged: `jaxrl train grpo`
on P devices) and `micro_batches=M`; labelled `jaxrl-dP-mbM` (`jaxrl` for 1x1);
`pPxM` runs jaxrl as P JAX processes of one core and one device each instead (a
multi-controller run with gloo collectives, as on P hosts; `jaxrl-pP-mbM`; not in the
defaults: slower here, benchmarks/notes/2026-11-27-grpo-step-speed.md). TRL:
P DDP processes under `torchrun` (gloo) with `--threads / P` threads each, and
`gradient_accumulation_steps = steps_per_generation = M` (one generation of all rows
per optimiser step); labelled `trl-pP-mbM` (`trl` for 1x1).

Asynchronous rows (`--async-staleness 1 2`, the default; none to skip): jaxrl with the
sampler on one XLA CPU device and the learner on the other, K policy versions apart
(`workers/jaxrl_grpo_async.py`, the driver's `AsyncStagedStepper`), labelled `jaxrl-aK`.
Beside each, the floors that bound it: each phase alone on its one device (their sum
is an update with no overlap, their max one with full overlap), and the synchronous
phases on two devices (`jaxrl-d2`).

Each measurement is a fresh worker process printing one JSON line; per length, the two
libraries run back to back, the first one alternating over `--repeats`. The first
`--warmup` steps of every run are excluded (jaxrl's first one is its compile pass).
Reported per library and length: steps/s, completion tokens/s (tokens sampled, EOS
included, over the measured steps' wall time), the ratio jaxrl / TRL of tokens/s
against the targets (>= 2x at 8 tokens, >= 3x at 64), and where a step's time goes
(sampling, rewards, learning). The learning phase's achieved GFLOP/s is set against
the float32 matmul peak of this machine (a jitted 2048^3 matmul, best of 7, timed by
this script before and after the workers). FLOPs: jaxrl's are XLA's cost analysis of
the compiled `learn` program, loop bodies weighted by their trip counts as `jaxrl plan`
does (`jaxrl.plan.matmul_cost`); TRL's are the analytic count (`learn_flops_analytic`)
at each step's padded length, printed beside jaxrl's as a check too. torch's own
`FlopCounterMode` over one TRL learning step is printed as well: it misses attention
(no entry for torch's CPU attention kernel), so it is not used. jaxrl's *matmul floor*
per jitted phase (`benchmarks/matmul_floor.py`: every product of `collect` and `learn`
timed alone on this machine, times its trip count) is printed beside the measured
phases, with the ratio to TRL that jaxrl's step would reach if it took no longer than
those products: the bound on what any change to jaxrl's program (not its kernels) can
reach.

The 1-minute load average is checked at the start and before every worker; above 1.5 a
warning is printed (torch's threads suffer from other work far more than XLA's, which
flatters jaxrl) and every run records the load it started at. Writes a table to stdout
and JSON to `--out` (default benchmarks/results/grpo_step.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import (
    HERE,
    LOAD_WARNING,
    WORKERS,
    run_metadata,
    run_worker,
    settle,
    warn_if_loaded,
    write_results,
)

DEFAULT_OUT = HERE / "results" / "grpo_step.json"
# TRL's venv: torch resolves to the local CPU wheel (/opt/wheels is pip's find-links;
# PyPI's default torch pulls CUDA), transformers pinned to the version CI's optional venv uses.
TRL_REQUIREMENTS = ["torch==2.13.0", "trl==1.16.0", "transformers==5.24.0"]
PROMPTS, GROUP = 8, 8  # prompts per step, completions per prompt
# Per workload (`--workload`; its task and context: workers/jaxrl_grpo.py's `WORKLOADS`):
# what the results call it, its default lengths and the targets of jaxrl / TRL completion
# tokens/s per length, from the issues. `skewed` is the repetition task
# (jaxrl/tasks/repeat.py, answers of 1-255 characters) at 256 new tokens.
WORKLOADS: dict[str, dict[str, Any]] = {
    "addition": {"task": "addition (3 digits)", "lengths": [8, 64], "targets": {8: 2.0, 64: 3.0}},
    "skewed": {
        "task": "repeat (answers of 1-255 characters, log-uniform lengths)",
        "lengths": [256],
        "targets": {256: 3.0},
    },
}
DEFAULT_LAYOUTS = ("1x1", "2x1", "1x2", "2x2")  # data-parallel x micro-batches, both libraries
LOADED_REASON = (
    "other work slows torch's threads far more than XLA's, so jaxrl / TRL ratios "
    "measured now flatter jaxrl; measure on a quiet machine"
)


def _jaxrl_config(max_new_tokens: int, updates: int, workload: str) -> dict[str, Any]:
    """The jaxrl side's GRPOConfig fields (one source: the worker's)."""
    sys.path.insert(0, str(WORKERS))
    from jaxrl_grpo import grpo_config

    return grpo_config(max_new_tokens, updates, PROMPTS, GROUP, workload=workload)


# ----------------------------------------------------------------------------- FLOPs
def learn_flops_analytic(
    model: dict[str, Any],
    rows: int,
    prompt_len: int,
    completion_len: int,
    attention: bool = True,
) -> float:
    """FLOPs of one learning step's policy pass: forward + backward = 3 x forward.

    Forward, per sequence of T = prompt_len + completion_len tokens: 2 FLOPs per
    multiply-add of every non-embedding matmul weight per token (Kaplan et al. 2020,
    "Scaling laws", sec. 2.1, Table 1: C_forward ~ 2N), plus attention's scores and weighted
    values over the full T x T square (4 T^2 d per layer: dense kernels compute the
    masked half too), plus the vocabulary projection at the completion positions only
    (2 C d V; both libraries skip the prompt's logits). The optimiser's elementwise
    work (~10 FLOPs per parameter) is left out. `attention=False` leaves out the
    attention term (what torch's `FlopCounterMode` sees: it has no entry for torch's CPU
    attention kernel, `_scaled_dot_product_flash_attention_for_cpu`).
    """
    h, layers = model["hidden_size"], model["num_hidden_layers"]
    q = model["num_attention_heads"] * model["head_dim"]
    kv = model["num_key_value_heads"] * model["head_dim"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * model["intermediate_size"]
    t = prompt_len + completion_len
    forward = 2 * t * layers * per_layer + (layers * 4 * t * t * q if attention else 0)
    forward += 2 * completion_len * h * model["vocab_size"]
    return 3.0 * rows * forward


def matmul_peak(size: int = 2048, repeats: int = 7) -> dict[str, Any]:
    """float32 GFLOP/s of a jitted `size`^3 matmul on this machine (best and median)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(a, b))
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(matmul(a, b))
        seconds.append(time.perf_counter() - t0)
    flops = 2.0 * size**3
    return {
        "size": size,
        "gflop_per_s_best": flops / min(seconds) / 1e9,
        "gflop_per_s_median": flops / statistics.median(seconds) / 1e9,
        "seconds": seconds,
        "load_average": os.getloadavg()[0],
    }


# ----------------------------------------------------------------------------- setup
def write_shared_inputs(
    directory: Path, prompts_needed: int, seed: int, workload: str = "addition"
) -> dict[str, Any]:
    """The model both libraries load (HF layout + tokenizer), TRL's prompts, and the
    prompt ids and logits TRL's worker checks itself against. Returns the model's shape."""
    import jax
    import numpy as np

    from jaxrl.algorithms.grpo.config import GRPOConfig
    from jaxrl.algorithms.grpo.train import GRPO
    from jaxrl.algorithms.lm_common import agent, encode_example
    from jaxrl.training import driver

    algo = GRPO(GRPOConfig(**_jaxrl_config(8, 1, workload)))
    run = driver.RunConfig(seed=seed, progress=False)
    state, _ = driver.initial_state(algo, driver.make_agents(algo, run), algo.make_mesh(None))
    algo.export(agent(state, 0), directory / "model")
    examples = algo.task.sample_train(np.random.default_rng(seed), prompts_needed)
    (directory / "prompts.json").write_text(json.dumps([[e.prompt, e.answer] for e in examples]))
    ids, _ = encode_example(algo.tokenizer, examples[0].prompt, examples[0].answer)
    params = agent(state, 0).params
    logits = algo.model.apply(params, np.asarray([ids], np.int32))[0]
    np.save(directory / "check_logits.npy", np.asarray(jax.device_get(logits)))
    return {
        "model": dataclasses.asdict(algo.model.config),
        "params": int(sum(x.size for x in jax.tree.leaves(params))),
        "prompt_len": algo.prompt_len,
        "check_ids": ids,
    }


# ----------------------------------------------------------------------------- summaries
def _is_jaxrl(run_or_cell: dict[str, Any]) -> bool:
    """Whether a run or cell is jaxrl's (any layout) rather than TRL's."""
    return run_or_cell["library"].startswith("jaxrl")


def summarise_run(run: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """Per-run figures from a worker's per-step lists."""
    steps = len(run["step_seconds"])
    total = sum(run["step_seconds"])
    rows = PROMPTS * GROUP
    phase_ms = {name: 1e3 * statistics.fmean(v) for name, v in run["phases"].items()}
    learning = sum(run["phases"]["learning"])
    prompt_len = run.get("prompt_len", shape["prompt_len"])
    analytic = [
        learn_flops_analytic(shape["model"], rows, prompt_len, n)
        for n in run["padded_completion_len"]
    ]
    counter = None
    if _is_jaxrl(run):  # one static shape: XLA's count of the compiled step
        flops = [run["learn_flops"]] * steps
        flops_source = "XLA cost analysis of the compiled learn step, loop-weighted"
    else:  # the analytic count at each step's padded length; torch's counter as a check
        flops = analytic
        flops_source = "analytic (torch's FlopCounterMode misses CPU attention)"
        no_attention = learn_flops_analytic(
            shape["model"], rows, prompt_len, run["padded_completion_len_counted"], False
        )
        counter = {  # under DDP each process counts its share of the rows
            "torch_counted_gflop": run["learn_flops"] * run.get("processes", 1) / 1e9,
            "analytic_without_attention_gflop": no_attention / 1e9,
            "padded_completion_len": run["padded_completion_len_counted"],
        }
    return {
        "library": run["library"],
        "max_new_tokens": run["max_new_tokens"],
        "steps": steps,
        "steps_per_second": steps / total,
        "step_ms": 1e3 * total / steps,
        "step_ms_median": 1e3 * statistics.median(run["step_seconds"]),
        "completion_tokens_per_second": sum(run["completion_tokens"]) / total,
        "sampling_tokens_per_second": sum(run["completion_tokens"])
        / sum(run["phases"]["sampling"]),
        "mean_completion_len": sum(run["completion_tokens"]) / (steps * rows),
        "phase_ms": phase_ms,
        "learn_gflop_per_step": statistics.fmean(flops) / 1e9,
        "learn_gflop_per_step_analytic": statistics.fmean(analytic) / 1e9,
        "learn_gflop_per_s": sum(flops) / learning / 1e9,
        "flops_source": flops_source,
        "torch_flop_counter_check": counter,
        "matmul_floor_ms": _floor_ms(run.get("matmul_floor")),
        "async_ms": run.get("async_ms"),
        "load_average_at_start": run["load_average_at_start"],
    }


def _floor_ms(floor: dict[str, Any] | None) -> dict[str, float] | None:
    """A jaxrl run's matmul floor per jitted phase, in ms (benchmarks/matmul_floor.py)."""
    if not floor:
        return None
    return {phase: 1e3 * f["seconds"] for phase, f in floor.items()}


def summarise_cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a (library, length) cell's repeats."""
    keep = ("library", "max_new_tokens", "steps", "flops_source", "torch_flop_counter_check")
    out = {k: runs[0][k] for k in keep}
    out["repeats"] = len(runs)
    for key in (
        "steps_per_second",
        "step_ms",
        "step_ms_median",
        "completion_tokens_per_second",
        "sampling_tokens_per_second",
        "mean_completion_len",
        "learn_gflop_per_step",
        "learn_gflop_per_step_analytic",
        "learn_gflop_per_s",
    ):
        out[key] = statistics.median(r[key] for r in runs)
    out["phase_ms"] = {
        name: statistics.median(r["phase_ms"][name] for r in runs) for name in runs[0]["phase_ms"]
    }
    floors = [r["matmul_floor_ms"] for r in runs if r.get("matmul_floor_ms")]
    out["matmul_floor_ms"] = (
        {phase: statistics.median(f[phase] for f in floors) for phase in floors[0]}
        if floors
        else None
    )
    timed = [r["async_ms"] for r in runs if r.get("async_ms")]
    out["async_ms"] = (
        {name: statistics.median(t[name] for t in timed) for name in timed[0]} if timed else None
    )
    out["load_average_max"] = max(r["load_average_at_start"] for r in runs)
    return out


def ratios(
    cells: list[dict[str, Any]], targets: dict[int, float] | None = None
) -> list[dict[str, Any]]:
    """jaxrl / TRL completion tokens/s and steps/s per length, for every pair of a jaxrl
    layout (1 or N XLA CPU devices) and a TRL layout (1 process, or N under DDP). The
    pair of each library's fastest layout is marked `best` and judged against the
    target: each library as fast as it runs on this machine."""
    out = []
    for n in sorted({c["max_new_tokens"] for c in cells}):
        ours = [c for c in cells if _is_jaxrl(c) and c["max_new_tokens"] == n]
        theirs = [c for c in cells if not _is_jaxrl(c) and c["max_new_tokens"] == n]
        if not (ours and theirs):
            continue
        best = tuple(
            max(group, key=lambda c: c["completion_tokens_per_second"])["library"]
            for group in (ours, theirs)
        )
        target = (WORKLOADS["addition"]["targets"] if targets is None else targets).get(n)
        for a in ours:
            for b in theirs:
                tok = a["completion_tokens_per_second"] / b["completion_tokens_per_second"]
                is_best = (a["library"], b["library"]) == best
                out.append(
                    {
                        "max_new_tokens": n,
                        "jaxrl": a["library"],
                        "trl": b["library"],
                        "tokens_per_second_ratio": tok,
                        "steps_per_second_ratio": a["steps_per_second"] / b["steps_per_second"],
                        "best": is_best,
                        "target": target,
                        "met": None if target is None or not is_best else tok >= target,
                    }
                )
    return out


def print_tables(result: dict[str, Any]) -> None:
    cells, peak = result["cells"], result["matmul_peak_gflop_per_s"]
    compile_s = result["jaxrl_compile_seconds"]
    if result["loaded"]:
        print(
            f"\n*** MEASURED UNDER LOAD (1-min load average up to {result['load_average_max']:.1f}"
            f" > {LOAD_WARNING}): not a result, only a check that the benchmark runs ***"
        )
    print(
        f"\n{PROMPTS} prompts x {GROUP} completions per step; medians of "
        f"{cells[0]['repeats']} repeat(s) of {cells[0]['steps']} steps"
    )
    head = (
        f"{'new tok':>7} {'library':<13} {'steps/s':>8} {'step ms':>8} {'compl tok/s':>11} "
        f"{'mean len':>8} {'compile s':>9}"
    )
    print(head)
    print("-" * len(head))
    for c in cells:
        n = c["max_new_tokens"]
        mine = c["library"] == "jaxrl"
        comp = f"{compile_s[str(n)]:.1f}" if mine and str(n) in compile_s else ""
        print(
            f"{n:>7} {c['library']:<13} {c['steps_per_second']:>8.2f} {c['step_ms']:>8.1f} "
            f"{c['completion_tokens_per_second']:>11,.0f} {c['mean_completion_len']:>8.2f} "
            f"{comp:>9}"
        )
    print(
        "-dN: jaxrl on N XLA CPU devices (data-parallel rows); -pN: N processes (TRL: DDP "
        "under torchrun; jaxrl: JAX processes over gloo); -mbM: M accumulated micro-batches "
        "per update; compile s = jaxrl's init + collect + learn compilation (1x1 layout), "
        "excluded from the step times."
    )
    if result["ratios"]:
        print(
            "\njaxrl / TRL completion tokens/s, every pair of layouts (rows: jaxrl, columns: TRL)"
        )
    for n in sorted({r["max_new_tokens"] for r in result["ratios"]}):
        pairs = [r for r in result["ratios"] if r["max_new_tokens"] == n]
        trl_labels = list(dict.fromkeys(r["trl"] for r in pairs))
        print(f"  {n:>3} new tokens {'':<2}" + "".join(f"{t:>12}" for t in trl_labels))
        for label in dict.fromkeys(r["jaxrl"] for r in pairs):
            row = {r["trl"]: r for r in pairs if r["jaxrl"] == label}
            print(
                f"  {label:<17}"
                + "".join(f"{row[t]['tokens_per_second_ratio']:>11.2f}x" for t in trl_labels)
            )
        best = next(r for r in pairs if r["best"])
        if best["target"]:
            verdict = {True: "met", False: "NOT met", None: "not judged (load)"}[best["met"]]
            print(
                f"  fastest layouts {best['jaxrl']} / {best['trl']}: "
                f"{best['tokens_per_second_ratio']:.2f}x, "
                f"target >= {best['target']:.0f}x: {verdict}"
            )
    print(f"\nWhere a step's time goes (ms per step); float32 matmul peak {peak:.1f} GFLOP/s")
    names = ("sampling", "rewards", "advantages_batch", "learning")
    for n in sorted({c["max_new_tokens"] for c in cells}):
        group = [c for c in cells if c["max_new_tokens"] == n]
        shown = [name for name in names if any(name in c["phase_ms"] for c in group)]
        print(f"  {n} new tokens")
        print(f"  {'layout':<15}" + "".join(f"{name:>18}" for name in shown) + f"{'step':>9}")
        for c in group:
            line = f"  {c['library']:<15}"
            for name in shown:
                ms = c["phase_ms"].get(name)
                text = "" if ms is None else f"{ms:.1f} ({100 * ms / c['step_ms']:.0f}%)"
                line += f"{text:>18}"
            print(line + f"{c['step_ms']:>9.1f}")
        rescoring = result["jaxrl_rescoring_ms"].get(str(n))
        if rescoring is not None:
            in_loss = result.get("jaxrl_rescores_in_loss")
            where = "saved: done in the loss" if in_loss else "in sampling"
            print(f"  jaxrl's re-scoring pass alone: {rescoring:.1f} ms ({where})")
        print(
            "  sampling phase alone: "
            + ", ".join(
                f"{c['library']} {c['sampling_tokens_per_second']:,.0f} tok/s" for c in group
            )
        )
        for c in group:
            print(
                f"  learning {c['library']:<13}: {c['learn_gflop_per_step']:.2f} GFLOP/step "
                f"(analytic {c['learn_gflop_per_step_analytic']:.2f}), "
                f"{c['learn_gflop_per_s']:.1f} GFLOP/s = "
                f"{100 * c['learn_gflop_per_s'] / peak:.0f}% of peak [{c['flops_source']}]"
            )
            floor = c.get("matmul_floor_ms")
            if floor:
                step_floor = floor["collect"] + floor["learning"]
                peers = [p for p in group if not _is_jaxrl(p)]
                fastest = min(peers, key=lambda p: p["step_ms"], default=None)
                best = (
                    ""
                    if fastest is None
                    else f"; at that floor jaxrl would be {fastest['step_ms'] / step_floor:.2f}x "
                    f"{fastest['library']}'s step (TRL's fastest layout)"
                )
                print(
                    f"    matmul floor (each product timed alone x its trip count): "
                    f"sampling {floor['collect']:.1f} ms "
                    f"(measured {c['phase_ms']['sampling']:.1f}), "
                    f"learning {floor['learning']:.1f} ms (measured "
                    f"{c['phase_ms']['learning']:.1f}){best}"
                )
            if c.get("async_ms"):
                print(_async_floor_line(c, group))
            check = c.get("torch_flop_counter_check")
            if check:
                print(
                    f"    torch's FlopCounterMode: {check['torch_counted_gflop']:.2f} GFLOP at "
                    f"{check['padded_completion_len']} completion tokens (analytic without "
                    f"attention: {check['analytic_without_attention_gflop']:.2f})"
                )
    print(
        f"load average: start {result['load_average_at_start'][0]:.2f}, "
        f"max before a worker {result['load_average_max']:.2f}, "
        f"end {result['load_average_at_end'][0]:.2f}"
    )


def _async_floor_line(cell: dict[str, Any], group: list[dict[str, Any]]) -> str:
    """The floors that bound an asynchronous row: each phase alone on its one device
    (serial sum: no overlap; max: full overlap), and the synchronous phases on two
    devices (`jaxrl-d2`), which the asynchronous layout competes with."""
    a = cell["async_ms"]
    gap = a["serial"] - a["pipelined_floor"]
    overlap = f"{100 * (a['serial'] - a['step']) / gap:.0f}%" if gap > 0 else "n/a"
    line = (
        f"    asynchronous: pipelined step {a['step']:.1f} ms; each phase alone on one device: "
        f"sampling {a['sampling_alone']:.1f} + rewards {a['rewards_alone']:.1f}, "
        f"learning {a['learning_alone']:.1f} -> serial {a['serial']:.1f}, pipelined floor "
        f"{a['pipelined_floor']:.1f} (overlap reached {overlap})"
    )
    sync = next((c for c in group if c["library"] == "jaxrl-d2"), None)
    if sync is not None:
        phases = sync["phase_ms"]
        line += (
            f"; synchronous on two devices: sampling {phases['sampling']:.1f}, learning "
            f"{phases['learning']:.1f}, step {sync['step_ms']:.1f}"
        )
    return line


# ----------------------------------------------------------------------------- main
def _trl_launcher(trl_python: Path, processes: int) -> list[str]:
    """The command that runs TRL's worker: its venv's python, or torchrun with
    `processes` data-parallel processes (DDP over gloo on CPU)."""
    if processes == 1:
        return [str(trl_python)]
    return [str(trl_python.parent / "torchrun"), "--nproc_per_node", str(processes)]


def _layout(job: dict[str, Any]) -> str:
    """How a worker splits the machine and the update, for the progress line."""
    if "staleness" in job:
        return f"sampler on 1 XLA CPU device, learner on 1, staleness {job['staleness']}"
    micro = f"{job['micro_batches']} micro-batch(es)"
    if job.get("processes", 1) > 1 and "cpu_devices" in job:
        return f"{job['processes']} JAX processes of 1 core and 1 device each, {micro}"
    if "cpu_devices" in job:
        return f"{job['cpu_devices']} XLA CPU device(s), {micro}"
    return f"{job['threads']} torch thread(s) per process, {micro}"


def parse_layout(text: str) -> tuple[int, int, bool]:
    """`"PxM"` or `"pPxM"` -> (P data-parallel shares, M micro-batches, whether the shares
    are separate processes). For jaxrl, `PxM` is P XLA devices in one process and `pPxM`
    P processes of one device and one core each; TRL's shares are always processes. P x M
    must divide the 8 x 8 rows, and each share must hold whole groups."""
    body = text.lower()
    processes = body.startswith("p")
    try:
        parallel, micro = (int(x) for x in body.removeprefix("p").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PxM or pPxM, e.g. 2x1") from None
    rows = PROMPTS * GROUP
    if parallel < 1 or micro < 1 or rows % (parallel * micro):
        raise argparse.ArgumentTypeError(f"{text!r}: P x M must divide the {rows} rows")
    if (rows // parallel) % GROUP:
        raise argparse.ArgumentTypeError(
            f"{text!r}: each of the {parallel} devices or processes must get whole groups "
            f"of {GROUP} completions"
        )
    return parallel, micro, processes


def run_benchmark(args: argparse.Namespace, trl_python: Path | None) -> dict[str, Any]:
    import jax

    peaks = [matmul_peak()]
    print(f"float32 matmul peak: {peaks[0]['gflop_per_s_best']:.1f} GFLOP/s", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        shared = Path(tmp)
        shape = write_shared_inputs(
            shared, PROMPTS * (args.warmup + args.steps), args.seed, args.workload
        )
        common = {
            "warmup": args.warmup,
            "steps": args.steps,
            "seed": args.seed,
            "workload": args.workload,
        }
        trl_args = {
            **common,
            "model_dir": str(shared / "model"),
            "prompts": str(shared / "prompts.json"),
            "check_logits": str(shared / "check_logits.npy"),
            "check_ids": shape["check_ids"],
            "prompts_per_step": PROMPTS,
            "group_size": GROUP,
            "threads": args.threads,
        }
        for rep in range(args.repeats):
            for n in args.lengths:
                jobs = [
                    (
                        [sys.executable],
                        "jaxrl_grpo.py",
                        {
                            **common,
                            "model_dir": str(shared / "model"),
                            "cpu_devices": 1 if processes else parallel,
                            "processes": parallel if processes else 1,
                            "micro_batches": micro,
                        },
                    )
                    for parallel, micro, processes in args.jaxrl_layouts
                ]
                jobs += [
                    (
                        [sys.executable],
                        "jaxrl_grpo_async.py",
                        {**common, "model_dir": str(shared / "model"), "staleness": k},
                    )
                    for k in args.async_staleness
                ]
                if trl_python is not None:
                    jobs += [
                        (
                            _trl_launcher(trl_python, procs),
                            "trl_grpo.py",
                            {
                                **trl_args,
                                "threads": max(1, args.threads // procs),
                                "micro_batches": micro,
                            },
                        )
                        for procs, micro, _ in args.trl_layouts
                    ]
                if rep % 2:
                    jobs.reverse()
                for launcher, script, job in jobs:
                    settle()  # let the previous worker's load decay first
                    load = warn_if_loaded(LOADED_REASON)
                    print(
                        f"[repeat {rep + 1}/{args.repeats}] {script} max_new_tokens={n} "
                        f"({_layout(job)})",
                        flush=True,
                    )
                    res = run_worker(
                        None, script, {**job, "max_new_tokens": n}, args.timeout, launcher
                    )
                    res["load_average_at_start"] = load
                    res["repeat"] = rep
                    runs.append(res)
                    s = summarise_run(res, shape)
                    print(
                        f"  {s['library']:<6} {s['steps_per_second']:.2f} steps/s, "
                        f"{s['completion_tokens_per_second']:,.0f} completion tok/s, "
                        f"learning {s['learn_gflop_per_s']:.1f} GFLOP/s "
                        f"({res['process_seconds']:.0f}s)",
                        flush=True,
                    )
    peaks.append(matmul_peak())
    summaries = [summarise_run(r, shape) for r in runs]
    keys = sorted({(s["max_new_tokens"], s["library"]) for s in summaries})
    cells = [
        summarise_cell([s for s in summaries if (s["max_new_tokens"], s["library"]) == key])
        for key in keys
    ]
    jax_runs = [r for r in runs if r["library"] == "jaxrl"]
    trl_runs = [r for r in runs if not _is_jaxrl(r)]
    by_length = lambda rs, f: {  # noqa: E731
        str(n): statistics.median(f(r) for r in rs if r["max_new_tokens"] == n)
        for n in {r["max_new_tokens"] for r in rs}
    }
    loads = [r["load_average_at_start"] for r in runs]
    loaded = max(loads + [peaks[0]["load_average"]]) > LOAD_WARNING
    judged = ratios(cells, WORKLOADS[args.workload]["targets"])
    for r in judged if loaded else ():
        r["met"], r["note"] = None, "not judged: measured under load"
    return {
        "workload": {
            "name": args.workload,
            "task": WORKLOADS[args.workload]["task"],
            "prompts_per_step": PROMPTS,
            "completions_per_prompt": GROUP,
            "lengths": args.lengths,
            "model": shape["model"],
            "params": shape["params"],
            "prompt_len": shape["prompt_len"],
            "temperature": 1.0,
            "reward": "exact match after stripping",
            "jaxrl_config": _jaxrl_config(args.lengths[0], args.warmup + args.steps, args.workload),
            "torch_threads": args.threads,
            "cores": len(os.sched_getaffinity(0)),
        },
        "matmul_peak": peaks,
        "matmul_peak_gflop_per_s": max(p["gflop_per_s_best"] for p in peaks),
        "cells": cells,
        "ratios": judged,
        "jaxrl_compile_seconds": by_length(jax_runs, lambda r: sum(r["compile_seconds"].values())),
        "jaxrl_rescoring_ms": by_length(jax_runs, lambda r: 1e3 * r["rescoring_seconds"]),
        "jaxrl_rescores_in_loss": all(r.get("rescores_in_loss", False) for r in jax_runs),
        "trl_logits_max_abs_diff": max((r["logits_max_abs_diff"] for r in trl_runs), default=None),
        "versions": {
            "jax": jax.__version__,
            **(trl_runs[0]["versions"] if trl_runs else {}),
        },
        "runs": runs,
        "summaries": summaries,
        "load_average_max": max(loads),
        "loaded": loaded,
        "load_average_at_end": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="max new tokens (default: the workload's)",
    )
    p.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="addition",
        help="addition: 3-digit addition prompts (8 and 64 new tokens); skewed: the repetition "
        "task's prompts at 256 new tokens (answers of very different lengths)",
    )
    p.add_argument("--steps", type=int, default=20, help="measured steps per run")
    p.add_argument("--warmup", type=int, default=3, help="steps excluded first (>= 2)")
    p.add_argument("--repeats", type=int, default=2, help="runs per library and length")
    p.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="torch intra-op threads (default: usable cores, as XLA)",
    )
    p.add_argument(
        "--jaxrl-layouts",
        type=parse_layout,
        nargs="+",
        default=[parse_layout(x) for x in DEFAULT_LAYOUTS],
        help="jaxrl layouts DxM: D XLA CPU devices (data-parallel rows), M micro-batches; "
        "pPxM: P JAX processes of one core each instead",
    )
    p.add_argument(
        "--trl-layouts",
        type=parse_layout,
        nargs="+",
        default=[parse_layout(x) for x in DEFAULT_LAYOUTS],
        help="TRL layouts PxM: P DDP processes under torchrun (threads / P each), M "
        "gradient-accumulation steps",
    )
    p.add_argument(
        "--async-staleness",
        type=int,
        nargs="*",
        default=[1, 2],
        help="jaxrl asynchronous rows (jaxrl-aK): sampler on one XLA CPU device, learner on "
        "the other, K policy versions apart (none: no asynchronous rows)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per worker process")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.lengths is None:
        args.lengths = list(WORKLOADS[args.workload]["lengths"])
    if args.warmup < 2:
        p.error("--warmup must be >= 2 (jaxrl's first step compiles, TRL's counts FLOPs)")
    for name in ("TRANSFORMERS_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(name, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warn_if_loaded(LOADED_REASON)
    meta = run_metadata("grpo_step", __file__, argv)
    trl_python = None
    if not args.skip_trl:
        from _venvs import ensure_venv

        trl_python = ensure_venv("trl", TRL_REQUIREMENTS)
    result = {**meta, **run_benchmark(args, trl_python)}
    print_tables(result)
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
