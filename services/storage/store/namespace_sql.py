"""The SQL of DeleteNamespace and RecoverNamespace (services/store/namespaces.py).

Reads are (sql, params) for the read pool or the writer's connection; written
for SQLite and run unchanged on PostgreSQL (services/storage/store/repository.py)."""

from __future__ import annotations

from typing import Any

from services.storage.connection import Connection
from services.storage.store import admin_sql
from services.storage.store.repository import _M_COLUMNS, Query

# The maintenance_audit action of one DeleteNamespace execute: its result names
# the namespace and the deleted time every memory it deleted carries, which is
# how RecoverNamespace tells them from memories deleted one by one.
DELETED_ACTION = "namespace_deleted"


def contents_query(namespace: str) -> Query:
    """What the namespace holds, and its last change (the newest `updated_at` of a
    live memory: every write to a memory sets it), which the confirm token binds."""
    live = "FROM memories WHERE namespace = ? AND is_deleted = 0"
    return (
        f"SELECT (SELECT count(*) {live}) AS memories, "
        f"(SELECT count(*) {live} AND pinned = 1) AS pinned_memories, "
        "(SELECT count(*) FROM memories WHERE namespace = ? AND is_deleted = 1) "
        "AS deleted_memories, "
        "(SELECT count(*) FROM entities WHERE namespace = ?) AS entities, "
        "(SELECT count(*) FROM documents WHERE namespace = ?) AS documents, "
        f"(SELECT max(updated_at) {live}) AS last_change",
        [namespace] * 6,
    )


def live_batch_query(namespace: str, began: str, limit: int) -> Query:
    """Up to `limit` memories live in the namespace and created by `began`."""
    return (
        f"SELECT {_M_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.is_deleted = 0 "
        "AND m.created_at <= ? LIMIT ?",
        [namespace, began, limit],
    )


def deleted_batch_query(namespace: str, deleted_at: str, after: int, limit: int) -> Query:
    """Up to `limit` tombstones of the namespace deleted at exactly `deleted_at` (one
    DeleteNamespace execute), in rowid order after rowid `after` (a keyset, each
    batch starting where the last ended; in SQLite the namespace index holds the
    rowid, so no batch sorts the whole deletion)."""
    return (
        f"SELECT {_M_COLUMNS}, m.rowid AS position FROM memories m WHERE m.namespace = ? "
        "AND m.is_deleted = 1 AND m.deleted_at = ? AND m.rowid > ? ORDER BY m.rowid LIMIT ?",
        [namespace, deleted_at, after, limit],
    )


def deletions_query() -> Query:
    """Every DeleteNamespace execute (the result names its namespace), oldest first."""
    return (
        "SELECT result, created_at FROM maintenance_audit WHERE action = ? ORDER BY created_at",
        [DELETED_ACTION],
    )


def record_deletion(conn: Connection, result: dict[str, Any], at: str) -> None:
    admin_sql.insert_audit(conn, DELETED_ACTION, result, at)
