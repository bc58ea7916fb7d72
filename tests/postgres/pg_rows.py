"""Times and row builders the backend-parametrised tests/postgres modules share, so
every test writes memories the same way on SQLite and Postgres."""

from __future__ import annotations

from typing import Any

from services.storage.dialect import Dialect, dialect_of
from services.storage.store import repository as repo

T0 = "2026-01-01T00:00:00.000000000Z"
T1 = "2026-01-01T00:00:01.000000000Z"
T2 = "2026-01-01T00:00:02.000000000Z"
T3 = "2026-01-01T00:00:03.000000000Z"
PAST = "2000-01-01T00:00:00.000000000Z"


def dialect(conn: Any) -> Dialect:
    """The dialect a read pool on this connection's backend passes to query builders."""
    return dialect_of(conn)


def memory(memory_id: str, content: str, namespace: str = "ns", **overrides: Any) -> Any:
    """A live fact memory created at T0; `overrides` set any other column."""
    fields: dict[str, Any] = {
        "id": memory_id,
        "namespace": namespace,
        "content": content,
        "normalized_content": content.lower(),
        "content_hash": f"h-{content}",
        "type": "fact",
        "importance": 0.5,
        "tags": "[]",
        "pinned": 0,
        "who": "user",
        "why": "",
        "source_type": "api",
        "source_id": "",
        "created_at": T0,
        "event_time": T0,
    }
    fields.update(overrides)
    return repo.MemoryRow(**fields)


def insert(conn: Any, *rows: Any) -> None:
    repo.insert_memory_rows(conn, list(rows))
