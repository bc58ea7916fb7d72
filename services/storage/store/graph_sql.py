"""SQL for the knowledge graph's writes (seed 000 "Knowledge Graph"). Every
statement is scoped to one namespace: the graph never crosses namespaces.
Every statement is one text for SQLite and Postgres (the writer's connection
on either: services/storage/pg.py's SqliteApi translates the placeholders);
the mention and alias tables' `rowid` is SQLite's implicit one and an
identity column on Postgres (services/storage/pg_migrations.py)."""

from __future__ import annotations

from collections.abc import Sequence

from services.storage.connection import Connection
from services.storage.store import repository as repo


def find_entity(conn: Connection, namespace: str, canonical: str) -> tuple[str, str] | None:
    """(id, entity_type) of the namespace's entity whose canonical name, or
    else whose alias, this is."""
    row = conn.execute(
        "SELECT id, entity_type FROM entities WHERE namespace = ? AND canonical_name = ?",
        (namespace, canonical),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT e.id, e.entity_type FROM entity_aliases a JOIN entities e "
            "ON e.id = a.entity_id WHERE a.namespace = ? AND a.canonical_alias = ?",
            (namespace, canonical),
        ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def create_entity(
    conn: Connection, namespace: str, name: str, canonical: str, entity_type: str, at: str
) -> str:
    """A new entity with no mentions yet; its id."""
    new = repo.new_id()
    conn.execute(
        "INSERT INTO entities (id, namespace, name, canonical_name, entity_type, mentions, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
        (new, namespace, name, canonical, entity_type, at, at),
    )
    return new


def set_entity_type(conn: Connection, entity_id: str, entity_type: str, at: str) -> None:
    conn.execute(
        "UPDATE entities SET entity_type = ?, updated_at = ? WHERE id = ?",
        (entity_type, at, entity_id),
    )


def add_alias(
    conn: Connection, namespace: str, entity_id: str, alias: str, canonical: str, at: str
) -> bool:
    """Give the entity this alias unless the name is taken in the namespace (an
    entity's canonical name, or another alias): True when added."""
    taken = conn.execute(
        "SELECT 1 FROM entities WHERE namespace = ? AND canonical_name = ?",
        (namespace, canonical),
    ).fetchone()
    if taken is not None:
        return False
    cursor = conn.execute(
        "INSERT INTO entity_aliases (namespace, canonical_alias, entity_id, alias, "
        "created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (namespace, canonical, entity_id, alias, at),
    )
    return int(cursor.rowcount) > 0


def linked_entity_ids(conn: Connection, namespace: str, memory_id: str) -> set[str]:
    """Entities the memory is already linked to (from an earlier run)."""
    rows = conn.execute(
        "SELECT entity_id FROM memory_entity_mentions WHERE namespace = ? AND memory_id = ?",
        (namespace, memory_id),
    ).fetchall()
    return {row[0] for row in rows}


def link_mention(
    conn: Connection,
    namespace: str,
    memory_id: str,
    entity_id: str,
    mention_text: str,
    confidence: float,
    at: str,
) -> bool:
    """Link a memory to an entity; True when the link is new (ON CONFLICT DO
    NOTHING keeps re-processing idempotent)."""
    cursor = conn.execute(
        "INSERT INTO memory_entity_mentions (memory_id, entity_id, namespace, "
        "mention_text, confidence, created_at) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        (memory_id, entity_id, namespace, mention_text, confidence, at),
    )
    return int(cursor.rowcount) > 0


def previous_mention(conn: Connection, entity_id: str, memory_id: str) -> str | None:
    """The memory most recently linked to the entity before `memory_id` (the
    entity index is ordered by rowid within an entity: one index step, on
    Postgres too, whose index names the column)."""
    row = conn.execute(
        "SELECT memory_id FROM memory_entity_mentions WHERE entity_id = ? AND memory_id != ? "
        "ORDER BY rowid DESC LIMIT 1",
        (entity_id, memory_id),
    ).fetchone()
    return None if row is None else str(row[0])


def count_entity_mention(conn: Connection, entity_id: str, at: str) -> None:
    conn.execute(
        "UPDATE entities SET mentions = mentions + 1, updated_at = ? WHERE id = ?",
        (at, entity_id),
    )


def record_relation(
    conn: Connection,
    namespace: str,
    source_id: str,
    target_id: str,
    relation_type: str,
    confidence: float,
    at: str,
) -> None:
    """A new relation starts at strength 1.0 with one mention; a known one
    gains a mention and averages its confidence: (old × n + new) / (n + 1)."""
    conn.execute(
        "INSERT INTO relations (id, namespace, source_entity_id, target_entity_id, "
        "relation_type, strength, mentions, confidence, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, 1.0, 1, ?, ?, ?) "
        "ON CONFLICT (source_entity_id, target_entity_id, relation_type) DO UPDATE SET "
        "confidence = (relations.confidence * relations.mentions + excluded.confidence) "
        "/ (relations.mentions + 1), mentions = relations.mentions + 1, "
        "updated_at = excluded.updated_at",
        (repo.new_id(), namespace, source_id, target_id, relation_type, confidence, at, at),
    )


def mentioned_entities(conn: Connection, memory_id: str) -> list[str]:
    """The entities a memory is linked to."""
    rows = conn.execute(
        "SELECT entity_id FROM memory_entity_mentions WHERE memory_id = ?", (memory_id,)
    ).fetchall()
    return [row[0] for row in rows]


def delete_mention(conn: Connection, memory_id: str, entity_id: str, at: str) -> None:
    conn.execute(
        "DELETE FROM memory_entity_mentions WHERE memory_id = ? AND entity_id = ?",
        (memory_id, entity_id),
    )
    conn.execute(
        "UPDATE entities SET mentions = CASE WHEN mentions > 1 THEN mentions - 1 ELSE 0 END, "
        "updated_at = ? WHERE id = ?",
        (at, entity_id),
    )


def delete_orphaned_entities(conn: Connection, entity_ids: Sequence[str]) -> tuple[int, int]:
    """Entities among `entity_ids` at zero mentions, with no mention row left, are
    deleted with every relation that touches them. Returns (entities, relations)."""
    entities = relations = 0
    for entity_id in entity_ids:
        orphan = conn.execute(
            "SELECT 1 FROM entities e WHERE e.id = ? AND e.mentions <= 0 AND NOT EXISTS "
            "(SELECT 1 FROM memory_entity_mentions mm WHERE mm.entity_id = e.id)",
            (entity_id,),
        ).fetchone()
        if orphan is None:
            continue
        relations += conn.execute(
            "DELETE FROM relations WHERE source_entity_id = ? OR target_entity_id = ?",
            (entity_id, entity_id),
        ).rowcount
        conn.execute("DELETE FROM entity_aliases WHERE entity_id = ?", (entity_id,))
        entities += conn.execute("DELETE FROM entities WHERE id = ?", (entity_id,)).rowcount
    return entities, relations
