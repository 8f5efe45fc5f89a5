"""No import circles in `jaxrl/` and `envs/` (imported as `jaxrl.envs`).

The import graph is built from the source with `ast`: every `import` and `from ...
import`, at module level and inside functions (a function-local import that closes a
circle is still a circle, only a later one), relative imports resolved. Imports under
`if TYPE_CHECKING:` never run and are left out; so are `importlib.import_module`
calls (names in strings: the algorithm and task registries).

Packages: importing `a.b.c` initialises `a` and `a.b` first, so a module's own
ancestor packages are always initialised before it runs. An edge to one of them
therefore counts only when the module takes a name defined in that package's
`__init__` (`from jaxrl import train`), not a submodule (`from jaxrl import config`).
Importing a module of another package initialises that package too: an edge to it.
"""

from __future__ import annotations

import ast
import pathlib
from collections import deque
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]

Edge = tuple[str, str, int]  # (target module, file of the import, line)


def find_modules(sources: dict[str, pathlib.Path]) -> dict[str, pathlib.Path]:
    """Module name -> file, for packages given as `{"jaxrl": path, "jaxrl.envs": path}`.
    A package nested in another's directory (a symlink) is taken from its own entry."""
    modules: dict[str, pathlib.Path] = {}
    for package, directory in sources.items():
        nested = {pathlib.Path(*p.split(".")[1:]) for p in sources if p.startswith(package + ".")}
        for path in sorted(directory.rglob("*.py")):
            relative = path.relative_to(directory).with_suffix("")
            if any(relative.is_relative_to(n) for n in nested):
                continue
            parts = [package, *relative.parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(module: str, modules: dict[str, pathlib.Path]) -> bool:
    return modules[module].name == "__init__.py"


def _known(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: another library)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _runtime_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(module: str, modules: dict[str, pathlib.Path]) -> list[Edge]:
    """The edges out of `module` under the package rule of the module docstring."""
    path = modules[module]
    own_ancestors = set(_ancestors(module))
    edges: list[Edge] = []

    def add(target: str | None, line: int, takes_names: bool) -> None:
        if target is None or target == module:
            return
        if target not in own_ancestors or takes_names:
            edges.append((target, str(path), line))
        # Importing `target` first initialises its packages that are not ours.
        edges.extend((a, str(path), line) for a in _ancestors(target) if a not in own_ancestors)

    for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b` binds `a` only to reach `a.b`; `import a` uses a's names.
                target = _known(alias.name, modules)
                add(target, node.lineno, takes_names=target == alias.name)
            continue
        if node.level:
            package = module if _is_package(module, modules) else module.rpartition(".")[0]
            base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in modules:
                add(submodule, node.lineno, takes_names=False)
            else:  # a name defined in `base` (its `__init__` when it is a package)
                add(_known(base, modules), node.lineno, takes_names=True)
    return edges


def import_graph(modules: dict[str, pathlib.Path]) -> dict[str, dict[str, tuple[str, int]]]:
    """module -> {imported module: (file, line) of the first such import}."""
    graph: dict[str, dict[str, tuple[str, int]]] = {}
    for module in modules:
        out: dict[str, tuple[str, int]] = {}
        for target, file, line in imports_of(module, modules):
            out.setdefault(target, (file, line))
        graph[module] = out
    return graph


def strongly_connected(graph: dict[str, dict[str, tuple[str, int]]]) -> list[set[str]]:
    """The components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def shortest_cycle(graph: dict[str, dict[str, tuple[str, int]]], component: set[str]) -> str:
    """One shortest circle through the component's first module, with each import's
    file and line, for the failure message."""
    start = min(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in component:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                path.reverse()
                hops = [
                    f"  {a} -> {b}  ({graph[a][b][0]}:{graph[a][b][1]})"
                    for a, b in zip(path, [*path[1:], start], strict=True)
                ]
                return "\n".join(hops)
            if child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def _project_modules() -> dict[str, pathlib.Path]:
    return find_modules({"jaxrl": ROOT / "jaxrl", "jaxrl.envs": ROOT / "envs"})


def test_there_are_no_import_circles():
    graph = import_graph(_project_modules())
    cycles = strongly_connected(graph)
    report = "\n\n".join(shortest_cycle(graph, c) for c in cycles)
    assert not cycles, f"import circles in jaxrl/ and envs/:\n{report}"


def test_the_graph_sees_the_whole_project():
    modules = _project_modules()
    graph = import_graph(modules)
    assert {"jaxrl", "jaxrl.api", "jaxrl.envs", "jaxrl.envs.spaces"} <= set(modules)
    assert "jaxrl.training.contract" in graph["jaxrl.algorithms.ppo.train"]
    assert "jaxrl.algorithms.ppo.losses" in graph["jaxrl.algorithms.ppo.train"]  # from . import
    assert "jaxrl.prng" in graph["jaxrl.envs.classic.cartpole"]


def _write(root: pathlib.Path, files: dict[str, str]) -> dict[str, pathlib.Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return find_modules({"pkg": root / "pkg"})


def test_function_local_and_relative_imports_are_edges(tmp_path):
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    from .sub import b\n",
            "pkg/sub/__init__.py": "from ..a import f\n",
            "pkg/sub/b.py": "",
        },
    )
    graph = import_graph(modules)
    assert set(graph["pkg.a"]) == {"pkg.sub.b", "pkg.sub"}  # b's package is initialised too
    assert graph["pkg.a"]["pkg.sub.b"] == (str(tmp_path / "pkg/a.py"), 2)
    assert set(graph["pkg.sub"]) == {"pkg.a"}
    assert strongly_connected(graph) == [{"pkg.a", "pkg.sub"}]
    assert "pkg.a -> pkg.sub" in shortest_cycle(graph, {"pkg.a", "pkg.sub"})


def test_an_ancestor_package_is_an_edge_only_for_names_of_its_init(tmp_path):
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.api import train\nVERSION = 1\n",
            "pkg/api.py": "from pkg import config\nimport pkg.config\n",
            "pkg/config.py": "",
            "pkg/cli.py": "from pkg import VERSION\n",
            "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg\n",
        },
    )
    graph = import_graph(modules)
    assert set(graph["pkg.api"]) == {"pkg.config"}  # submodules: pkg is initialised already
    assert set(graph["pkg.cli"]) == {"pkg"}  # a name defined in pkg/__init__.py
    assert set(graph["pkg.typed"]) == set()  # TYPE_CHECKING imports never run
    assert strongly_connected(graph) == []
