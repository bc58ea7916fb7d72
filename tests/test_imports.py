"""Every module of services/ and of the client (clients/python/engram) imports on
its own, and no two of them import each other, directly or round a longer loop.

A module that imports only after some other module was imported first (an
import cycle the server's import order happens to get through: `import
services.store.jobs` failed with "partially initialized module" while the
store started) passes a test suite that imports everything; here each is
imported first, alone, in a process of its own. The check of cycles reads the
imports from the source, so a cycle hidden by a function-local import (which
makes the module import alone) is named too; only imports under
`if TYPE_CHECKING:` are left out, since they never run.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (directory on sys.path, top-level package under it): the project's own code
PACKAGES = ((ROOT, "services"), (ROOT / "clients" / "python", "engram"))

# Imports each module named on the command line in a forked child of a process
# that has imported none of them: the third-party packages the modules use are
# imported first in the parent (each child would otherwise spend a second on
# grpc, numpy and pydantic, which are not under test), then every child
# imports its one module and exits. Two children at a time (two cores).
# Prints one line per module that fails: "<module>: <error>".
_DRIVER = r"""
import importlib, os, sys, traceback

modules = sys.argv[2:]
for name in sys.argv[1].split(","):
    if name:
        try:
            importlib.import_module(name)
        except Exception:  # an extra not installed: its importers fail below, named
            pass
loaded = [m for m in modules if m in sys.modules]
if loaded:
    print(f"driver: {loaded} imported before the test", flush=True)
    os._exit(2)
running = set()
for name in modules:
    if len(running) >= 2:
        running.discard(os.wait()[0])
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            os.write(1, f"{name}: {last[:2000]}\n".encode())  # one write: lines do not mix
            os._exit(1)
        os._exit(0)
    running.add(pid)
while running:
    running.discard(os.wait()[0])
"""


def _modules() -> dict[str, Path]:
    found = {}
    for base, package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _project_module(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import of `name` loads last (itself, or the package
    holding it); None for a module of anyone else's."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> tuple[set[str], set[str]]:
    """Every module name `module` imports, at the top or inside a function
    (`from a import b` names `a.b` and `a`: b may be a module or a name); and
    the names that are surely modules (`import a.b`, `from a.b import c`)."""
    names: set[str] = set()
    sources: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
                sources.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                source = child.module or ""
                if child.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    base = ".".join(package[: len(package) - child.level + 1])
                    source = f"{base}.{source}" if source else base
                names.add(source)
                names.update(f"{source}.{alias.name}" for alias in child.names)
                sources.add(source)
            visit(child)

    visit(tree)
    return names, sources


def _import_graph() -> tuple[dict[str, set[str]], set[str]]:
    """Project module -> the project modules it imports; and the top-level
    names of everything else they import (the driver imports those first)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    others: set[str] = set()
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        names, sources = _imported_names(tree, module, path.name == "__init__.py")
        targets = set()
        for name in names:
            target = _project_module(name, modules)
            if target is not None and target != module and not module.startswith(f"{target}."):
                # (a module's own packages are imported before it anyway)
                targets.add(target)
        graph[module] = targets
        others.update(name for name in sources if _project_module(name, modules) is None)
    third_party = {name for name in others if name.partition(".")[0] not in sys.stdlib_module_names}
    return graph, third_party


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            connect(module)
    return found


def test_no_two_project_modules_import_each_other() -> None:
    graph, _ = _import_graph()
    cycles = _cycles(graph)
    described = [
        " | ".join(f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle)
        for cycle in cycles
    ]
    assert not cycles, "import cycles (move the shared code below both):\n" + "\n".join(described)


def test_every_module_imports_on_its_own() -> None:
    graph, third_party = _import_graph()
    modules = sorted(graph)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "gen"), str(ROOT / "clients" / "python")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    # the children only import: no BLAS thread pools to lose in a fork
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", _DRIVER, ",".join(sorted(third_party)), *modules],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"the driver failed:\n{result.stdout}\n{result.stderr}"
    failures = sorted(line for line in result.stdout.splitlines() if line)
    assert not failures, f"{len(failures)} of {len(modules)} modules do not import alone:\n" + (
        "\n".join(failures)
    )
