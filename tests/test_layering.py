"""No algorithm package imports another (issue 29): shared code lives in shared modules.

Every `.py` under `jaxrl/algorithms/<a>/` is parsed with `ast`; each import, at module
level or inside a function, relative ones resolved against the file's package, that
reaches `jaxrl.algorithms.<b>` for another algorithm package `<b>` is a violation.
Shared modules (`jaxrl/algorithms/offpolicy.py`, `qlearning.py`, `actor_critic.py`,
`lm_common.py`, ...) are files, not packages, and may be imported by any algorithm.
"""

from __future__ import annotations

import ast
from pathlib import Path

ALGORITHMS = Path(__file__).resolve().parents[1] / "jaxrl" / "algorithms"


def algorithm_packages() -> list[str]:
    return sorted(p.parent.name for p in ALGORITHMS.glob("*/__init__.py"))


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module `path` imports (module level and function-local), as absolute
    names: `from m import x` counts `m`, and `m.x` too when `x` is a submodule."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the file's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(
                f"{module}.{alias.name}"
                for alias in node.names
                if _is_module(f"{module}.{alias.name}")
            )
    return names


def _is_module(name: str) -> bool:
    path = ALGORITHMS.parents[1].joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations() -> list[str]:
    """`"<a>/<file>: <module>"` for each import of another algorithm package."""
    packages = algorithm_packages()
    found = []
    for own in packages:
        for path in sorted((ALGORITHMS / own).rglob("*.py")):
            relative = path.relative_to(ALGORITHMS / own).with_suffix("")
            package = ".".join(["jaxrl", "algorithms", own, *relative.parts[:-1]])
            for module in sorted(imported_modules(path, package)):
                parts = module.split(".")
                other = parts[2] if parts[:2] == ["jaxrl", "algorithms"] and len(parts) > 2 else own
                if other in packages and other != own:
                    found.append(f"{path.relative_to(ALGORITHMS)}: {module}")
    return found


def test_no_algorithm_package_imports_another():
    found = violations()
    assert not found, "algorithm packages import each other:\n" + "\n".join(found)


def test_relative_and_function_local_imports_are_seen(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from ..sac import losses\n"
        "def f():\n"
        "    import jaxrl.algorithms.dqn.train\n"
        "    from . import helpers\n"
    )
    names = imported_modules(source, "jaxrl.algorithms.td3")
    # `losses` is a submodule of sac, `helpers` is not a file of td3: a name only.
    assert names == {
        "jaxrl.algorithms.sac",
        "jaxrl.algorithms.sac.losses",
        "jaxrl.algorithms.dqn.train",
        "jaxrl.algorithms.td3",
    }
