"""A rule two services need lives in services/common: search, the pipeline and
maintenance never import the store's modules (they reach it over gRPC)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("service", ["search", "pipeline", "maintenance", "common"])
def test_no_service_but_the_store_imports_the_store(service: str) -> None:
    offending = {
        f"{path.relative_to(SERVICES)}: {name}"
        for path in sorted((SERVICES / service).rglob("*.py"))
        for name in _imported_modules(path)
        if name == "services.store" or name.startswith("services.store.")
    }
    assert not offending, sorted(offending)
