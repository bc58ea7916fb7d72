"""Every SQL statement lives in services/storage (issue 36): no module outside
the package runs a statement (`.execute`, `.executemany`, `.executescript`) or
holds one's text. The check reads the syntax tree, so a comment or docstring
that says SELECT is no offence, while a statement built in an f-string is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[2] / "services"
RUNS_SQL = frozenset({"execute", "executemany", "executescript"})
# A statement's opening keyword in capitals (as every statement here is written),
# then a space, a newline or the end: prose ("delete without asking", "Update a
# memory", "rollback failed") is not SQL.
# A bare word ("UPDATE", a decision's action) is not a statement; a bare
# transaction verb is.
STATEMENT = re.compile(
    r"\s*((SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|PRAGMA|BEGIN|COMMIT|ROLLBACK|"
    r"SAVEPOINT|RELEASE)\s+\S|(BEGIN|COMMIT|ROLLBACK)\s*$)"
)
# module (dotted, under services) -> why it may; empty: every statement has its home.
ALLOWED: dict[str, str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (prose, never run)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _text_of(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's up to its first placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        head = []
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                head.append(" ")  # a placeholder: "BEGIN {mode}" still opens with BEGIN
                break
            head.append(part.value)
        return "".join(head)
    return None


def offences(source: str, name: str) -> list[str]:
    """Where `source` (module `name`) runs SQL or holds a statement's text."""
    tree = ast.parse(source, name)
    docstrings = _docstrings(tree)
    inside_fstring = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RUNS_SQL
        ):
            found.append(f"{name}:{node.lineno}: .{node.func.attr}(")
        if id(node) in docstrings or id(node) in inside_fstring:
            continue
        text = _text_of(node)
        if text is not None and STATEMENT.match(text):
            found.append(f"{name}:{node.lineno}: {text.strip()[:60]!r}")
    return found


def _modules_outside_storage() -> dict[str, Path]:
    found = {}
    for path in sorted(SERVICES.rglob("*.py")):
        parts = path.relative_to(SERVICES.parent).with_suffix("").parts
        if parts[1] == "storage":
            continue
        found[".".join(parts)] = path
    return found


def test_no_module_outside_storage_runs_or_holds_sql() -> None:
    found = [
        offence
        for module, path in _modules_outside_storage().items()
        if module not in ALLOWED
        for offence in offences(path.read_text(), module)
    ]
    assert found == [], "SQL outside services/storage (give it a function there):\n" + "\n".join(
        found
    )


def test_every_allowed_module_still_exists_and_still_needs_it() -> None:
    modules = _modules_outside_storage()
    stale = [m for m in ALLOWED if m not in modules or not offences(modules[m].read_text(), m)]
    assert stale == []


def test_the_check_sees_what_it_must_and_nothing_else() -> None:
    caught = offences(
        "def f(conn, t):\n"
        "    conn.execute(x)\n"
        "    conn.executemany(x, [])\n"
        "    q = '  SELECT 1'\n"
        "    r = f'\\nDELETE FROM {t}'\n"
        "    s = 'BEGIN IMMEDIATE'\n"
        "    u = ('WITH a AS (SELECT 1) '\n"
        "         'SELECT * FROM a')\n",
        "m",
    )
    assert len(caught) == 6, caught
    assert (
        offences(
            '"""Select the rows."""\n'
            "# SELECT 1\n"
            "def f():\n"
            '    """UPDATE notes, one a line."""\n'
            "    log('Update.', 'deleted', 'commits made', 'Selection', 'delete without asking')\n"
            "    action = 'UPDATE' if x else 'DELETE'\n",
            "m",
        )
        == []
    )


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (function-local imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_each_services_statements_are_imported_by_that_service_alone() -> None:
    """The store's statements (services.storage.store) write through the store's
    single writer; search's (services.storage.search) read its pools. Neither
    service reaches the other's through the shared package, and the package
    imports no service. The `engram` command (services.cli), which starts
    and backs up the suite on its host, may read either."""
    owners = {
        "services.storage.store": "services.store",
        "services.storage.search": "services.search",
    }
    services = ("services.store", "services.search", "services.pipeline", "services.maintenance")
    found = []
    for path in sorted(SERVICES.rglob("*.py")):
        module = ".".join(path.relative_to(SERVICES.parent).with_suffix("").parts)
        for name in _imports(path):
            for statements, owner in owners.items():
                if (
                    _within(name, statements)
                    and not _within(module, owner)
                    and not _within(module, "services.storage")
                    and not _within(module, "services.cli")
                ):
                    found.append(f"{module} imports {name}")
            if _within(module, "services.storage") and any(_within(name, s) for s in services):
                found.append(f"{module} imports {name}")
    assert found == []
