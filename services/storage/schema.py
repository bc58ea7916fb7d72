"""The schema's one definition that more than one service reads (issue 36, item 2):
the version the code is written for and the memory columns every reader selects.

SCHEMA_VERSION is how many migrations both chains ship (services/storage/sqlite_migrations.py
and pg_migrations.py refuse to import when they ship another number): a schema
change appends a migration to each chain and raises it here, and search, which
waits for this version before it serves (services/search/app.py), then waits
for that migration too, instead of starting on a database without the columns
it selects and failing every Recall with "no such column".

MEMORY_COLUMNS is what the store's and search's memory queries select (through
`memory_columns`) and what services/common/memory_record.py's MemoryRecord.from_row
reads; tests/common/test_schema.py selects them from a database migrated to
SCHEMA_VERSION on both backends and checks that the mapper reads exactly these.
"""

from __future__ import annotations

SCHEMA_VERSION = 23  # 23: embedding_parts

MEMORY_COLUMNS: tuple[str, ...] = (
    "id",
    "namespace",
    "content",
    "content_hash",
    "type",
    "importance",
    "tags",
    "pinned",
    "who",
    "why",
    "source_type",
    "source_id",
    "version",
    "is_deleted",
    "deleted_at",
    "created_at",
    "updated_at",
    "event_time",
    "access_count",
    "last_accessed",
    "session_id",  # 12: sessions_and_expiry
    "expire_at",  # 12
    "valid_from",  # 14: bi_temporal_validity
    "valid_until",  # 14
    "invalidated_at",  # 14
    "categories",  # 15: memory_categories_and_class
    "temporal_class",  # 15
    "confidence",  # 19: memory_decay
    "decay_rate",  # 19
)


def memory_columns(alias: str = "") -> str:
    """MEMORY_COLUMNS as a SELECT list, each qualified by `alias` when given."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + column for column in MEMORY_COLUMNS)


def schema_version_query() -> tuple[str, list[object]]:
    """The version a database is migrated to (0: none yet)."""
    return ("SELECT coalesce(max(version), 0) FROM schema_migrations", [])


def check_chain(backend: str, migrations: int) -> None:
    """Raise unless a migration chain ships SCHEMA_VERSION migrations (called by
    each chain's module when it is imported, so a forgotten bump fails at once)."""
    if migrations != SCHEMA_VERSION:
        raise RuntimeError(
            f"the {backend} migration chain ships {migrations} migrations but"
            f" services/storage/schema.py's SCHEMA_VERSION is {SCHEMA_VERSION}: a new"
            " migration goes into both chains and raises SCHEMA_VERSION to match"
        )
