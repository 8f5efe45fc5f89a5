"""Does RL after SFT on single string functions improve held-out compositions f(g(x))?

The question of Yuan et al. 2025 ("From f(x) and g(x) to f(g(x)): LLMs learn new skills
in RL by composing old ones", arXiv:2509.25123), on this library's in-process
`strings` task (`jaxrl/tasks/strings.py`) and its tiny character-level Llama:

  1. SFT on depth-1 prompts `f(x)=` only (the atomic skills; no composition is seen).
  2. From that model, GRPO on depth-2 prompts `f(g(x))=` built from the training pairs
     (`held_out_pairs` of the 100 ordered pairs never appear in training), reward =
     exact match.
  3. Control: from the same SFT model, GRPO with the same budget on depth-1 prompts.

Held-out pass@1 (temperature 1, unbiased estimator from `eval_samples` completions
per prompt, as GRPO's `summary.json` measures it) is measured on the depth-2 prompts of
the *held-out* pairs for the SFT model and after each GRPO run; each run's own
`summary.json` pair (on the held-out prompts of the depth it trained on) is kept as
`own_task_pass@1_*`, and the training accuracy curve comes from its `metrics.jsonl`.

    python benchmarks/grpo_strings.py                 # defaults: ~20 min on 2 cores
    python benchmarks/grpo_strings.py --grpo-steps 51200 --sft-steps 64000

Writes benchmarks/results/grpo_strings.json and prints a table and the curves; the
numbers go to benchmarks/notes/2026-11-27-lm-learning.md ("GRPO on string-function composition").
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

import jax
from _harness import run_metadata, warn_if_loaded, write_results

import jaxrl
from jaxrl.algorithms import grpo as grpo_module

HERE = pathlib.Path(__file__).resolve().parent


def task_options(word_len: int, depth: int) -> dict:
    """The task knobs: the held-out pairs depend only on `split_seed`, so depth 1 and
    depth 2 agree on them (see `jaxrl/tasks/strings.py`)."""
    return {"task": "strings", "depth": depth, "word_len": word_len, "held_out_pairs": 20}


def accuracy_curve(run_dir: pathlib.Path, points: int = 10) -> list[tuple[int, float]]:
    """(completions, training accuracy) at about `points` evenly spaced log rows."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    rows = [r for r in rows if "accuracy" in r]
    stride = max(1, len(rows) // points)
    picked = rows[stride - 1 :: stride]

    def scalar(value):
        return float(value[0] if isinstance(value, list) else value)

    return [(int(r["samples"]), scalar(r["accuracy"])) for r in picked]


def held_out_pass_at_1(model_dir: pathlib.Path, args) -> float:
    """pass@1 of the model in `model_dir` on the held-out depth-2 prompts, measured the
    way GRPO's `summary.json` measures it (same prompts, samples and key)."""
    config = grpo_module.GRPOConfig(**task_options(args.word_len, 2), model=str(model_dir))
    algo = grpo_module.make(config.validate())
    key = jax.random.key(config.split_seed)
    return algo.pass_at_k(algo.load_params(), algo.task.eval_examples(), key)["pass@1"]


def grpo(sft_dir: pathlib.Path, run_dir: pathlib.Path, depth: int, args) -> dict:
    """A GRPO run from the SFT model on `depth`-prompts, evaluated on held-out depth 2."""
    t0 = time.perf_counter()
    result = jaxrl.train(
        "grpo",
        **task_options(args.word_len, depth),
        model=str(sft_dir),
        total_steps=args.grpo_steps,
        seed=args.seed,
        run_dir=run_dir,
        progress=False,
    )
    seconds = time.perf_counter() - t0
    summary = result.summary
    return {
        "trained_on_depth": depth,
        "own_task_pass@1_before": summary["pass@1_before"],
        "own_task_pass@1_after": summary["pass@1_after"],
        # The control's own summary is on depth 1: both are re-measured on depth 2.
        "pass@1_before": held_out_pass_at_1(sft_dir, args),
        "pass@1_after": held_out_pass_at_1(run_dir, args),
        "train_seconds": seconds,
        "training_accuracy_curve": accuracy_curve(run_dir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft-steps", type=int, default=64_000, help="SFT samples (depth 1)")
    parser.add_argument("--grpo-steps", type=int, default=25_600, help="GRPO completions")
    parser.add_argument("--word-len", type=int, default=5, help="longest input word")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(HERE / "results" / "grpo_strings.json"))
    args = parser.parse_args()
    warn_if_loaded("learning results do not depend on load, but the times do")
    provenance = run_metadata("grpo_strings", __file__, None)
    work = pathlib.Path(tempfile.mkdtemp(prefix="grpo_strings_"))
    t0 = time.perf_counter()
    sft = jaxrl.train(
        "sft",
        **task_options(args.word_len, 1),
        total_steps=args.sft_steps,
        stop_at_train_accuracy=None,  # the whole budget, as measured
        lr=1e-3,
        lr_schedule="constant",
        seed=args.seed,
        run_dir=work / "sft",
        progress=False,
    ).summary
    sft_seconds = time.perf_counter() - t0
    print(f"SFT depth 1: {json.dumps({k: v for k, v in sft.items() if 'acc' in k})}", flush=True)
    runs = {
        "grpo_depth2": grpo(work / "sft", work / "grpo_depth2", 2, args),
        "grpo_depth1_control": grpo(work / "sft", work / "grpo_depth1", 1, args),
    }
    result = {
        **provenance,
        "sft_samples": args.sft_steps,
        "sft_seconds": sft_seconds,
        "sft_summary": {k: v for k, v in sft.items() if isinstance(v, (int, float))},
        "grpo_completions": args.grpo_steps,
        "word_len": args.word_len,
        "runs": runs,
    }
    write_results(pathlib.Path(args.out), result)
    print("\n| GRPO trained on | held-out f(g(x)) pass@1 before -> after | GRPO time |")
    print("| --- | --- | ---: |")
    for name, run in runs.items():
        print(
            f"| {name} | {run['pass@1_before']:.3f} -> {run['pass@1_after']:.3f} "
            f"| {run['train_seconds']:.0f} s |"
        )
    for name, run in runs.items():
        curve = ", ".join(f"{n}: {a:.2f}" for n, a in run["training_accuracy_curve"])
        print(f"{name} training accuracy by completions: {curve}")


if __name__ == "__main__":
    main()
