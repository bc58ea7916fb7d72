"""The suite id the store's first migration wrote (migration `suite_identity`)."""

from __future__ import annotations

from services.storage.connection import Connection


def read_suite_id(conn: Connection) -> str:
    row = conn.execute("SELECT id FROM suite LIMIT 1").fetchone()
    return str(row[0])
