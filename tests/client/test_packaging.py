"""One distribution ships the generated stubs: engram-grpc-client (clients/python). The
server (pyproject.toml) ships only `services` and depends on engram-grpc-client at this
checkout's version, so uninstalling or upgrading either never removes a file the
other imports; `make setup` installs both in one pip call, from the checkout."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _pyproject(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


SERVER = _pyproject(ROOT / "pyproject.toml")
CLIENT = _pyproject(ROOT / "clients" / "python" / "pyproject.toml")


def _requirements(project: dict[str, Any]) -> dict[str, Requirement]:
    found = (Requirement(r) for r in project["project"]["dependencies"])
    return {re.sub(r"[-_.]+", "-", r.name).lower(): r for r in found}


def test_the_server_ships_no_stubs_and_depends_on_this_client() -> None:
    setuptools = SERVER["tool"]["setuptools"]
    assert "engram" not in setuptools.get("package-dir", {})
    assert setuptools["packages"]["find"]["include"] == ["services*"]
    assert "gen" not in setuptools["packages"]["find"]["where"]
    data = setuptools.get("package-data", {})
    assert all(package.startswith("services") for package in data), data
    assert not any(p.endswith((".py", ".pyi")) for patterns in data.values() for p in patterns)
    client = _requirements(SERVER)["engram-grpc-client"]
    assert str(client.specifier) == f"=={CLIENT['project']['version']}"


def test_every_data_file_the_services_read_is_shipped() -> None:
    """A file under services/ that is not Python is read at run time (importlib.resources):
    a wheel, and so the Docker image, holds it only when package-data lists it."""
    data = SERVER["tool"]["setuptools"].get("package-data", {})
    services = ROOT / "services"
    files = [
        f
        for f in services.rglob("*")
        if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts
    ]
    unlisted = []
    for f in files:
        package = ".".join(f.parent.relative_to(ROOT).parts)
        if not any(f.match(pattern) for pattern in data.get(package, [])):
            unlisted.append(str(f.relative_to(ROOT)))
    assert unlisted == []


def test_the_client_ships_every_generated_package() -> None:
    """Every package under gen/engram, the internal ones the server imports included."""
    gen = ROOT / "gen"
    generated = {
        ".".join(d.relative_to(gen).parts)
        for d in (gen / "engram").rglob("*")
        if d.is_dir() and (d / "__init__.py").exists()
    } | {"engram"}
    shipped = set(CLIENT["tool"]["setuptools"]["packages"])
    assert generated | {"engram.client"} == shipped
    assert CLIENT["tool"]["setuptools"]["package-dir"]["engram"] == "../../gen/engram"


def test_the_client_brings_the_types_a_users_mypy_needs() -> None:
    assert {"types-protobuf", "grpc-stubs"} <= set(_requirements(CLIENT))


def test_make_setup_installs_client_and_server_in_one_pip_call() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    installs = [
        line for line in recipe.splitlines() if line.startswith("\t$(PY) -m pip install -e")
    ]
    assert len(installs) == 1 and "-e clients/python -e " in installs[0], installs
