"""Multi-turn GRPO update time on `guess`, with and without KV-cache reuse across turns.

    python benchmarks/multiturn_update.py                      # 3 repeats of 5 updates each
    python benchmarks/multiturn_update.py --repeats 1 --updates 2 --max-numbers 8 \
        --out /tmp/mt.json                                     # smoke

Workloads: the guessing game (`--task guess`) at `--max-numbers` (default 8, the
game's default: 4 turns, prompt 17 tokens, a reply of at most 2, feedback of at most 8;
and 32: 6 turns, replies of at most 3), the model of the game's learning tests
(tests/algorithms/conftest.py's `GUESS`: 2 layers, hidden 64, 4 heads, MLP 256, float32),
warm-started by a short SFT on the game (3,200 samples, as those tests do) so that its
replies are numbers and episodes last several turns; GRPO's defaults otherwise (16
prompts x 8 episodes per update, one AdamW step, temperature 1). The first workload's
ratio is the headline `speedup`; the second, a longer game, has more turns to save on
but longer rows for the learning step, which reuse does not change.

Two algorithm objects differ only in `reuse_kv_cache`: True keeps each episode's KV
cache between turns and prefills only the new tokens (`jaxrl/algorithms/lm_multiturn.py`),
False re-reads the whole context (left-padded to the longest, 47 tokens) every turn.
Each is stepped by the driver's own staged stepper (`StagedStepper.run`: prepare ->
collect/respond rounds -> process -> learn, its shardings, the state donated) from the
same warm start and seed, so both play the same episodes (the check `same_params`: after
the same updates their parameters' fingerprints are equal, unless float rounding of the
cached logits flipped a sampled token). After one warm-up update each (compilation),
`--repeats` rounds alternate the two, `--updates` timed updates each per round.

Reported per workload and variant: the median and minimum seconds per update, the
median `sample_seconds` (the update's rounds and host work, from `prepare` to `process`),
the median `learn_seconds` (the rest of an update: the learning step, one forward and
backward pass over the whole episode rows, the same program with or without reuse) and
the mean turns per episode; per workload `speedup`, the ratio of the median update times
(without / with reuse, against the target of 1.5), `sampling_speedup`, that of the
median `sample_seconds`, and `speedup_ceiling`, the update time without reuse over the
learning step alone: the speedup if sampling with reuse took no time, which bounds what
any sampler can reach while the learning step is unchanged. The load average is
recorded at the start and a warning printed above 1.5. Writes JSON to `--out` (default
benchmarks/results/multiturn_update.json; `python -m benchmarks.reproduce --only
multiturn_update` writes the results file).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import run_metadata, warn_if_loaded, write_results

HERE = Path(__file__).resolve().parent
TARGET = 1.5
GUESS = dict(
    task="guess",
    max_number=8,
    num_eval=50,
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=4,
    mlp_size=256,
    context_len=64,
    eval_batch_size=64,
)


def options(max_number: int) -> dict[str, Any]:
    """The game's config fields at `max_number` (a longer context past 8: more turns)."""
    return {**GUESS, "max_number": max_number, "context_len": 64 if max_number <= 8 else 128}


def warm_start(run_dir: Path, max_number: int = 8) -> None:
    """The guessing game's SFT warm start (3,200 samples, seed 0) into `run_dir`."""
    from jaxrl import config as cfg
    from jaxrl.algorithms import sft
    from jaxrl.training.driver import RunConfig, train

    config = cfg.replace(
        sft.default_config(),
        **options(max_number),
        total_steps=3200,
        stop_at_train_accuracy=None,
    )
    train(sft.make(config), RunConfig(run_dir=str(run_dir), seed=0, progress=False))


class Variant:
    """One algorithm (`reuse_kv_cache` on or off) with its state, stepped update by update."""

    def __init__(self, model_dir: Path, reuse: bool, updates: int, max_number: int = 8):
        import jax

        from jaxrl import config as cfg
        from jaxrl.algorithms import grpo
        from jaxrl.training import driver, progress, steppers

        config = cfg.replace(
            grpo.default_config(),
            **options(max_number),
            model=str(model_dir),
            reuse_kv_cache=reuse,
            total_steps=128 * updates,
            lr=1e-3,
        )
        self.name = "reuse" if reuse else "no reuse"
        self.algo = grpo.make(config)
        run = driver.RunConfig(seed=0, progress=False)
        agents = driver.make_agents(self.algo, run)
        mesh = self.algo.make_mesh(None)
        params = self.algo.load_params()
        self.state, shardings = driver.initial_state(self.algo, agents, mesh, params)
        jax.block_until_ready(self.state)
        self.host = self.algo.init_host_state(run.seed, agents.num_agents)
        self.stepper = steppers.StagedStepper(
            self.algo, agents.num_agents, mesh, shardings, progress.Clock()
        )
        self.seconds: list[float] = []
        self.sample_seconds: list[float] = []
        self.turns: list[float] = []

    def update(self, timed: bool = True) -> None:
        """One update through the driver's staged stepper (its metrics reach the host)."""
        t0 = time.perf_counter()
        self.state, self.host, metrics = self.stepper.run(self.state, self.host, 1)
        elapsed = time.perf_counter() - t0
        if timed:
            self.seconds.append(elapsed)
            self.sample_seconds.append(float(metrics["sample_seconds"].mean()))
            self.turns.append(float(metrics["turns_mean"].mean()))

    def fingerprint(self) -> str:
        from jaxrl.training.checkpoint import tree_fingerprint

        return tree_fingerprint(self.state.params)

    def summary(self) -> dict[str, Any]:
        return {
            "variant": self.name,
            "update_seconds": self.seconds,
            "update_seconds_median": statistics.median(self.seconds),
            "update_seconds_min": min(self.seconds),
            "sample_seconds_median": statistics.median(self.sample_seconds),
            "learn_seconds_median": statistics.median(
                u - s for u, s in zip(self.seconds, self.sample_seconds, strict=True)
            ),
            "turns_mean": statistics.fmean(self.turns),
            "cache_slots": self.algo.cache_len if self.algo.reuses_cache else None,
            "context_len": self.algo.context_len,
        }


def measure(max_number: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Both variants on the game up to `max_number`, alternating (module docstring)."""
    model_dir = args.model
    if model_dir is None:
        model_dir = tmp / f"sft-guess-{max_number}"
        t0 = time.perf_counter()
        warm_start(model_dir, max_number)
        print(f"max_number {max_number}: SFT warm start {time.perf_counter() - t0:.0f} s")
    total = 1 + args.repeats * args.updates
    variants = [Variant(model_dir, reuse, total, max_number) for reuse in (True, False)]
    for variant in variants:
        t0 = time.perf_counter()
        variant.update(timed=False)  # compiles collect and learn
        print(f"{variant.name}: first update {time.perf_counter() - t0:.1f} s", flush=True)
    for repeat in range(args.repeats):
        order = variants if repeat % 2 == 0 else variants[::-1]
        for variant in order:
            for _ in range(args.updates):
                variant.update()
            recent = variant.seconds[-args.updates :]
            print(f"{variant.name}: {statistics.median(recent):.3f} s per update", flush=True)
    reuse, plain = variants
    rows = [v.summary() for v in variants]
    return {
        "max_number": max_number,
        "turns": reuse.algo.task.max_turns,
        "variants": rows,
        "speedup": rows[1]["update_seconds_median"] / rows[0]["update_seconds_median"],
        "sampling_speedup": rows[1]["sample_seconds_median"] / rows[0]["sample_seconds_median"],
        "speedup_ceiling": rows[1]["update_seconds_median"] / rows[0]["learn_seconds_median"],
        "same_params": reuse.fingerprint() == plain.fingerprint(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of both variants")
    parser.add_argument("--updates", type=int, default=5, help="timed updates per round")
    parser.add_argument("--max-numbers", type=int, nargs="+", default=[8, 32])
    parser.add_argument(
        "--model", type=Path, default=None, help="a warm start to reuse (one --max-numbers)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "multiturn_update.json")
    args = parser.parse_args(argv)
    result = run_metadata("multiturn_update", __file__, argv)
    load = warn_if_loaded("the ratio is less reliable on a busy machine")

    import jax

    with tempfile.TemporaryDirectory() as tmp:
        workloads = [measure(n, args, Path(tmp)) for n in args.max_numbers]
    result.update(
        load_average_before=load,
        load_average_at_end=list(os.getloadavg()),
        config={**GUESS, "num_prompts": 16, "group_size": 8, "repeats": args.repeats},
        workloads=workloads,
        speedup=workloads[0]["speedup"],
        target=TARGET,
        met=workloads[0]["speedup"] >= TARGET,
        versions={"jax": jax.__version__},
    )
    for workload in workloads:
        for row in workload["variants"]:
            print(
                f"max_number {workload['max_number']}, {row['variant']:>9}: "
                f"{row['update_seconds_median']:.3f} s per update (min "
                f"{row['update_seconds_min']:.3f}; sampling {row['sample_seconds_median']:.3f} s,"
                f" learning {row['learn_seconds_median']:.3f} s; {row['turns_mean']:.2f} turns "
                "per episode)"
            )
        print(
            f"max_number {workload['max_number']}: speedup {workload['speedup']:.2f}x (target "
            f"{TARGET}x; {workload['speedup_ceiling']:.2f}x if sampling with reuse took no "
            f"time), sampling {workload['sampling_speedup']:.2f}x; same parameters: "
            f"{workload['same_params']}"
        )
    write_results(args.out, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
