"""SQL for weak memories (seed 003 "Ebbinghaus decay"): live memories whose
current decayed confidence (services/common/forgetting.py) is under the
threshold. Pinned and protected (decay rate 0) memories never are."""

from __future__ import annotations

from typing import Any

from services.common import forgetting
from services.storage.connection import Connection
from services.storage.dialect import SQLITE, Dialect, dialect_of
from services.storage.memory_filter_sql import live_sql
from services.storage.schema import memory_columns
from services.storage.store.repository import Query

_COLUMNS = memory_columns("m")


def _weak(
    default_rate: float, now: str, threshold: float, dialect: Dialect
) -> tuple[str, str, list[Any]]:
    """(current-confidence expression, WHERE clause, parameters: the expression's,
    then the clause's)."""
    expr, params = forgetting.current_confidence_sql("m", default_rate, now, dialect=dialect)
    where = f"{live_sql('m')} AND m.pinned = 0 AND coalesce(m.decay_rate, ?) > 0 AND {expr} < ?"
    return expr, where, [*params, default_rate, *params, threshold]


def weak_page_query(
    namespace: str,
    threshold: float,
    default_rate: float,
    now: str,
    after_rowid: int | None,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """A namespace's weak memories in the order they were written, with their
    current confidence (column `current_confidence`), after `after_rowid`."""
    expr, where, params = _weak(default_rate, now, threshold, dialect)
    return (
        f"SELECT m.rowid AS rowid, {_COLUMNS}, {expr} AS current_confidence FROM memories m "
        f"WHERE m.namespace = ? AND m.rowid > ? AND {where} ORDER BY m.rowid LIMIT ?",
        [*params[:2], namespace, after_rowid or 0, *params[2:], limit],
    )


def weak_count_query(
    threshold: float, default_rate: float, now: str, *, dialect: Dialect = SQLITE
) -> Query:
    """Weak memories across every namespace (diagnostics)."""
    _, where, params = _weak(default_rate, now, threshold, dialect)
    return f"SELECT count(*) FROM memories m WHERE {where}", params[2:]


def weakest_batch(
    conn: Connection, threshold: float, default_rate: float, now: str, limit: int
) -> list[Any]:
    """Up to `limit` weak memories of any namespace, oldest written first, for pruning."""
    expr, where, params = _weak(default_rate, now, threshold, dialect_of(conn))
    return list(
        conn.execute(
            f"SELECT {_COLUMNS}, {expr} AS current_confidence FROM memories m "
            f"WHERE {where} ORDER BY m.rowid LIMIT ?",
            [*params, limit],
        ).fetchall()
    )
