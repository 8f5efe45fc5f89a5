"""The code base is `ruff` clean (lint and format), as the engineering standards require."""

import collections
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which(
        "ruff"
    )
    if exe is None:
        pytest.skip("ruff is not installed (it is in the [test] extra)")
    return [exe]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    result = subprocess.run(
        [*_ruff(), *command, "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_networks_use_the_fast_layers():
    """Every network's dense and convolution layers are `jaxrl.nn.Dense` and
    `jaxrl.nn.conv.Conv`: flax's `nn.Dense`/`nn.Conv` compute the same values with
    gradients XLA's CPU backend runs several times slower (docs/ARCHITECTURE.md)."""
    import re

    direct = re.compile(r"\bnn\.(Dense|Conv)\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "jaxrl").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line) and not line.lstrip().startswith("#")
    ]
    assert not offenders, f"use jaxrl.nn.Dense / jaxrl.nn.conv.Conv instead: {offenders}"


def test_test_files_have_unique_names():
    """Test folders are not packages (no __init__.py), so pytest imports each test file
    by its base name: two files of one name make the second fail to collect."""
    tests = pathlib.Path(__file__).resolve().parent
    names = collections.Counter(path.name for path in tests.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
