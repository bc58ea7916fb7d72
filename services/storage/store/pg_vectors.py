"""The vector index's SQL on PostgreSQL (issue 21): the repository's vector
functions whose SQL cannot be shared, under the same names and with the same
meaning, on the store's connection (services/storage/pg.py SqliteApi; the
caller's transaction). services/storage/store/repository.py's functions of these names
call them when the connection is a Postgres one, so callers never pick. The others (index_model,
clear_vector_index, upsert_embedding, embedding_dimensions,
delete_unused_embeddings) run from services/storage/store/repository.py on both backends.

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

from services.storage.pg import translate
from services.storage.pg_migrations import fix_vector_dimensions
from services.storage.store.vector_index import EMBEDDING_OF_MEMORY, record_index_model

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
    record_index_model(conn, model, dimensions, at)
    if _column_dimensions(conn) != dimensions:
        fix_vector_dimensions(conn, dimensions)


def _index_embedded(conn: Any, where: str, params: Sequence[Any]) -> int:
    """Put live memories matching `where` (over alias m) that have an embedding
    of the index model in their namespace into the vector index; returns how
    many rows were written."""
    written = 0
    # One pass over the rows (a server-side cursor), written back in chunks.
    raw = conn.raw  # psycopg's own cursors: a server-side one, and binary halfvec parameters
    with raw.cursor(name="engram_index_embedded") as rows, raw.cursor() as writes:
        writes.adapters.register_dumper(Halfvec, _HalfvecDumper)
        rows.execute(
            translate(
                "SELECT m.rowid, m.namespace, e.vector FROM memories m "
                f"JOIN vector_index vi ON vi.id = 1 JOIN embeddings e ON {EMBEDDING_OF_MEMORY} "
                f"WHERE m.is_deleted = 0 AND ({where})"
            ),
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
        written += _index_embedded(conn, "m.id = ANY(?)", [chunk])
        conn.execute(
            "UPDATE memories SET embedding_model = (SELECT model FROM vector_index WHERE id = 1) "
            "WHERE id = ANY(?) AND rowid IN (SELECT memory_rowid FROM memory_vectors)",
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
