"""The tables and figures of README.md, docs/ and benchmarks/README.md, from results files.

A generated block sits between `<!-- results:NAME -->` and `<!-- /results:NAME -->`;
`write_all()` (`python -m benchmarks.reproduce --write-docs`) rewrites every block from
benchmarks/results/*.json and draws one learning-curve figure per family into
docs/img/. tests/benchmarks/test_docs.py fails when a block differs from what the
results files give, so a number in a table is always the one its file holds.

A result measured on a busy machine (load average above 1.5 at the start) is marked
with a dagger; one not measured at all says how to measure it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Callable
from typing import Any

from benchmarks import registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"
LOADED = "†"
BLOCK = re.compile(r"(<!-- results:([\w-]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)
FILES = (
    "README.md",
    "benchmarks/README.md",
    "docs/lm.md",
    "docs/ARCHITECTURE.md",
    "docs/lm_sampling.md",
    "docs/plan.md",
    "docs/distributed.md",
    "docs/offline.md",
    "docs/envs.md",
    "docs/multiagent.md",
)


def load(name: str) -> dict[str, Any] | None:
    """The results file of `name`, or None when it has not been measured."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def number(x: float, unit: str = "return") -> str:
    """A value at the precision its scale deserves (accuracies to 3 decimals)."""
    if unit.endswith("steps"):  # a count of steps (rlpd_from_rebrac_pendulum's)
        return f"{x:,.0f}"
    if unit not in ("return", "score"):
        return f"{x:+.3f}" if "gain" in unit or "difference" in unit else f"{x:.3f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _steps(entry: registry.Entry) -> str:
    steps = None
    if entry.algorithm and entry.env:  # the preset, then the config file, then overrides
        import jaxrl

        config_file = ROOT / entry.config_file if entry.config_file else None
        # Only the config's fields: a pipeline's overrides also name its other stages.
        fields = {f.name for f in dataclasses.fields(jaxrl.algorithms.get(entry.algorithm).Config)}
        overrides = {k: v for k, v in entry.overrides.items() if k in fields}
        config = jaxrl.make_config(entry.algorithm, entry.env, config_file=config_file, **overrides)
        steps = config.total_steps
    return f"{steps // 1000:,}k steps" if steps else ""


def short(entry: registry.Entry, record: dict[str, Any]) -> str:
    """One result in a few words: `IQM [low, high]` over n seeds, dagger if loaded."""
    agg = record["aggregate"]
    low, high = agg["iqm_ci95"]
    u = entry.unit
    mark = LOADED if record.get("loaded") else ""
    return f"{number(agg['iqm'], u)} [{number(low, u)}, {number(high, u)}]{mark}"


def _where(entry: registry.Entry) -> str:
    if entry.label:
        return entry.label
    if entry.env:
        label = entry.env.removesuffix("-v1").removesuffix("-MinAtar")
        if entry.env.endswith("MinAtar"):
            label += "-MinAtar"
        if entry.overrides.get("backbone"):
            label += f" ({entry.overrides['backbone']})"
        return label
    return entry.name.replace("_", " ")


def _missing(names: list[str]) -> str:
    return (
        "not yet measured at this commit: "
        + ", ".join(f"`{n}`" for n in names)
        + " (`python -m benchmarks.reproduce --only NAME`)"
    )


def learning_cell(names: list[str]) -> str:
    """README's learning-result cell of one algorithm family."""
    parts, missing = [], []
    # A row of several algorithms (e.g. offline RL) names each result's algorithm.
    several = len({registry.get(name).algorithm for name in names}) > 1
    for name in names:
        entry, record = registry.get(name), load(name)
        if record is None or "aggregate" not in record:
            missing.append(name)
            continue
        seeds = record["aggregate"]["n"]
        budget = _steps(entry) if entry.env else ""
        detail = ", ".join(x for x in (f"{seeds} seeds", budget) if x)
        who = f"{entry.algorithm}: " if several and entry.algorithm else ""
        parts.append(f"{who}{_where(entry)} {short(entry, record)} ({detail})")
    if missing:
        parts.append(_missing(missing))
    return "; ".join(parts)


# README's "What you can train": (algorithm, command, trains on, step, results)
TRAIN_ROWS: tuple[tuple[str, str, str, str, list[str]], ...] = (
    (
        "PPO (discrete, Gaussian, tanh-squashed, recurrent GRU)",
        "`jaxrl train ppo --env ENV`",
        "every environment in `jaxrl envs`",
        "fused",
        ["ppo_cartpole", "ppo_acrobot", "ppo_pendulum", "ppo_cartpole_pomdp", "ppo_breakout"],
    ),
    (
        "PQN (Q(lambda), LayerNorm, no replay)",
        "`jaxrl train pqn --env ENV`",
        "discrete actions",
        "fused",
        ["pqn_cartpole", "pqn_breakout"],
    ),
    (
        "DQN (Double-Q, dueling, n-step, prioritised replay)",
        "`jaxrl train dqn --env ENV`",
        "discrete actions",
        "fused",
        ["dqn_cartpole", "dqn_breakout"],
    ),
    (
        "C51 (distributional DQN)",
        "`jaxrl train c51 --env ENV`",
        "discrete actions",
        "fused",
        ["c51_cartpole"],
    ),
    (
        "SAC (autotuned temperature)",
        "`jaxrl train sac --env ENV`",
        "continuous (Box) actions",
        "fused",
        ["sac_pendulum"],
    ),
    ("TD3", "`jaxrl train td3 --env ENV`", "continuous (Box) actions", "fused", ["td3_pendulum"]),
    (
        "Offline RL: IQL, TD3+BC, CQL (continuous and discrete), SAC-N/EDAC, ReBRAC, "
        "behaviour cloning (datasets from runs and replay buffers; D4RL-normalised scores; "
        "docs/offline.md)",
        "`jaxrl train iql --env ENV --dataset DATA.npz`",
        "datasets (`jaxrl dataset collect`) of continuous-action environments; "
        "discrete ones for `cql-discrete` and `bc`",
        "fused",
        [
            "iql_pendulum_medium_replay",
            "td3_bc_pendulum_medium_replay",
            "cql_pendulum_medium_replay",
            "sac_n_pendulum_medium_replay",
            "rebrac_pendulum_medium_replay",
            "cql_discrete_breakout_replay",
            "bc_breakout_replay",
            "iql_hopper_medium_replay",
            "td3_bc_hopper_medium_replay",
            "rebrac_hopper_medium_replay",
        ],
    ),
    (
        "Offline-to-online: RLPD (symmetric sampling of offline and online data, LayerNorm "
        "critics, high update-to-data ratio; `--init-from` an offline run)",
        "`jaxrl train rlpd --env ENV --dataset DATA.npz`",
        "continuous (Box) actions",
        "fused",
        ["rlpd_pendulum_medium_replay", "rlpd_from_rebrac_pendulum"],
    ),
    (
        "Dreamer (DreamerV3-style world model; `--backbone gru\\|transformer\\|ssm`)",
        "`jaxrl train dreamer --env ENV`",
        "discrete and continuous actions, vector and image observations",
        "fused",
        [
            "dreamer_cartpole_gru",
            "dreamer_cartpole_transformer",
            "dreamer_cartpole_ssm",
            "dreamer_breakout",
            "dreamer_spaceinvaders",
            "dreamer_asterix",
            "dreamer_freeway",
        ],
    ),
    (
        "Multi-agent: IPPO, MAPPO (centralised critic), PQN-VDN (value decomposition); shared "
        "or separate parameters, recurrent actors (docs/multiagent.md)",
        "`jaxrl train ippo --env SimpleSpread-MPE`",
        "multi-agent environments in `jaxrl envs`; `jaxmarl:ID` with the `[jaxmarl]` extra",
        "fused",
        [
            "ippo_simple_spread",
            "mappo_simple_spread",
            "pqn_vdn_simple_spread",
            "ippo_smax_3m",
            "mappo_smax_3m",
        ],
    ),
    (
        "SFT of a Llama-style LM (full or LoRA)",
        "`jaxrl train sft --task addition`",
        "in-process tasks, `jsonl:PATH`",
        "staged",
        ["sft_addition_default", "sft_addition_full"],
    ),
    (
        "Preference optimisation: DPO, IPO, SimPO, RPO (DPO + NLL), Bradley-Terry reward "
        "models (full or LoRA)",
        "`jaxrl train dpo --task addition --model RUN_DIR`, `--data pairs.jsonl`",
        "(prompt, chosen, rejected) JSONL files; pairs made from in-process tasks",
        "staged",
        ["dpo_addition", "rpo_addition"],
    ),
    (
        "GRPO family (GRPO, Dr. GRPO, RLOO, REINFORCE++; clip, GSPO, CISPO; KL, DAPO options)",
        "`jaxrl train grpo --task addition --model RUN_DIR`",
        "in-process tasks, `jsonl:PATH`, multi-turn episodes with environment feedback "
        "(`--task guess`, `addition_retry`; docs/lm.md)",
        "staged",
        ["grpo_addition"],
    ),
    (
        "PPO with a critic for LMs (separate value model, GAE, clipped value loss; GRPO's "
        "losses and options)",
        "`jaxrl train ppo-lm --task addition --model RUN_DIR`",
        "in-process tasks, `jsonl:PATH`, multi-turn episodes (`--task guess`; docs/lm.md)",
        "staged",
        ["ppo_lm_addition"],
    ),
    (
        "Process reward models (binary labels at step ends), step rewards in GRPO and "
        "PPO-LM (a PRM, a verifier, or PRIME's implicit PRM)",
        "`jaxrl train prm --task addition_steps`, then `--process-reward RUN_DIR`",
        "step tasks (`addition_steps`)",
        "staged",
        ["prm_addition_steps", "grpo_prm_addition_steps"],
    ),
)


def what_you_can_train() -> str:
    lines = [
        "| algorithm | command | on | step | learning result: IQM [95% CI] over seeds "
        "(benchmarks/README.md) |",
        "|---|---|---|---|---|",
    ]
    for algorithm, command, on, step, names in TRAIN_ROWS:
        lines.append(f"| {algorithm} | {command} | {on} | {step} | {learning_cell(names)} |")
    lines.append("")
    lines.append(
        f"{LOADED} measured on a busy machine (load average above 1.5): a learning result "
        "is still the code's, its wall time is not."
    )
    return "\n".join(lines)


def suite_duration() -> str:
    record = load("default_suite_duration")
    if record is None:
        return (
            "How long the default tests take here: not measured yet "
            "(`python -m benchmarks.reproduce --only default_suite_duration` on a quiet "
            "machine)."
        )
    minutes = record["per_seed"][0] / 60
    mark = LOADED if record.get("loaded") else ""
    exit_code = record.get("details", {}).get("exit_code", 0)
    failed = f"; that run failed, exit code {exit_code}" if exit_code else ""
    return (
        f"The default tests took {minutes:.0f} minutes{mark} on {record['cores']} cores of "
        f"an {record['cpu']} (commit {record['commit'][:7]}, "
        f"`benchmarks/results/default_suite_duration.json`{failed})."
    )


def learning_table(names: list[str]) -> str:
    """benchmarks/README.md's table of some learning results, with provenance."""
    lines = [
        "| result | IQM [95% CI] | mean ± std | seeds | budget | wall | commit, load |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        entry, record = registry.get(name), load(name)
        if record is None:
            lines.append(f"| `{name}` | not measured yet | | {entry.seeds} | | | |")
            continue
        agg, u = record["aggregate"], entry.unit
        mark = LOADED if record.get("loaded") else ""
        lines.append(
            f"| `{name}` | {short(entry, record)} | {number(agg['mean'], u)} ± "
            f"{number(agg['std'], u).lstrip('+')} | {agg['n']} | {_steps(entry) or '-'} | "
            f"{record['wall_seconds'] / 60:.1f} min | {record['commit'][:7]}, "
            f"{record['load_average_at_start'][0]:.1f}{mark} |"
        )
    return "\n".join(lines)


TOOL_RESULTS = ("grpo_tool_multiply", "grpo_tool_multiply_no_tools")


def tool_use_table() -> str:
    """docs/lm.md's tool-use target: both runs' aggregates, then per seed the held-out
    pass@1 before and after GRPO and GRPO's wall time (the target's 30 minutes)."""
    lines = [learning_table(list(TOOL_RESULTS)), ""]
    lines += [
        "| result | seed | pass@1 before GRPO | after | GRPO wall time |",
        "|---|---|---|---|---|",
    ]
    for name in TOOL_RESULTS:
        record = load(name)
        for d in (record or {}).get("details", []):
            lines.append(
                f"| `{name}` | {d['seed']} | {d['pass@1_before']:.3f} | {d['pass@1_after']:.3f} "
                f"| {d['train_seconds'] / 60:.1f} min |"
            )
    return "\n".join(lines)


def speed_table() -> str:
    """The speed results: what each measures against which peer, and when."""
    lines = [
        "| result | measures | peer | commit, date, load at start | file |",
        "|---|---|---|---|---|",
    ]
    for entry in registry.ENTRIES:
        if entry.kind != "speed":
            continue
        record = load(entry.name)
        if record is None:
            when = "not measured yet"
        else:
            load_avg = record.get("load_average_at_start")
            shown = f"{load_avg[0]:.1f}" if load_avg else "not recorded"
            mark = LOADED if record.get("loaded") in (True, None) else ""
            when = f"{str(record['commit'])[:7]}, {record['date'][:10]}, {shown}{mark}"
        lines.append(
            f"| `{entry.name}` | {entry.measures} | {entry.peer} | {when} | "
            f"[{entry.name}.json](results/{entry.name}.json) |"
        )
    lines.append("")
    lines.append(
        f"{LOADED} measured on a busy machine or without a recorded load: a ratio to its "
        "peer measured in the same run still says something, absolute speeds do not."
    )
    return "\n".join(lines)


def _rate(x: float | str | None) -> str:
    """A speed for a table ("-" where the file has none, e.g. gymnax lacks the env)."""
    if not isinstance(x, int | float):
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _cells(raw: dict[str, Any], key: str = "cells") -> list[dict[str, Any]]:
    return [c for c in raw.get(key, []) if isinstance(c, dict)]


def _speed_rows(name: str, raw: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The headline rows of a speed result's raw output: (header, rows)."""
    if name == "ppo_throughput":
        return ["library", "seeds", "env steps/s"], [
            [c["library"], str(c["seeds"]), _rate(c["steps_per_second"])] for c in _cells(raw)
        ]
    if name == "offpolicy_throughput":
        return ["task", "library", "seeds", "env steps/s"], [
            [c["task"], c["library"], str(c["seeds"]), _rate(c["steps_per_second"])]
            for c in _cells(raw)
        ]
    if name == "offline_throughput":
        return ["algorithm", "library", "seeds", "gradient steps/s"], [
            [c["algorithm"], c["library"], str(c["seeds"]), _rate(c["steps_per_second"])]
            for c in _cells(raw)
        ]
    if name == "agent_execution":
        return ["case", "agents", "execution", "env steps/s"], [
            [r["case"], str(r["agents"]), r["agent_execution"], _rate(r["env_steps_per_second"])]
            for r in _cells(raw, "rows")
        ]
    if name == "lm_sampling":
        return ["new tokens", "jaxrl tokens/s", "transformers tokens/s", "ratio"], [
            [
                str(r["max_new_tokens"]),
                _rate(r["jaxrl_tokens_per_s"]),
                _rate(r["hf_tokens_per_s"]),
                f"{r['speedup']:.2f}x",
            ]
            for r in _cells(raw, "results")
        ]
    if name == "continuous_batching":
        rows = [
            [
                r["variant"],
                _rate(r["completion_tokens_per_second"]),
                f"{r['lengths']['median']:.0f} / {r['lengths']['max']}",
            ]
            for r in _cells(raw, "rows")
        ]
        if "speedup" in raw:
            verdict = "met" if raw.get("met") else "not met"
            rows.append(
                [
                    f"{raw['best_continuous']} / {raw['best_static']}",
                    f"{raw['speedup']:.2f}x",
                    f"target {raw['target']:g}x: {verdict}",
                ]
            )
        return ["sampler", "completion tokens/s", "median / max length"], rows
    if name == "grpo_step":
        # Per length: the two libraries' default layouts (1 device or process, no
        # micro-batches), then the pair of each one's fastest layout, which is judged.
        rows = []
        for r in raw.get("ratios", []):
            default = r.get("jaxrl") == "jaxrl" and r.get("trl") == "trl"
            if not (default or r.get("best")):
                continue
            judged = r.get("note") or {True: "met", False: "not met", None: "-"}[r.get("met")]
            rows.append(
                [
                    str(r["max_new_tokens"]),
                    f"{r.get('jaxrl', 'jaxrl')} / {r.get('trl', 'trl')}"
                    + (" (fastest of each)" if r.get("best") else " (defaults)"),
                    f"{r['tokens_per_second_ratio']:.2f}x",
                    f"{r['target']:g}x",
                    judged if r.get("best") else "-",
                ]
            )
        return ["new tokens", "layouts", "jaxrl / TRL (tokens/s)", "target", "judged"], rows
    if name == "multiturn_update":
        header = ["game", "KV cache across turns", "s per update", "sampling s"]
        header += ["learning s", "turns"]
        rows = []
        for w in raw.get("workloads", []):
            for r in w["variants"]:
                learning = r.get("learn_seconds_median")  # absent from older files
                rows.append(
                    [
                        f"1-{w['max_number']} ({w['turns']} turns)",
                        r["variant"],
                        f"{r['update_seconds_median']:.3f}",
                        f"{r['sample_seconds_median']:.3f}",
                        "-" if learning is None else f"{learning:.3f}",
                        f"{r['turns_mean']:.2f}",
                    ]
                )
            ceiling = w.get("speedup_ceiling")
            rows.append(
                [
                    f"1-{w['max_number']}",
                    "speedup"
                    + ("" if ceiling is None else f" (at most {ceiling:.2f}x: learning alone)"),
                    f"{w['speedup']:.2f}x",
                    f"{w['sampling_speedup']:.2f}x",
                    "",
                    "",
                ]
            )
        return header, rows
    if name == "tool_batch":
        header = ["tool", "rows", "one by one s/turn", "concurrent s/turn", "speedup"]
        return header, [
            [
                f"{c['case']} (at most {c['concurrency']} at once)",
                str(c["rows"]),
                f"{c['modes']['one by one']['seconds_per_turn']:.3f}",
                f"{c['modes']['concurrent']['seconds_per_turn']:.3f}",
                f"{c['speedup']:.2f}x",
            ]
            for c in _cells(raw, "cases")
        ]
    if name == "dreamer_throughput":
        matched = raw.get("matched", {})
        rows = [
            [r["row"], _rate(r["train_step_ms"]), f"{r['updates_per_second']:.3f}"]
            for r in matched.get("rows", [])
        ]
        for row in dict.fromkeys(f["row"] for f in matched.get("failed_rows", [])):
            limit = max(f["timeout_seconds"] for f in matched["failed_rows"] if f["row"] == row)
            rows.append([row, f"did not finish (worker limit {limit:.0f} s)", ""])
        return ["row", "ms per training step", "updates/s"], rows
    if name == "ppo_rnn_craftax_side_by_side":
        rows = []
        for c in _cells(raw):
            finals = [v for v in c["final_return_per_seed"] if v is not None]
            mean = sum(finals) / len(finals) if finals else float("nan")
            std = (sum((v - mean) ** 2 for v in finals) / len(finals)) ** 0.5 if finals else 0
            rows.append([c["library"], _rate(c["steps_per_second"]), f"{mean:.2f} ± {std:.2f}"])
        comparison = raw.get("comparison", {})
        if comparison:
            ours, theirs = comparison["jaxrl_final_return"], comparison["baselines_final_return"]
            gap = ours[0] - theirs[0]
            within = "within" if comparison["return_within_one_std"] else "outside"
            rows.append(
                [
                    "jaxrl against the baselines",
                    f"{comparison['steps_per_second_ratio']:.2f}x",
                    f"gap {gap:+.2f} ({gap / theirs[1]:+.2f} of their std: {within})"
                    if theirs[1]
                    else f"gap {gap:+.2f}",
                ]
            )
        return ["library", "env steps/s", "final return (mean ± std over seeds)"], rows
    if name == "locomotion_side_by_side":
        summary = raw.get("summary", {})
        rows = [
            [
                library,
                _rate(s["steps_per_second"]),
                f"{s['final_return_mean']:.1f} ± {s['final_return_std']:.1f}",
                " / ".join(f"{v:.1f}" for v in s["final_return_per_seed"]),
            ]
            for library, s in summary.items()
        ]
        comparison = raw.get("comparison", {})
        if comparison:
            gap = comparison["final_return_gap_in_brax_std"]
            rows.append(
                [
                    "jaxrl against Brax",
                    f"{comparison['steps_per_second_ratio']:.2f}x",
                    f"gap {comparison['final_return_gap']:+.1f}"
                    + ("" if gap is None else f" ({gap:+.2f} Brax std)"),
                    "",
                ]
            )
        header = [
            "library",
            "env steps/s (training)",
            "final return, deterministic (mean ± std over seeds)",
            "per seed",
        ]
        return header, rows
    if name == "suite_throughput":
        return ["env", "copies", "jaxrl steps/s", "suite's own steps/s", "jaxrl / suite"], [
            [
                f"`{r['env']}`",
                str(r["copies"]),
                _rate(r["jaxrl_steps_per_s"]),
                _rate(r["suite_steps_per_s"]),
                f"{r['ratio']:.2f}x",
            ]
            for r in _cells(raw, "results")
        ]
    if name == "marl_throughput":
        cells = raw.get("cells", {})
        rows = [
            [
                c["library"],
                _rate(c["steps_per_second"]),
                f"{c['final_return_mean']:.2f} ± {c['final_return_std']:.2f}",
            ]
            for c in cells.values()
        ]
        comparison = raw.get("comparison", {})
        if comparison:
            rows.append(
                [
                    "jaxrl against JaxMARL",
                    f"{comparison['speed_ratio_jaxrl_over_jaxmarl']:.2f}x",
                    f"gap {comparison['return_gap_in_jaxmarl_std']:+.2f} JaxMARL std",
                ]
            )
        return ["library", "env steps/s", "final return per agent (mean ± std over seeds)"], rows
    if name == "env_throughput":
        rows = [r for r in _cells(raw, "results") if r["copies"] == 2048]
        return ["env (2048 copies)", "jaxrl steps/s", "gymnax steps/s"], [
            [r["env"], _rate(r["jaxrl_steps_per_s"]), _rate(r["gymnax_steps_per_s"])] for r in rows
        ]
    return [], []


def speed_detail(name: str) -> str:
    """One speed result's headline table, from the raw output its file keeps."""
    record = load(name)
    if record is None or "raw" not in record:
        return f"`{name}`: not measured yet (`python -m benchmarks.reproduce --only {name}`)."
    header, rows = _speed_rows(name, record["raw"])
    load_avg = record.get("load_average_at_start")
    when = (
        f"Measured at commit {str(record['commit'])[:7]} on {record['date'][:10]}, load "
        f"average at the start {load_avg[0]:.1f}"
        if load_avg
        else f"Measured at commit {str(record['commit'])[:7]} on {record['date'][:10]}, load "
        "average not recorded"
    )
    mark = LOADED if record.get("loaded") in (True, None) else ""
    lines = [f"{when}{mark}.", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def devices_table() -> str:
    """docs/distributed.md's "2 CPU devices against 1" rows, from the GRPO step
    benchmark's jaxrl layouts (`grpo_step`: `jaxrl-dP-mbM` is P XLA CPU devices and M
    micro-batches per update, `jaxrl` the 1x1 layout)."""
    record = load("grpo_step")
    cells = {
        (c["library"], c["max_new_tokens"]): c
        for c in _cells((record or {}).get("raw", {}))
        if c["library"].startswith("jaxrl")
    }
    lengths = sorted({n for _, n in cells})
    wanted = {
        "jaxrl-d2": "2 devices against 1",
        "jaxrl-mb2": "1 device with `micro_batches=2` against 1 device without",
        "jaxrl-d2-mb2": "2 devices with `micro_batches=2` against 1 device without",
    }
    if not any((layout, n) in cells for layout in wanted for n in lengths):
        return "Not measured yet with layouts (`python -m benchmarks.reproduce --only grpo_step`)."
    lines = ["| workload | completion tokens/s, ratio |", "|---|---|"]
    for n in lengths:
        base = cells.get(("jaxrl", n))
        for layout, words in wanted.items():
            if base is None or (layout, n) not in cells:
                continue
            ratio = (
                cells[(layout, n)]["completion_tokens_per_second"]
                / base["completion_tokens_per_second"]
            )
            lines.append(
                f"| GRPO step, tiny Llama, 64 rows, {n} new tokens: {words} | {ratio:.2f}x |"
            )
    load_avg = record.get("load_average_at_start")
    mark = LOADED if record.get("loaded") in (True, None) else ""
    lines += [
        "",
        f"Measured at commit {str(record['commit'])[:7]} on {record['date'][:10]}, load "
        f"average at the start {load_avg[0]:.1f}{mark} (`grpo_step`, benchmarks/README.md)."
        if load_avg
        else f"Measured at commit {str(record['commit'])[:7]}, load not recorded{mark}.",
    ]
    return "\n".join(lines)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"


def _verdict(total: float, budget: float | None, out_of_memory: bool) -> str:
    """The plan's words for a step's fit (`jaxrl/plan/report.py`: tight above 95%)."""
    if out_of_memory:
        return "XLA refused it: temporaries exceed the HBM"
    if not budget:
        return ""
    share = f"{total / budget:.0%}"
    if total <= 0.95 * budget:
        return f"{share}: fits"
    return f"{share}: fits, tightly" if total <= budget else f"{share}: DOES NOT FIT"


def plan_table(case: str) -> str:
    """One case of the `plan_tpu` result: per-device memory by role for each compiled
    step, XLA's peak against the HBM, FLOPs, traffic and roofline, and the planner's
    own cost on this CPU."""
    record = load("plan_tpu")
    cases = (record or {}).get("raw", {}).get("cases", {})
    if case not in cases:
        return _PLAN_MISSING.format(case=case)
    plan = cases[case]
    steps = plan["steps"]
    labels = [label for label in steps[0]["memory"]]
    for step in steps[1:]:
        labels += [label for label in step["memory"] if label not in labels]
    lines = ["| per device | " + " | ".join(s["name"] for s in steps) + " |"]
    lines.append("|---|" + "---|" * len(steps))
    for label in labels:
        cells = [_gib(s["memory"][label]) if label in s["memory"] else "" for s in steps]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    budget = plan["hbm_bytes"]
    lines.append(
        "| **total (XLA's peak)** | "
        + " | ".join(
            f"**{_gib(s['total'])}** ({_verdict(s['total'], budget, s['out_of_memory'])})"
            for s in steps
        )
        + " |"
    )
    lines.append("| FLOPs per update | " + " | ".join(f"{s['flops']:.3e}" for s in steps) + " |")
    lines.append("| HBM traffic | " + " | ".join(_gib(s["bytes_accessed"]) for s in steps) + " |")
    lines.append(
        "| roofline step time | "
        + " | ".join(f"{s['roofline_seconds']:.2f} s ({s['bound']})" for s in steps)
        + " |"
    )
    mark = LOADED if plan["load_average_at_start"] > 1.5 else ""
    lines.append("")
    lines.append(
        f"Planned in {plan['wall_seconds']:.0f} s of wall time and {plan['cpu_seconds']:.0f} "
        f"CPU seconds, peak RSS {plan['max_rss_bytes'] / 1e9:.2f} GB, at load average "
        f"{plan['load_average_at_start']:.1f}{mark} (commit {str(record['commit'])[:7]}, "
        f"{record['date'][:10]}; `{plan['chip']['name']}` chips, "
        f"{_gib(budget)} of HBM each)."
    )
    return "\n".join(lines)


def figures_block() -> str:
    """README's learning-curve figures: one per family with curves in its results."""
    names = sorted(p.stem for p in IMG.glob("learning_*.png")) if IMG.exists() else []
    if not names:
        return "No learning-curve figure yet (`python -m benchmarks.reproduce --write-docs`)."
    # Side by side, three to a row: a family each (GitHub renders the HTML).
    return "\n".join(f'<img src="docs/img/{n}.png" alt="{n}" width="32%">' for n in names)


def _family_names(family: str) -> list[str]:
    return [e.name for e in registry.ENTRIES if e.kind == "learning" and e.family == family]


def _percent(probed: float, full: float) -> str:
    return f"{100 * (probed - full) / full:+.1f}%" if full else "-"


def probe_accuracy() -> str:
    """How far the shallow probes of a deep model are from compiling it whole: the
    6-layer GRPO step of the `plan_tpu` result, on `cpu:8` and on `v5e:2x2`."""
    record = load("plan_tpu")
    cases = (record or {}).get("raw", {}).get("cases", {})
    where = {"cpu8": "`cpu:8` (hidden 64, 8 prompts x 4)", "v5e_2x2": "`v5e:2x2`"}
    if not all(f"grpo6_{w}_{h}" in cases for w in where for h in ("probed", "full")):
        return _PLAN_MISSING.format(case="grpo6_*")
    lines = ["| probed vs whole | " + " | ".join(where.values()) + " |", "|---|---|---|"]

    def row(label: str, value: Callable[[dict[str, Any]], float], unit: str = "") -> None:
        cells = []
        for w in where:
            probed = {s["name"]: s for s in cases[f"grpo6_{w}_probed"]["steps"]}
            full = {s["name"]: s for s in cases[f"grpo6_{w}_full"]["steps"]}
            step = label.split()[0]
            a, b = value(probed[step]), value(full[step])
            cells.append(
                "equal" if a == b else f"{a:,.4g}{unit} vs {b:,.4g}{unit} ({_percent(a, b)})"
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    # The table's row, which a probed plan extrapolates to the model's depth (XLA's raw
    # `memory_analysis` of a probed plan is the shallow probe's).
    temporaries = "activations and temporaries"
    row("collect activations and temporaries", lambda s: s["memory"][temporaries], " B")
    row("learn activations and temporaries", lambda s: s["memory"][temporaries], " B")
    row("collect FLOPs", lambda s: s["flops"])
    row("learn FLOPs", lambda s: s["flops"])
    row("learn HBM traffic", lambda s: s["bytes_accessed"], " B")
    return "\n".join(lines)


def _interval(agg: dict[str, Any] | None, fmt: str) -> str:
    """`IQM [low, high]` of an aggregate with `fmt` (a format spec); "-" for none."""
    if not agg:
        return "-"
    low, high = agg["iqm_ci95"]
    return f"{agg['iqm']:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def variants_table(name: str) -> str:
    """An `lm_pipeline` entry with variants (benchmarks/lm_pipeline.py), one row per
    variant: held-out pass@1, its difference to the baseline, the speed-up to the
    baseline's final training pass@1 (and to within the tolerance), the mean training
    time and sampler-learner KL."""
    entry, record = registry.get(name), load(name)
    if record is None or "variants" not in record:
        return f"`{name}`: not measured yet (`python -m benchmarks.reproduce --only {name}`)."
    baseline = entry.overrides["baseline"]
    mark = LOADED if record.get("loaded") else ""
    lines = [
        f"`{name}` ({record['aggregate']['n']} seeds, {record.get('devices', 1)} CPU "
        f"device(s), commit {record['commit'][:7]}, load {record['load_average_at_start'][0]:.1f}"
        f"{mark}): IQM [95% CI] over seeds",
        "",
        f"| variant | held-out pass@1 | minus `{baseline}` | speed-up to `{baseline}`'s final "
        "pass@1 (seeds) | the same within 0.03 (seeds) | train s (mean) | sampler-learner "
        "KL (mean) |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, agg in record["variants"].items():
        kl = agg.get("rollout_kl_mean")
        seconds = agg.get("train_seconds_mean")
        cells = [
            f"`{variant}`",
            _interval(agg["pass@1_after"], ".3f"),
            _interval(agg.get("pass@1_difference"), "+.3f"),
            f"{_interval(agg.get('speedup'), '.2f')} ({agg.get('speedup_reached', '-')})",
            f"{_interval(agg.get('speedup_within'), '.2f')} "
            f"({agg.get('speedup_within_reached', '-')})",
            "-" if seconds is None else f"{seconds:.0f}",
            "-" if kl is None else f"{kl:.2g}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# benchmarks/plan_tpu.py's cases (not imported: it is a script, run in libtpu's venv).
_PLAN_CASES = ("llama3_8b_v5e_2x4", "llama3_8b_v5e_4x4", "qwen3_06b_v5e_2x2")
_PLAN_MISSING = (
    "`plan_tpu` ({case}): not measured yet (`python -m benchmarks.reproduce --only plan_tpu`, "
    "with libtpu: benchmarks/plan_tpu.py)."
)

BLOCKS: dict[str, Callable[[], str]] = {
    "what-you-can-train": what_you_can_train,
    "default-suite-duration": suite_duration,
    "speed": speed_table,
    "figures": figures_block,
    **{
        f"speed-{e.name}": (lambda name=e.name: speed_detail(name))
        for e in registry.ENTRIES
        if e.kind == "speed"
    },
    **{f"plan-{case}": (lambda case=case: plan_table(case)) for case in _PLAN_CASES},
    "plan-probe-accuracy": probe_accuracy,
    "devices-grpo": devices_table,
    "learning-tool-use": tool_use_table,
    **{
        f"variants-{e.name}": (lambda name=e.name: variants_table(name))
        for e in registry.ENTRIES
        if "variants" in e.overrides
    },
    **{
        f"learning-{family}": (lambda family=family: learning_table(_family_names(family)))
        for family in ("ppo", "pqn", "dqn", "c51", "sac", "td3", "dreamer")
        + ("sft", "dpo", "grpo", "ppo-lm", "prm", "offline")
    },
}


def render(text: str) -> str:
    """`text` with every generated block rewritten from the results files."""

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in BLOCKS:
            raise KeyError(f"unknown generated block {name!r}; known: {sorted(BLOCKS)}")
        return f"{match.group(1)}{BLOCKS[name]()}\n{match.group(4)}"

    return BLOCK.sub(block, text)


def draw_figures() -> list[pathlib.Path]:
    """One learning-curve figure per family from the curves kept in its results files:
    the mean over seeds of the episode return against environment steps, one line per
    result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    IMG.mkdir(parents=True, exist_ok=True)
    written = []
    families = sorted({e.family for e in registry.ENTRIES if e.kind == "learning" and e.family})
    for family in families:
        curves = [
            (name, record["curve"])
            for name in _family_names(family)
            if (record := load(name)) and record.get("curve")
        ]
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for name, curve in curves:
            ax.plot(curve["env_steps"], curve["episode_return"], label=name)
        ax.set_xlabel("environment steps per seed")
        ax.set_ylabel("episode return (mean over seeds)")
        ax.set_title(f"{family}: learning curves (benchmarks/results)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = IMG / f"learning_{family}.png"
        fig.savefig(path, dpi=90, metadata={"Software": None})
        plt.close(fig)
        written.append(path)
    return written


def write_all() -> None:
    """Draws the figures, then rewrites every generated block in FILES."""
    for path in draw_figures():
        print(f"wrote {path.relative_to(ROOT)}")
    for name in FILES:
        path = ROOT / name
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote the generated blocks of {name}")
