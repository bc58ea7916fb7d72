"""services/storage/pg_migrations.py on a real PostgreSQL: applied once and
recorded with their checksums, refused when the code and the database disagree,
and giving every SQLite table, column, index and trigger its Postgres
counterpart (the differences are listed, each with its reason)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.storage.db import open_read_write as open_sqlite
from services.storage.pg import open_read_write
from services.storage.pg_migrations import (
    PG_MIGRATIONS,
    apply_pg_migrations,
    fix_vector_dimensions,
    pg_checksum,
)
from services.storage.sqlite_migrations import MigrationMismatch, apply_migrations

# What SQLite has and Postgres has not, on purpose.
SQLITE_ONLY_TABLES = {
    # FTS5's external-content table and its shadow tables: on Postgres the index is
    # memories.content_tsv (generated, live memories only) under a GIN index.
    "memories_fts",
    "memories_fts_config",
    "memories_fts_data",
    "memories_fts_docsize",
    "memories_fts_idx",
    # The vector change log feeds the search service's in-memory first pass;
    # Postgres's first pass is the HNSW index itself (migration 5 says so).
    "memory_vector_changes",
    "sqlite_sequence",  # AUTOINCREMENT's bookkeeping; identity columns on Postgres
}
SQLITE_ONLY_TRIGGERS = {
    # FTS5 maintenance: a generated column maintains content_tsv.
    "memories_ai",
    "memories_ad",
    "memories_au_content",
    "memories_au_tombstone",
    "memories_au_recover",
    # A purge leaves the vector index by the foreign key's ON DELETE CASCADE.
    "memory_vectors_purge",
    # The change log (see above).
    "memory_vectors_log_insert",
    "memory_vectors_log_update",
    "memory_vectors_log_delete",
    "memory_vector_changes_prune",
}
# What Postgres has and SQLite has not, on purpose.
POSTGRES_ONLY_COLUMNS = {
    ("memories", "rowid"),  # SQLite's implicit rowid, named
    ("memory_entity_mentions", "rowid"),  # the same: the order mentions were linked in
    ("entity_aliases", "rowid"),  # the same: the order aliases were added in
    ("memories", "content_tsv"),  # memories_fts's counterpart
    ("memories", "content_tokens"),  # its length (memories_fts_docsize's counterpart)
    ("memory_vectors", "embedding"),  # a halfvec under HNSW, for SQLite's sign bits
}
SQLITE_ONLY_COLUMNS = {("memory_vectors", "bits")}
# The keyword channel's kept statistics (FTS5 keeps its own) and their triggers.
POSTGRES_ONLY_TABLES = {"namespace_text_totals", "namespace_terms"}
POSTGRES_ONLY_TRIGGERS = {
    "memories_text_inserted",
    "memories_text_deleted",
    "memories_text_updated",
}
POSTGRES_ONLY_INDEXES = {
    "memories_content_tsv",  # GIN over content_tsv: memories_fts's counterpart
    "memory_vectors_hnsw",  # built when the model's dimensions are fixed
}


def _migrated(dsn: str) -> Any:
    conn = open_read_write(dsn)
    apply_pg_migrations(conn)
    return conn


def test_a_fresh_database_gets_every_migration_recorded_with_its_checksum(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn)
    assert apply_pg_migrations(conn) == [name for name, _ in PG_MIGRATIONS]
    recorded = conn.execute(
        "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
    ).fetchall()
    assert [tuple(r) for r in recorded] == [
        (v, name, pg_checksum(sql)) for v, (name, sql) in enumerate(PG_MIGRATIONS, start=1)
    ]


def test_a_second_run_applies_nothing_and_changes_nothing(pg_dsn: str) -> None:
    conn = _migrated(pg_dsn)
    before = _schema(conn)
    assert apply_pg_migrations(conn) == []
    assert _schema(conn) == before


def test_an_older_database_gets_only_the_pending_migrations(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn)
    assert len(apply_pg_migrations(conn, PG_MIGRATIONS[:12])) == 12
    assert apply_pg_migrations(conn) == [name for name, _ in PG_MIGRATIONS[12:]]


def test_a_tampered_checksum_is_refused_naming_the_migration(pg_dsn: str) -> None:
    conn = _migrated(pg_dsn)
    with conn.transaction():
        conn.execute("UPDATE schema_migrations SET checksum = 'tampered' WHERE version = 3")
    with pytest.raises(MigrationMismatch, match=r"migration 3 \(graph_documents_links\)"):
        apply_pg_migrations(conn)


def test_a_migration_edited_after_it_ran_is_refused(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn)
    edited = list(PG_MIGRATIONS)
    name, sql = edited[3]
    edited[3] = (name, sql.replace("ON maintenance_audit(created_at)", "ON maintenance_audit(id)"))
    apply_pg_migrations(conn, edited)
    with pytest.raises(MigrationMismatch, match=r"migration 4 \(maintenance_audit\)"):
        apply_pg_migrations(conn)


def test_a_migration_recorded_under_another_name_or_from_a_newer_engram_is_refused(
    pg_dsn: str,
) -> None:
    conn = _migrated(pg_dsn)
    with conn.transaction():
        conn.execute("UPDATE schema_migrations SET name = 'something_else' WHERE version = 2")
    with pytest.raises(MigrationMismatch, match=r"migration 2 is recorded as 'something_else'"):
        apply_pg_migrations(conn)
    with conn.transaction():
        conn.execute(
            "UPDATE schema_migrations SET name = 'embeddings_and_vector_index' WHERE version = 2"
        )
        conn.execute(
            "INSERT INTO schema_migrations VALUES (%s, 'from_the_future', '2030', 'x')",
            (len(PG_MIGRATIONS) + 1,),
        )
    with pytest.raises(MigrationMismatch, match="from_the_future"):
        apply_pg_migrations(conn)


def test_a_failing_migration_leaves_nothing_behind(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn)
    broken = [*PG_MIGRATIONS[:4], (PG_MIGRATIONS[4][0], "CREATE TABLE half (a INTEGER);\nBROKEN;")]
    with pytest.raises(psycopg.errors.SyntaxError):
        apply_pg_migrations(conn, broken)
    conn.rollback()
    assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 4
    assert conn.execute("SELECT to_regclass('half')").fetchone()[0] is None


# ---- the same schema as SQLite -----------------------------------------------------


def _sqlite_schema(path: Path) -> dict[str, set[Any]]:
    conn = open_sqlite(path)
    apply_migrations(conn)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    columns = {
        (table, column[1])
        for table in tables - SQLITE_ONLY_TABLES
        for column in conn.execute(f"PRAGMA table_info({table})")
    }
    indexes = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    }
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    return {"tables": tables, "columns": columns, "indexes": indexes, "triggers": triggers}


def _schema(conn: Any) -> dict[str, set[Any]]:
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
    }
    columns = {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        )
    }
    # named indexes only: those behind PRIMARY KEY and UNIQUE constraints are
    # SQLite's unnamed autoindexes
    indexes = {
        r[0]
        for r in conn.execute(
            "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_namespace n ON n.oid = i.relnamespace WHERE n.nspname = 'public'"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"
        )
    }
    triggers = {r[0] for r in conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
    conn.rollback()
    return {"tables": tables, "columns": columns, "indexes": indexes, "triggers": triggers}


def test_every_sqlite_table_column_index_and_trigger_has_its_postgres_counterpart(
    pg_dsn: str, tmp_path: Path
) -> None:
    sqlite = _sqlite_schema(tmp_path / "engram.db")
    conn = _migrated(pg_dsn)
    with conn.transaction():
        fix_vector_dimensions(conn, 384)
    postgres = _schema(conn)
    assert postgres["tables"] - POSTGRES_ONLY_TABLES == sqlite["tables"] - SQLITE_ONLY_TABLES
    shared_columns = {c for c in postgres["columns"] if c[0] not in POSTGRES_ONLY_TABLES}
    assert shared_columns - POSTGRES_ONLY_COLUMNS == sqlite["columns"] - SQLITE_ONLY_COLUMNS
    assert postgres["indexes"] - POSTGRES_ONLY_INDEXES == sqlite["indexes"]
    assert (
        postgres["triggers"] - POSTGRES_ONLY_TRIGGERS == sqlite["triggers"] - SQLITE_ONLY_TRIGGERS
    )
    # every listed difference is real (a stale entry would hide a new one)
    assert sqlite["tables"] >= SQLITE_ONLY_TABLES and sqlite["triggers"] >= SQLITE_ONLY_TRIGGERS
    assert postgres["columns"] >= POSTGRES_ONLY_COLUMNS
    assert postgres["indexes"] >= POSTGRES_ONLY_INDEXES
    assert postgres["tables"] >= POSTGRES_ONLY_TABLES
    assert postgres["triggers"] >= POSTGRES_ONLY_TRIGGERS


# ---- what the Postgres-specific parts do ------------------------------------------------


def _insert_memory(conn: Any, memory_id: str, content: str, namespace: str = "ns") -> int:
    at = "2026-01-01T00:00:00.000000000Z"
    row = conn.execute(
        "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type,"
        " importance, created_at, updated_at, event_time) VALUES (%s, %s, %s, %s, %s, 'fact',"
        " 0.5, %s, %s, %s) RETURNING rowid",
        (memory_id, namespace, content, content.lower(), f"h-{content}", at, at, at),
    ).fetchone()
    return int(row[0])


def _matches(conn: Any, word: str) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM memories WHERE content_tsv @@ to_tsquery('engram_english', %s) ORDER BY id",
        (word,),
    )
    return [r[0] for r in rows]


def test_the_text_index_holds_live_memories_stemmed_with_stop_words_kept(pg_dsn: str) -> None:
    """As FTS5's porter unicode61 with its triggers: stems, no stop-word list,
    tombstones out, recovered memories back in, content changes followed."""
    conn = _migrated(pg_dsn)
    with conn.transaction():
        _insert_memory(conn, "a", "The runners were running home")
        _insert_memory(conn, "b", "Who is it")
    assert _matches(conn, "run") == ["a"]
    assert _matches(conn, "who") == ["b"]  # a stop word, still indexed
    with conn.transaction():
        conn.execute("UPDATE memories SET is_deleted = 1 WHERE id = 'a'")
    assert _matches(conn, "run") == []
    with conn.transaction():
        conn.execute("UPDATE memories SET is_deleted = 0, content = 'walking home' WHERE id = 'a'")
    assert (_matches(conn, "run"), _matches(conn, "walk")) == ([], ["a"])


def test_a_memory_leaves_the_vector_index_when_tombstoned_changed_or_purged(pg_dsn: str) -> None:
    conn = _migrated(pg_dsn)
    with conn.transaction():  # no fix_vector_dimensions: no HNSW insert (see conftest)
        rowids = [_insert_memory(conn, m, f"content {m}") for m in ("a", "b", "c", "d")]
        for rowid in rowids:
            conn.execute("INSERT INTO memory_vectors VALUES (%s, 'ns', '[1, 0, 0, 0]')", (rowid,))
        conn.execute("UPDATE memories SET access_count = 3 WHERE id = 'a'")  # stays
        conn.execute("UPDATE memories SET is_deleted = 1 WHERE id = 'b'")
        conn.execute("UPDATE memories SET content_hash = 'other' WHERE id = 'c'")
        conn.execute("DELETE FROM memories WHERE id = 'd'")
    left = conn.execute("SELECT memory_rowid FROM memory_vectors").fetchall()
    assert [r[0] for r in left] == [rowids[0]]


def test_one_hnsw_index_serves_every_namespace_with_the_filter_inside_the_scan(
    pg_dsn: str, needs_pgvector: None
) -> None:
    conn = _migrated(pg_dsn)
    with conn.transaction():
        fix_vector_dimensions(conn, 3)
        # enough rows that the planner prefers the index to a sort of ns1's rows
        for i in range(2000):
            rowid = _insert_memory(conn, f"m{i}", f"memory {i}", namespace=f"ns{i % 4}")
            conn.execute(
                "INSERT INTO memory_vectors VALUES (%s, %s, %s)",
                (rowid, f"ns{i % 4}", f"[1, {i % 97}, {i % 13}]"),
            )
    conn.execute("ANALYZE memory_vectors")
    assert (
        conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_vectors_hnsw'")
        .fetchone()[0]
        .endswith("USING hnsw (embedding halfvec_cosine_ops)")
    )
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    query = (
        "SELECT memory_rowid FROM memory_vectors WHERE namespace = 'ns1'"
        " ORDER BY embedding <=> '[1, 5, 1]' LIMIT 3"
    )
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query))
    assert "memory_vectors_hnsw" in plan
    rows = conn.execute(
        "SELECT m.namespace FROM memory_vectors v JOIN memories m ON m.rowid = v.memory_rowid"
        " WHERE v.namespace = 'ns1' ORDER BY v.embedding <=> '[1, 5, 1]' LIMIT 3"
    ).fetchall()
    assert [r[0] for r in rows] == ["ns1"] * 3
    with pytest.raises(psycopg.errors.DataException):
        conn.execute("INSERT INTO memory_vectors VALUES (1, 'ns0', '[1, 2]')")  # 2 of 3 dims


def test_dedup_is_against_live_open_memories_only(pg_dsn: str) -> None:
    conn = _migrated(pg_dsn)
    with conn.transaction():
        _insert_memory(conn, "a", "same")
        conn.execute("UPDATE memories SET is_deleted = 1 WHERE id = 'a'")
        _insert_memory(conn, "b", "same")  # the first is a tombstone
    with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
        _insert_memory(conn, "c", "same")
    assert len(conn.execute("SELECT id FROM suite").fetchone()[0]) == 32
