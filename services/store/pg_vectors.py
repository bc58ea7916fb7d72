"""The vector index's SQL on PostgreSQL (issue 21; not selectable yet): the
counterparts of services/store/repository.py's vector functions, under the same
names and with the same meaning, on a psycopg connection from
services/common/pg.py (`%s` placeholders; the caller's transaction).

What differs from SQLite, and why:
- The index row holds the memory's vector as a halfvec (pgvector) under the one
  HNSW index of pg_migrations, not sign bits: the first pass is the HNSW scan.
- `embeddings.vector` stays the float32 bytes both backends store. Postgres has
  no bytea-to-vector cast, and decoding floats in SQL costs ~0.8 ms a vector
  (measured: 2,000 vectors in 1.7 s), so `_index_embedded` reads the bytes,
  converts them with numpy and writes pgvector's binary halfvec form: one
  pass over the rows, written back 2,000 at a time, instead of SQLite's single
  INSERT ... SELECT.
- `set_index_model` also sizes the halfvec column and (re)builds its HNSW index
  when the dimensions change (pg_migrations.fix_vector_dimensions): pgvector
  indexes only a column of fixed dimensions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format

from services.store.pg_migrations import fix_vector_dimensions
from services.store.repository import EMBEDDING_OF_MEMORY, index_model_query

_CHUNK = 2_000  # vectors converted and written per round trip
_UPSERT_VECTOR = (
    "INSERT INTO memory_vectors(memory_rowid, namespace, embedding) VALUES (%s, %s, %s) "
    "ON CONFLICT (memory_rowid) DO UPDATE SET "
    "namespace = excluded.namespace, embedding = excluded.embedding"
)


class Halfvec(bytes):
    """pgvector's binary halfvec (int16 dimensions, int16 unused, big-endian
    float16s), sent as a parameter of unknown type: the server reads it with the
    target column's binary input, so no type lookup is needed."""

    @classmethod
    def from_f32(cls, vector_f32: bytes) -> Halfvec:
        values = np.frombuffer(vector_f32, dtype="<f4")
        return cls(struct.pack(">hh", len(values), 0) + values.astype(">f2").tobytes())


class _HalfvecDumper(Dumper):
    format = Format.BINARY
    oid = 0  # unknown: inferred from the column

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def index_model(conn: Any) -> tuple[str, int | None] | None:
    row = conn.execute(index_model_query()[0]).fetchone()
    return None if row is None else (row[0], row[1])


def _column_dimensions(conn: Any) -> int | None:
    """The halfvec column's fixed dimensions, None while unsized."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute "
        "WHERE attrelid = 'memory_vectors'::regclass AND attname = 'embedding'"
    ).fetchone()
    return None if row[0] < 0 else int(row[0])


def set_index_model(conn: Any, model: str, dimensions: int | None, at: str) -> None:
    """As SQLite's, and the column sized (its HNSW index rebuilt) when the
    dimensions change. A change of size comes after the index was cleared (a
    model change) or while it is empty (the first vector sets the size)."""
    conn.execute(
        "INSERT INTO vector_index(id, model, dimensions, updated_at) VALUES (1, %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET model = excluded.model, "
        "dimensions = excluded.dimensions, updated_at = excluded.updated_at",
        (model, dimensions, at),
    )
    if _column_dimensions(conn) != dimensions:
        fix_vector_dimensions(conn, dimensions)


def clear_vector_index(conn: Any) -> None:
    # DELETE, not TRUNCATE: readers keep their snapshot instead of waiting on
    # TRUNCATE's exclusive lock until the store commits.
    conn.execute("DELETE FROM memory_vectors")


def upsert_embedding(
    conn: Any,
    namespace: str,
    content_hash: str,
    model: str,
    vector: bytes,
    dimensions: int,
    at: str,
) -> None:
    """Store a namespace's vector for a content: it serves that namespace alone,
    so no other namespace can overwrite it or learn from its presence."""
    conn.execute(
        "INSERT INTO embeddings(namespace, content_hash, model, dimensions, vector, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (namespace, content_hash, model) DO UPDATE SET "
        "dimensions = excluded.dimensions, vector = excluded.vector, "
        "created_at = excluded.created_at",
        (namespace, content_hash, model, dimensions, vector, at),
    )


def _index_embedded(conn: Any, where: str, params: Sequence[Any]) -> int:
    """Put live memories matching `where` (over alias m) that have an embedding
    of the index model in their namespace into the vector index; returns how
    many rows were written."""
    written = 0
    # One pass over the rows (a server-side cursor), written back in chunks.
    with conn.cursor(name="engram_index_embedded") as rows, conn.cursor() as writes:
        writes.adapters.register_dumper(Halfvec, _HalfvecDumper)
        rows.execute(
            "SELECT m.rowid, m.namespace, e.vector FROM memories m "
            f"JOIN vector_index vi ON vi.id = 1 JOIN embeddings e ON {EMBEDDING_OF_MEMORY} "
            f"WHERE m.is_deleted = 0 AND ({where})",
            list(params),
        )
        while chunk := rows.fetchmany(_CHUNK):
            writes.executemany(
                _UPSERT_VECTOR, [(r[0], r[1], Halfvec.from_f32(r[2])) for r in chunk]
            )
            written += len(chunk)
    return written


def index_memories(conn: Any, memory_ids: Sequence[str]) -> int:
    """Index these memories (those with a vector of the index model) and record
    the model on them; returns how many index rows were written."""
    written = 0
    for start in range(0, len(memory_ids), 500):
        chunk = list(memory_ids[start : start + 500])
        written += _index_embedded(conn, "m.id = ANY(%s)", [chunk])
        conn.execute(
            "UPDATE memories SET embedding_model = (SELECT model FROM vector_index WHERE id = 1) "
            "WHERE id = ANY(%s) AND rowid IN (SELECT memory_rowid FROM memory_vectors)",
            (chunk,),
        )
    return written


def index_all_embedded(conn: Any) -> int:
    """Every live memory with a vector of the index model (after a model change)."""
    return _index_embedded(conn, "TRUE", [])


def index_missing_vectors(conn: Any) -> int:
    """Live memories with a vector of the index model that the index lacks."""
    return _index_embedded(
        conn, "NOT EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_rowid = m.rowid)", []
    )


def embedding_dimensions(conn: Any, model: str) -> int | None:
    """The dimensions of some stored vector of `model`, None when there is none."""
    row = conn.execute(
        "SELECT dimensions FROM embeddings WHERE model = %s LIMIT 1", (model,)
    ).fetchone()
    return None if row is None else int(row[0])


def delete_unused_embeddings(conn: Any, namespace: str, hashes: Sequence[str]) -> int:
    """The namespace's vectors of these contents that no memory of the namespace,
    live or tombstoned, holds any more (a tombstone keeps its vector for recovery)."""
    removed = 0
    unique = list(dict.fromkeys(hashes))
    for start in range(0, len(unique), 500):
        removed += conn.execute(
            "DELETE FROM embeddings WHERE namespace = %s AND content_hash = ANY(%s) "
            # Three probes, as on SQLite, so each can use an index (the
            # live-hash and the closed-hash ones are partial).
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.is_deleted = 0 "
            "AND m.invalidated_at IS NULL "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash) "
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.invalidated_at IS NOT NULL "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash) "
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.is_deleted = 1 "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash)",
            (namespace, unique[start : start + 500]),
        ).rowcount
    return int(removed)
