"""What the vector index's SQL shares on both backends (services/storage/store/repository.py
on SQLite, pg_vectors.py on PostgreSQL): the vector_index row (the index's model
and its dimensions) and which embedding is a memory's."""

from __future__ import annotations

from services.storage.connection import Connection

# A memory's vector: its own namespace's, for its current content, of the index model.
EMBEDDING_OF_MEMORY = (
    "e.namespace = m.namespace AND e.content_hash = m.content_hash AND e.model = vi.model"
)


def record_index_model(conn: Connection, model: str, dimensions: int | None, at: str) -> None:
    """The vector_index row, on both backends."""
    conn.execute(
        "INSERT INTO vector_index(id, model, dimensions, updated_at) VALUES (1, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET model = excluded.model, dimensions = excluded.dimensions, "
        "updated_at = excluded.updated_at",
        (model, dimensions, at),
    )
