"""The published numbers are the results files' numbers, and nothing else.

* Every generated block (`<!-- results:NAME -->` ... `<!-- /results:NAME -->`) in
  README.md, docs/ and benchmarks/README.md is what benchmarks/docs.py makes from
  benchmarks/results/*.json today (fix: `python -m benchmarks.reproduce --write-docs`).
* README.md states no measured number outside a generated block: every digit in its
  prose is part of a name (CartPole-v1, Qwen3, pass@1), inside code, or one of the few
  explicit exceptions below (each a definition or a tested fact, not a measurement).
* benchmarks/results/ holds only registered results files (no renamed copies, no raw
  run directories), and the reproduce command rejects unknown names with exit code 2.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import docs, registry, reproduce  # noqa: E402

# Digits README.md may show outside generated blocks: (pattern, why it is not a result).
EXCEPTIONS = (
    (r"^[123]\. \*\*", "the numbered list of the three kinds of RL"),
    (r"\b10 minutes of wall clock", "the default of --checkpoint-minutes"),
    (r"last 10% of updates", "the definition of summary.json's final return"),
    (r"within 1e-4", "the tolerance of tests/envs' parity tests"),
    (r"for 60 steps", "the length of tests/envs' free-run parity tests"),
    (r"exits 1 when", "an exit code"),
    (r"default 10\)", "the default of eval's --episodes"),
)


def _prose(markdown: str) -> str:
    """README's text without generated blocks, code, link targets and HTML comments."""
    text = docs.BLOCK.sub("", markdown)
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`]*`", "", text)  # inline code, also across a line break
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def result_numbers(markdown: str) -> list[str]:
    """The lines of `markdown`'s prose holding a number that is neither part of a name
    nor an explicit exception."""
    found = []
    for line in _prose(markdown).splitlines():
        for pattern, _why in EXCEPTIONS:
            line = re.sub(pattern, "", line)
        # A digit run touching a letter, '@' or '.'-joined name part is a name (C51, v1,
        # Qwen3-0.6B, pass@1, DreamerV3); a bare number is a claim.
        bare = re.findall(r"(?<![\w@.-])[-+]?\d[\d,.]*(?:e-?\d+)?%?(?![\w@])", line)
        if bare:
            found.append(f"{bare}: {line.strip()}")
    return found


def test_the_number_finder_on_known_lines() -> None:
    assert result_numbers("CartPole-v1, C51, TD3, Qwen3-0.6B, pass@1, DreamerV3\n") == []
    assert result_numbers("trains 7% faster and 1,780 steps/s\n") != []
    assert result_numbers("held out 0.29-0.32 in 50-65 s\n") != []
    assert result_numbers("`--num-seeds 4` and\n```bash\nx 5\n```\n") == []
    block = "<!-- results:speed -->\n500\n<!-- /results:speed -->\n"
    assert result_numbers(block) == []


def test_readme_states_no_number_outside_generated_blocks() -> None:
    found = result_numbers((ROOT / "README.md").read_text())
    assert not found, (
        "README.md states numbers outside a generated block (move them into a results "
        "file and a block, or delete them):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("name", docs.FILES)
def test_generated_blocks_match_the_results_files(name: str) -> None:
    text = (ROOT / name).read_text()
    stale = [
        m.group(2)
        for m, new in zip(
            docs.BLOCK.finditer(text), docs.BLOCK.finditer(docs.render(text)), strict=True
        )
        if m.group(0) != new.group(0)
    ]
    assert not stale, (
        f"{name}: generated blocks {stale} differ from benchmarks/results; run "
        "`python -m benchmarks.reproduce --write-docs`"
    )


def test_readme_has_the_generated_tables() -> None:
    blocks = {m.group(2) for m in docs.BLOCK.finditer((ROOT / "README.md").read_text())}
    assert {"what-you-can-train", "default-suite-duration"} <= blocks


def test_results_are_registered_files_only() -> None:
    results = ROOT / "benchmarks" / "results"
    assert not [p.name for p in results.iterdir() if p.is_dir()], "raw run directories"
    unregistered = [p.name for p in results.glob("*") if p.stem not in registry.names()]
    assert not unregistered, f"not in benchmarks/registry.py: {unregistered}"
    for path in results.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["name"] == path.stem
        for key in ("commit", "date", "cores", "load_average_at_start", "canary"):
            assert key in record, (path.name, key)
        if record["kind"] == "learning":
            assert len(record["per_seed"]) == record["aggregate"]["n"] >= 3


def test_every_table_row_names_registered_results() -> None:
    for *_, names in docs.TRAIN_ROWS:
        for name in names:
            registry.get(name)
    assert len(set(registry.names())) == len(registry.ENTRIES)


def test_unknown_names_are_listed_in_one_line_with_exit_code_2(capsys) -> None:
    assert reproduce.main(["--only", "ppo_cartpole", "no_such_result"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_result" in err[0] and "ppo_cartpole" in err[0]


def test_list_names_every_result(capsys) -> None:
    assert reproduce.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in registry.names())


def test_learning_entries_have_enough_seeds() -> None:
    for entry in registry.ENTRIES:
        if entry.kind == "learning":
            assert entry.seeds >= (3 if entry.minutes / entry.seeds > 30 else 5), entry.name


# A measurement in prose: a decimal, a ratio ("2.5x"), a percentage or a duration.
MEASUREMENT = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)(?![\w.])|\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)?%"
    r"|\b\d+(?:\.\d+)? ?(?:s|ms|min|minutes|seconds|hours|CPU-minutes)\b"
)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_prose_states_no_measurement(name: str) -> None:
    """A number a notebook reports is printed by one of its cells (from the run it just
    did, or from a results file), never typed into its text where it goes stale."""
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    found = [
        f"{m.group(0)!r}: {line.strip()}"
        for cell in cells
        if cell["cell_type"] == "markdown"
        for line in _prose("".join(cell["source"])).splitlines()
        for m in [MEASUREMENT.search(line)]
        if m
    ]
    assert not found, f"{name} states measurements in its text:\n" + "\n".join(found)


def test_full_tier_warns_with_its_wall_time_before_it_starts(monkeypatch, capsys) -> None:
    class Started(Exception):
        pass

    def measure(entry):
        raise Started(entry.name)

    monkeypatch.setattr(reproduce, "measure", measure)
    with pytest.raises(Started):
        reproduce.main(["--tier", "full"])
    err = capsys.readouterr().err
    hours = sum(e.minutes for e in registry.ENTRIES) / 60
    assert err.startswith("warning: --tier full") and f"{hours:.1f} hours" in err


def test_an_entry_needing_a_missing_extra_fails_before_running(monkeypatch, capsys) -> None:
    """`--only` refuses it in one line naming the extra, before any entry runs; a tier
    skips it and says so."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jaxmarl" else real(name, *a)
    )
    ran = []
    monkeypatch.setattr(reproduce, "measure", lambda entry: ran.append(entry.name))
    assert registry.get("mappo_smax_3m").extra == "jaxmarl"
    assert reproduce.main(["--only", "ppo_cartpole", "mappo_smax_3m"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert ran == [] and len(err) == 1
    assert err[0].startswith("mappo_smax_3m needs the jaxmarl extra") and "jaxrl[jaxmarl]" in err[0]
    monkeypatch.setattr(registry, "tier", lambda which: [registry.get("mappo_smax_3m")])
    assert reproduce.main(["--tier", "ci"]) == 0
    assert ran == [] and "skipped: mappo_smax_3m needs the jaxmarl extra" in capsys.readouterr().err


def test_an_extra_is_looked_up_by_its_modules_name(monkeypatch) -> None:
    """The playground extra installs `mujoco_playground`: that is what must import."""
    import importlib.util

    asked = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: asked.append(name))
    entry = registry.get("locomotion_side_by_side")
    assert entry.extra == "playground"
    assert "needs the playground extra" in reproduce.missing_extra(entry)
    assert asked == ["mujoco_playground"]


def test_a_loaded_result_is_marked_in_the_tables() -> None:
    entry = registry.get("ppo_cartpole")
    record = {"aggregate": {"iqm": 500.0, "iqm_ci95": [480.0, 500.0]}, "loaded": True}
    assert docs.short(entry, record) == f"500 [480, 500]{docs.LOADED}"
    assert docs.short(entry, {**record, "loaded": False}) == "500 [480, 500]"


def test_provenance_records_what_a_reader_needs() -> None:
    record = reproduce.provenance()
    assert set(record["packages"]) == {"jax", "jaxlib", "flax", "optax", "numpy"}
    assert record["cores"] >= 1 and record["cpu"] and len(record["load_average_at_start"]) == 3
    assert record["loaded"] == (record["load_average_at_start"][0] > reproduce.QUIET_LOAD)
