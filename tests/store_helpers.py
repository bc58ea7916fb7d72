"""Helpers for store tests: terse request builders and a read-only peek at the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.db import open_read_only


def remember(
    stub: store_pb2_grpc.MemoryStoreServiceStub, content: str, **fields: Any
) -> store_pb2.RememberResponse:
    return stub.Remember(store_pb2.RememberRequest(content=content, **fields))


def rows(db_path: Path, sql: str, *params: Any) -> list[Any]:
    conn = open_read_only(db_path)
    try:
        return list(conn.execute(sql, params).fetchall())
    finally:
        conn.close()


def scalar(db_path: Path, sql: str, *params: Any) -> Any:
    return rows(db_path, sql, *params)[0][0]


def table_counts(db_path: Path) -> dict[str, int]:
    """Row counts of every table a write touches: 'nothing written' means these don't move."""
    return {
        table: scalar(db_path, f"SELECT count(*) FROM {table}")
        for table in ("memories", "memories_fts", "memory_history", "memory_jobs")
    }


def fts_ids(db_path: Path, word: str) -> set[str]:
    return {
        r[0]
        for r in rows(
            db_path,
            "SELECT m.id FROM memories_fts f JOIN memories m ON m.rowid = f.rowid WHERE memories_fts MATCH ?",
            f'"{word}"',
        )
    }
