"""Private virtual environments for benchmark baselines (e.g. gymnax at a pinned version).

`ensure_venv(name, requirements)` creates `benchmarks/.venvs/<name>` on first
use and installs `requirements` there with pip; it reinstalls when the
requirement list changes (recorded in a stamp file). Returns the venv's Python.
Keeping baselines out of the project venv means their dependencies cannot
clash with ours and the project venv stays light.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

__all__ = ["VENV_ROOT", "ensure_venv"]

VENV_ROOT = Path(__file__).resolve().parent / ".venvs"
_STAMP = "jaxrl-bench-requirements.json"


def _python(path: Path) -> Path:
    return path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def ensure_venv(name: str, requirements: list[str], quiet: bool = True) -> Path:
    """Creates (if missing or stale) venv `name` with `requirements`; returns its Python."""
    path = VENV_ROOT / name
    stamp = path / _STAMP
    wanted = sorted(requirements)
    if stamp.exists() and json.loads(stamp.read_text()) == wanted and _python(path).exists():
        return _python(path)
    print(f"[venv] creating {path} with {' '.join(wanted)}", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    pip = [str(_python(path)), "-m", "pip", "install", "--disable-pip-version-check"]
    if quiet:
        pip.append("--quiet")
    subprocess.run([*pip, *wanted], check=True)
    stamp.write_text(json.dumps(wanted))
    return _python(path)
