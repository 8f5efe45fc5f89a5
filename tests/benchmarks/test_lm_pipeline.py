"""The `lm_pipeline` runner (benchmarks/lm_pipeline.py): the comparison of variants on
hand-made metrics rows, the registry entries that use it, and (`-m slow`) the whole
runner at a tiny budget on 2 emulated devices in its subprocess."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import lm_pipeline, registry  # noqa: E402


def rows(seconds: list[float], accuracy: list[float], **extra: list[float]) -> list[dict]:
    """Metrics rows of one agent, as `jaxrl.train` returns them."""
    out = []
    for i, (s, a) in enumerate(zip(seconds, accuracy, strict=True)):
        row = {"update": i + 1, "seconds": s, "accuracy": [a]}
        row.update({name: [values[i]] for name, values in extra.items()})
        out.append(row)
    return out


def test_trailing_mean_averages_each_point_with_the_ones_before_it():
    assert lm_pipeline.trailing_mean([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert lm_pipeline.trailing_mean([1.0, 2.0, 3.0], 1) == [1.0, 2.0, 3.0]
    assert lm_pipeline.trailing_mean([3.0, 0.0, 3.0], 5) == [3.0, 1.5, 2.0]


def test_the_curve_is_the_accuracy_against_the_summed_training_seconds():
    made = rows([2.0, 1.0, 3.0], [0.1, 0.2, 0.4])
    made.insert(1, {"update": 1, "seconds": 9.0})  # a row without accuracy is skipped
    seconds, accuracy = lm_pipeline.accuracy_curve(made)
    assert seconds == [2.0, 3.0, 6.0] and accuracy == [0.1, 0.2, 0.4]
    assert lm_pipeline.seconds_to_level(seconds, accuracy, 0.2) == 3.0
    assert lm_pipeline.seconds_to_level(seconds, accuracy, 0.5) is None


def test_variants_are_compared_with_the_baseline_by_hand():
    """4 rows each (a window of one row): the baseline reaches its final 0.5 after 3 s,
    the variant after 1 s (speed-up 3); within 0.03 (0.47) the same points."""
    runs = {
        "sync": {
            "summary": {"pass@1_after": 0.6, "pass@1_before": 0.2, "train_seconds": 4.0},
            "rows": rows([1.0] * 4, [0.1, 0.3, 0.5, 0.5]),
        },
        "k1": {
            "summary": {"pass@1_after": 0.55, "pass@1_before": 0.2, "train_seconds": 2.0},
            "rows": rows(
                [0.5] * 4,
                [0.2, 0.5, 0.6, 0.4],
                async_staleness=[0.0, 1.0, 1.0, 1.0],
                rollout_kl=[0.1, 0.3, 0.2, 0.2],
            ),
        },
    }
    out = lm_pipeline.compare(runs, "sync")
    k1 = out["k1"]
    assert k1["pass@1_difference"] == pytest.approx(-0.05)
    assert k1["seconds_to_baseline_final"] == 1.0 and k1["speedup"] == 3.0
    assert k1["seconds_to_baseline_final_within"] == 1.0 and k1["speedup_within"] == 3.0
    assert k1["async_staleness_max"] == 1.0 and k1["rollout_kl"] == pytest.approx(0.2)
    assert k1["final_accuracy"] == 0.4 and k1["train_seconds"] == 2.0
    assert "pass@1_difference" not in out["sync"] and out["sync"]["final_accuracy"] == 0.5
    # A variant that never reaches the level has no time and no speed-up.
    runs["k1"]["rows"] = rows([0.5] * 4, [0.1, 0.2, 0.2, 0.48])
    never = lm_pipeline.compare(runs, "sync")["k1"]
    assert never["seconds_to_baseline_final"] is None and never["speedup"] is None
    assert never["speedup_within"] == 3.0 / 2.0  # 0.48 >= 0.47 at 2 s


def test_variant_aggregates_count_the_seeds_that_reached_the_level():
    seeds = [
        {
            "sync": {"pass@1_after": 0.5},
            "k1": {
                "pass@1_after": 0.5 + d,
                "pass@1_difference": d,
                "speedup": s,
                "speedup_within": 1.0,
            },
        }
        for d, s in ((0.01, 1.5), (-0.02, None), (0.0, 2.5))
    ]
    out = lm_pipeline.aggregate_variants(seeds, "sync")
    assert out["sync"]["pass@1_after"]["mean"] == 0.5 and "speedup" not in out["sync"]
    assert out["k1"]["pass@1_difference"]["mean"] == pytest.approx(-0.01 / 3)
    assert out["k1"]["speedup"]["mean"] == 2.0 and out["k1"]["speedup_reached"] == "2/3"
    assert out["k1"]["speedup_within_reached"] == "3/3"


def test_device_flags_set_the_count_and_keep_the_other_flags():
    flags = "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"
    assert lm_pipeline.device_flags(2, flags) == (
        "--xla_cpu_foo=1 --xla_force_host_platform_device_count=2"
    )
    assert lm_pipeline.device_flags(4) == "--xla_force_host_platform_device_count=4"


def test_entries_with_variants_name_their_baseline_and_headline():
    with_variants = [e for e in registry.ENTRIES if "variants" in e.overrides]
    assert {"grpo_async_addition", "grpo_bf16_sampler_addition"} <= {e.name for e in with_variants}
    for entry in with_variants:
        variants = entry.overrides["variants"]
        assert entry.runner == "lm_pipeline" and entry.metric == "pass@1_difference"
        assert entry.overrides["baseline"] in variants
        assert entry.overrides["headline"] in variants
        assert entry.overrides["headline"] != entry.overrides["baseline"]
    for entry in registry.ENTRIES:
        assert entry.devices == 1 or entry.runner == "lm_pipeline", entry.name
    assert registry.get("grpo_async_addition").devices == 2


TINY_SFT = dict(
    digits=2,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=1,
    mlp_size=64,
    batch_size=16,
    total_steps=16 * 4,
    stop_at_train_accuracy=None,
    num_eval=16,
    eval_batch_size=16,
    num_devices=1,
)
TINY_GRPO = dict(
    digits=2,
    num_prompts=4,
    group_size=4,
    total_steps=16 * 4,
    eval_samples=2,
    num_eval=8,
    eval_batch_size=16,
    log_every=16,
    reward="correct+length:3:2",  # a random model's rewards differ within a group
)


@pytest.mark.slow
def test_the_runner_compares_async_variants_on_two_devices_in_a_subprocess():
    """The registry's async entry at a tiny budget (1 seed, 4 updates of a 1-layer
    model): run from this 1-device process, it goes to a 2-device subprocess, and every
    variant's comparison comes back with the device count and flags."""
    entry = registry.get("grpo_async_addition")
    variants = {name: entry.overrides["variants"][name] for name in ("sync", "staleness_1")}
    tiny = dataclasses.replace(
        entry,
        seeds=1,
        overrides={
            **entry.overrides,
            "sft": {**entry.overrides["sft"], **TINY_SFT},
            **TINY_GRPO,
            "variants": variants,
            "headline": "staleness_1",
        },
    )
    measured = lm_pipeline.run(tiny)
    assert measured["devices"] == 2
    assert "--xla_force_host_platform_device_count=2" in measured["xla_flags"]
    (detail,) = measured["details"]
    k1, sync = detail["variants"]["staleness_1"], detail["variants"]["sync"]
    assert k1["async_staleness_max"] == 1.0 and "async_staleness_max" not in sync
    assert measured["per_seed"] == [k1["pass@1_difference"]]
    assert k1["pass@1_difference"] == pytest.approx(k1["pass@1_after"] - sync["pass@1_after"])
    assert measured["variants"]["staleness_1"]["pass@1_difference"]["n"] == 1


def test_the_variants_table_shows_each_variant_against_the_baseline(monkeypatch):
    from benchmarks import docs

    seeds = [
        {
            "float32": {"pass@1_after": 0.5, "train_seconds": 60.0},
            "bf16": {
                "pass@1_after": 0.48,
                "pass@1_difference": -0.02,
                "speedup": 1.25,
                "speedup_within": None,
                "train_seconds": 50.0,
                "rollout_kl": 0.001,
            },
        }
    ] * 3
    record = {
        "aggregate": {"n": 3},
        "commit": "abcdef0123",
        "load_average_at_start": [2.5, 2.0, 1.0],
        "loaded": True,
        "devices": 1,
        "variants": lm_pipeline.aggregate_variants(seeds, "float32"),
    }
    entry = registry.Entry(
        name="fake",
        kind="learning",
        tier="full",
        measures="",
        command="",
        minutes=1,
        runner="lm_pipeline",
        overrides={"variants": {"float32": {}, "bf16": {}}, "baseline": "float32"},
    )
    monkeypatch.setattr(docs, "load", lambda name: record)
    monkeypatch.setattr(docs.registry, "get", lambda name: entry)
    table = docs.variants_table("fake").splitlines()
    assert table[0].startswith("`fake` (3 seeds, 1 CPU device(s), commit abcdef0, load 2.5†)")
    assert table[-2] == "| `float32` | 0.500 [0.500, 0.500] | - | - (-) | - (-) | 60 | - |"
    assert table[-1] == (
        "| `bf16` | 0.480 [0.480, 0.480] | -0.020 [-0.020, -0.020] | 1.25 [1.25, 1.25] (3/3) "
        "| - (0/3) | 50 | 0.001 |"
    )
    monkeypatch.setattr(docs, "load", lambda name: None)
    assert "not measured yet" in docs.variants_table("fake")
