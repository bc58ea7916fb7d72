"""Helpers for store tests: terse request builders and a read-only peek at the
test's database (a SQLite file or a Postgres database: tests/backend_db.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import backend_db
from engram.store.v1 import store_pb2, store_pb2_grpc


def remember(
    stub: store_pb2_grpc.MemoryStoreServiceStub, content: str, **fields: Any
) -> store_pb2.RememberResponse:
    return stub.Remember(store_pb2.RememberRequest(content=content, **fields))


def rows(db_path: str | Path, sql: str, *params: Any) -> list[Any]:
    return backend_db.rows(db_path, sql, *params)


def scalar(db_path: str | Path, sql: str, *params: Any) -> Any:
    return rows(db_path, sql, *params)[0][0]


def table_counts(db_path: str | Path) -> dict[str, int]:
    """Row counts of every table a write touches, and of the full-text index:
    'nothing written' means these don't move."""
    counts = {
        table: scalar(db_path, f"SELECT count(*) FROM {table}")
        for table in ("memories", "memory_history", "memory_jobs")
    }
    return {**counts, "memories_fts": backend_db.fts_count(db_path)}


def fts_ids(db_path: str | Path, word: str) -> set[str]:
    """Ids of the memories the full-text index finds `word` in."""
    return backend_db.fts_ids(db_path, word)
