"""GetStoreDiagnostics' counts (services/storage/store/admin_sql.py diagnostics_query and
orphans_query) on a synthetic store of N live memories, each with an embedding of
the index model and a vector index row, on SQLite and on PostgreSQL.

Why: the vector checks were `NOT IN (subquery)`, which Postgres re-scans per row
once the list outgrows work_mem (1M: over 120 s); they are EXISTS joins there now.

    flock /tmp/engram-bench.lock .venv/bin/python bench/admin_diagnostics.py \\
        --memories 1000000 --postgres-dsn postgresql://...  # a database it may fill

The Postgres database must be empty (it is migrated here); without
--postgres-dsn only SQLite runs. The SQLite file goes to a temporary directory.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from services.storage import db
from services.storage.dialect import Dialect
from services.storage.sqlite_migrations import apply_migrations
from services.storage.store import admin_sql

T = "2026-01-01T00:00:00.000000000Z"
MEMORIES = (
    "INSERT INTO memories(id, namespace, content, normalized_content, content_hash, type, "
    "importance, created_at, updated_at, event_time) "
    "SELECT 'id' || i, 'ns' || (i % 10), 'w' || i, 'w' || i, 'h' || i, 'fact', 0.5, "
    f"'{T}', '{T}', '{T}' FROM {{series}}"
)
EMBEDDINGS = (
    "INSERT INTO embeddings(namespace, content_hash, model, dimensions, vector, created_at) "
    f"SELECT namespace, content_hash, 'm', 2, {{blob}}, '{T}' FROM memories"
)
INDEX_MODEL = "INSERT INTO vector_index(id, model, dimensions, updated_at) VALUES (1, 'm', 2, ?)"


def load_sqlite(path: Path, n: int) -> Any:
    conn = db.open_read_write(path)
    apply_migrations(conn)
    conn.execute("BEGIN")
    conn.execute(INDEX_MODEL, (T,))
    series = f"(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) SELECT i FROM s)"
    conn.execute(MEMORIES.format(series=series))
    conn.execute(EMBEDDINGS.format(blob="x'00000000'"))
    conn.execute(
        "INSERT INTO memory_vectors(memory_rowid, namespace, bits) "
        "SELECT rowid, namespace, x'00' FROM memories"
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    return conn


def load_postgres(dsn: str, n: int) -> Any:
    from services.storage import pg
    from services.storage.pg_migrations import apply_pg_migrations

    raw = pg.open_read_write(dsn)
    apply_pg_migrations(raw)
    conn = pg.SqliteApi(raw)
    conn.execute(INDEX_MODEL, (T,))
    conn.execute(MEMORIES.format(series=f"generate_series(1, {n}) i"))
    conn.execute(EMBEDDINGS.format(blob="'\\x00000000'::bytea"))
    conn.execute(
        "INSERT INTO memory_vectors(memory_rowid, namespace, embedding) "
        "SELECT rowid, namespace, '[1,0]' FROM memories"
    )
    conn.execute("VACUUM ANALYZE")
    conn.execute("SET statement_timeout = '600s'")
    return conn


def time_queries(label: str, conn: Any, dialect: Dialect, rounds: int) -> None:
    for _ in range(rounds):
        for name, query in (
            ("diagnostics", admin_sql.diagnostics_query(T, T, dialect=dialect)),
            ("orphans", admin_sql.orphans_query(dialect=dialect)),
        ):
            start = time.perf_counter()
            conn.execute(*query).fetchone()
            print(f"{label} {name}: {time.perf_counter() - start:.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--postgres-dsn", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        lite = load_sqlite(Path(tmp) / "store.db", args.memories)
        print(f"sqlite loaded {args.memories} in {time.perf_counter() - start:.1f} s")
        time_queries("sqlite", lite, "sqlite", args.rounds)
        lite.close()
    if args.postgres_dsn:
        start = time.perf_counter()
        conn = load_postgres(args.postgres_dsn, args.memories)
        print(f"postgres loaded {args.memories} in {time.perf_counter() - start:.1f} s")
        time_queries("postgres", conn, "postgres", args.rounds)
        conn.close()


if __name__ == "__main__":
    main()
