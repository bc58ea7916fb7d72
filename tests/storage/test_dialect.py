"""The backends' differences live in services/storage (issue 36): every read
pool, snapshot and write connection carries its Dialect, and no module outside
the package compares backend names to choose SQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.storage import sqlite
from services.storage.dialect import POSTGRES, SQLITE, Dialect, dialect_of

SERVICES = Path(__file__).resolve().parents[2] / "services"
# a dialect (or a connection's) compared with a backend's name
NAME_COMPARED = re.compile(r"""dialect\w*\s*[!=]=\s*["'](sqlite|postgres)["']""")


def test_no_module_outside_storage_compares_dialect_names() -> None:
    offending = [
        f"{path.relative_to(SERVICES)}:{number}"
        for path in SERVICES.rglob("*.py")
        if "storage" not in path.relative_to(SERVICES).parts[:1]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NAME_COMPARED.search(line)
    ]
    assert offending == []


def test_choose_takes_this_backends_spelling() -> None:
    assert SQLITE.choose(sqlite="a", postgres="b") == "a"
    assert POSTGRES.choose(sqlite="a", postgres="b") == "b"
    assert (SQLITE.plan_guard, POSTGRES.plan_guard) == ("+", "")
    assert (SQLITE.row_lock, POSTGRES.row_lock) == ("", " FOR UPDATE")


def test_a_bare_sqlite_connection_and_the_pools_carry_theirs(tmp_path: Path) -> None:
    conn = sqlite.open_read_write(tmp_path / "db.sqlite")
    try:
        assert dialect_of(conn) is SQLITE
    finally:
        conn.close()
    assert sqlite.ReadPool.dialect is SQLITE and sqlite.ReadSnapshot.dialect is SQLITE


def test_dialect_of_refuses_a_name_in_place_of_a_dialect() -> None:
    class Named:
        dialect = "postgres"

    with pytest.raises(TypeError):
        dialect_of(Named())
    assert isinstance(dialect_of(object()), Dialect)
