"""Packaging: every package folder is listed in pyproject.toml (find cannot see the
`envs` -> `jaxrl.envs` mapping), and the README's quick start matches .ci/run."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _package_folders() -> set[str]:
    names = set()
    for init in ROOT.glob("jaxrl/**/__init__.py"):
        names.add(".".join(init.parent.relative_to(ROOT).parts))
    for init in ROOT.glob("envs/**/__init__.py"):
        names.add(".".join(("jaxrl",) + init.parent.relative_to(ROOT).parts))
    return names


def test_every_package_is_listed():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    missing = _package_folders() - listed
    assert not missing, (
        f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    )
    assert pyproject["tool"]["setuptools"]["package-dir"]["jaxrl.envs"] == "envs"


def test_envs_import_as_jaxrl_envs():
    from jaxrl import envs

    assert pathlib.Path(envs.__file__).resolve().parent == ROOT / "envs"


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    quick_start = [c.strip() for c in commands[:2]]
    assert quick_start[0].startswith("pip install") and "jaxrl train" in quick_start[0]
    assert quick_start[1] == 'pip install -e ".[test]" && pytest'
    assert quick_start[1] in (ROOT / ".ci" / "run").read_text()
