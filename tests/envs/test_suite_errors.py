"""The environment suites' adapters without the suites (the default venv): a suite that is
not installed fails with one line naming its extra; the registry's suite listing and the
overrides' split fail clearly. The adapters themselves are tested where the suites are
installed (tests/envs/test_suite_adapters.py, CI's optional venv).
"""

from __future__ import annotations

import sys

import pytest

from jaxrl import envs
from jaxrl.envs import registry
from jaxrl.envs.adapters import _suite

# suite -> (the module whose absence the error names, one of the suite's ids)
SUITES = {
    "craftax": ("craftax", "Craftax-Classic-Symbolic-v1"),
    "jumanji": ("jumanji", "Snake-v1"),
    "xminigrid": ("xminigrid", "MiniGrid-Empty-8x8"),
    "pgx": ("pgx", "tic_tac_toe"),
    "playground": ("mujoco_playground", "CartpoleBalance"),
}


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_missing_suite_is_one_line_naming_the_extra(monkeypatch, suite):
    module, env_id = SUITES[suite]
    # None in sys.modules makes `import` fail, for the package and any submodule of it
    # already imported (where the suite is installed).
    for name in [module, *(n for n in list(sys.modules) if n.startswith(module + "."))]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError) as err:
        envs.make(f"{suite}:{env_id}")
    message = str(err.value)
    assert f"pip install 'jaxrl[{suite}]'" in message and "\n" not in message


def test_suite_listing_errors_and_installed_detection():
    assert tuple(SUITES) == registry.SUITES
    with pytest.raises(ValueError, match="Unknown environment suite 'nope'; suites: craftax"):
        registry.suite_ids("nope")
    assert set(registry.installed_suites()) <= set(registry.SUITES)
    assert not _suite.installed("surely_not_a_package_xyz")
    with pytest.raises(ValueError, match=r"unknown override\(s\) \['b'\]; allowed: \['a'\]"):
        _suite.split_overrides("s", "x", {"b": 1}, ["a"], [])
