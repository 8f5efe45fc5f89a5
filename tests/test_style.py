"""The code base is `ruff` clean (lint and format), as the engineering standards require."""

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
