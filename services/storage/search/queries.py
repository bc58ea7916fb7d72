"""All of the search service's SQL (read-only). Filters come from the one
filter builder and are applied inside every channel, before its LIMIT.

Every query that reads memory rows names the caller's namespace, even for rowids
a namespace-confined query proposed: a rowid is only a proposal (the whole-index
keyword query and the vector cache do not check the namespace) until its row is
read under the namespace.

Builders whose SQL differs on PostgreSQL (issue 21) take the read pool's
`dialect` (services/storage/dialect.py): the `+` plan guards, the filter's JSON
arrays, the decay clock; the keyword and vector channels there are
services/storage/search/pg_text.py and pg_vectors.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common import forgetting, restatement
from services.common.memory_filter import MemoryFilterSpec
from services.storage.dialect import SQLITE, Dialect
from services.storage.memory_filter_sql import NOW_SQL, filter_sql, live_sql, spec_live_sql
from services.storage.schema import memory_columns

Query = tuple[str, list[Any]]
_NOW = MemoryFilterSpec()  # valid now, no filter

# services/storage/schema.py's column list, with the rowid every channel keys memories by
MEMORY_COLUMNS = "m.rowid AS rowid, " + memory_columns("m")


def marks(values: Sequence[Any]) -> str:
    """An IN list's placeholders, one per value; `NULL` for no values: an empty
    IN list is SQLite's extension, which Postgres refuses, and `IN (NULL)`
    matches nothing on both."""
    return ", ".join("?" * len(values)) or "NULL"


def index_model() -> Query:
    return ("SELECT model, dimensions FROM vector_index WHERE id = 1", [])


def live_count(
    namespace: str | None, spec: MemoryFilterSpec, *, dialect: Dialect = SQLITE
) -> Query:
    """Size of the collection a query searches (all live memories when namespace is None)."""
    if namespace is None:
        return (f"SELECT count(*) FROM memories m WHERE {live_sql('m')}", [])
    clauses, params = filter_sql(spec, "m", dialect)
    return (
        f"SELECT count(*) FROM memories m WHERE m.namespace = ? AND {spec_live_sql(spec, 'm')}{clauses}",
        [namespace, *params],
    )


def namespace_is_whole_index(namespace: str) -> Query:
    """True when every live memory is in this namespace (index seeks, not counts).
    SQLite's channels only: what lets them use FTS5's whole-index statistics."""
    other = "SELECT 1 FROM memories m WHERE m.namespace {op} ? AND " + live_sql("m", keep_plan=True)
    return (
        f"SELECT NOT EXISTS ({other.format(op='<')}) AND NOT EXISTS ({other.format(op='>')})",
        [namespace, namespace],
    )


def adjacent_pairs(namespace: str, pairs: Sequence[tuple[int, int]]) -> Query:
    """The (lower, higher) rowid pairs with no live memory of the namespace between them."""
    values = ", ".join("(?, ?)" for _ in pairs)
    return (
        f"WITH p(a, b) AS (VALUES {values}) SELECT a, b FROM p WHERE NOT EXISTS ("
        f"SELECT 1 FROM memories m WHERE m.namespace = ? AND {live_sql('m')} "
        "AND m.rowid > p.a AND m.rowid < p.b)",
        [*(x for pair in pairs for x in pair), namespace],
    )


def term_document_count(term_match: str) -> Query:
    """Documents containing a term across the whole index (FTS5's own statistic)."""
    return ("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", [term_match])


def terms_in_memory(term_matches: list[str], rowid: int) -> Query:
    """Which of the terms (MATCH strings) one memory's indexed content holds."""
    part = "SELECT ? FROM memories_fts WHERE memories_fts MATCH ? AND rowid = ?"
    return (
        " UNION ALL ".join([part] * len(term_matches)),
        [x for m in term_matches for x in (m, m, rowid)],
    )


def whole_index_keyword_top(match: str, limit: int) -> Query:
    """FTS5's own BM25 ranking: right when the searched collection is the whole index."""
    return (
        "SELECT rowid, -bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? "
        "ORDER BY rank LIMIT ?",
        [match, limit],
    )


def _term_rows(namespace: str, spec: MemoryFilterSpec) -> tuple[str, list[Any]]:
    clauses, params = filter_sql(spec, "m")
    # CROSS JOIN keeps the FTS match as the outer loop (one pass over the term's
    # doclist) instead of one FTS probe per namespace row.
    return (
        "FROM memories_fts f CROSS JOIN memories m ON m.rowid = f.rowid "
        "WHERE memories_fts MATCH ? AND m.namespace = ? "
        f"AND {spec_live_sql(spec, 'm')}{clauses}",
        [namespace, *params],
    )


def term_collection_count(term_match: str, namespace: str, spec: MemoryFilterSpec) -> Query:
    """How many memories of the namespace (and filter) contain the term."""
    rows, params = _term_rows(namespace, spec)
    return (f"SELECT count(*) {rows}", [term_match, *params])


def weighted_keyword_top(
    weighted_terms: list[tuple[str, float]], namespace: str, spec: MemoryFilterSpec, limit: int
) -> Query:
    """BM25 re-weighted per term (FTS5's single-term score times the weight),
    summed per memory and ranked, all inside SQLite."""
    rows, params = _term_rows(namespace, spec)
    if len(weighted_terms) == 1:  # (SQLite would flatten a one-part subquery, and bm25()
        [(match, weight)] = weighted_terms  # cannot run inside the aggregate)
        return (
            f"SELECT f.rowid, -bm25(memories_fts) * ? AS score {rows} ORDER BY score DESC LIMIT ?",
            [weight, match, *params, limit],
        )
    parts: list[str] = []
    args: list[Any] = []
    for match, weight in weighted_terms:
        parts.append(f"SELECT f.rowid AS rowid, -bm25(memories_fts) * ? AS s {rows}")
        args.extend([weight, match, *params])
    return (
        f"SELECT rowid, sum(s) AS score FROM ({' UNION ALL '.join(parts)}) "
        "GROUP BY rowid ORDER BY score DESC LIMIT ?",
        [*args, limit],
    )


def vector_candidates(
    query_bits_f32: bytes, namespace: str, spec: MemoryFilterSpec, limit: int, whole_index: bool
) -> Query:
    """First pass: Hamming distance between sign-bit vectors (sqlite-vec)."""
    distance = "vec_distance_hamming(vec_bit(v.bits), vec_quantize_binary(vec_f32(?)))"
    if whole_index and spec.is_empty():  # a plain scan beats one index lookup per row
        return (  # (`+` keeps the scan; the namespace check stays)
            f"SELECT v.memory_rowid, {distance} AS d FROM memory_vectors v "
            "WHERE +v.namespace = ? ORDER BY d LIMIT ?",
            [query_bits_f32, namespace, limit],
        )
    if spec.is_empty():
        return (
            f"SELECT v.memory_rowid, {distance} AS d FROM memory_vectors v "
            "WHERE v.namespace = ? ORDER BY d LIMIT ?",
            [query_bits_f32, namespace, limit],
        )
    clauses, params = filter_sql(spec, "m")
    return (
        f"SELECT v.memory_rowid, {distance} AS d FROM memory_vectors v "
        "JOIN memories m ON m.rowid = v.memory_rowid "
        f"WHERE v.namespace = ? AND {spec_live_sql(spec, 'm')}{clauses} "
        "ORDER BY d LIMIT ?",
        [query_bits_f32, namespace, *params, limit],
    )


def exact_vector_candidates(
    query_f32: bytes, model: str, namespace: str, spec: MemoryFilterSpec, limit: int
) -> Query:
    """Exact float32 cosine over the whole (filtered) namespace: the reference."""
    clauses, params = filter_sql(spec, "m")
    return (
        "SELECT v.memory_rowid, vec_distance_cosine(vec_f32(e.vector), vec_f32(?)) AS d "
        "FROM memory_vectors v JOIN memories m ON m.rowid = v.memory_rowid "
        "JOIN embeddings e ON e.namespace = m.namespace AND e.content_hash = m.content_hash "
        "AND e.model = ? "
        f"WHERE v.namespace = ? AND {spec_live_sql(spec, 'm')}{clauses} "
        "ORDER BY d LIMIT ?",
        [query_f32, model, namespace, *params, limit],
    )


def pool_rows(
    namespace: str,
    rowids: Sequence[int],
    model: str,
    spec: MemoryFilterSpec = _NOW,
    *,
    dialect: Dialect = SQLITE,
    parts: bool = True,
) -> Query:
    """Pool members with what fusion needs: event time, the exact vector (NULL
    when not embedded), `who` (intent routing) and the sentence vectors
    (services/common/vectors.py normalized_parts_f16; NULL for one sentence, or
    not read when `parts` is False); live memories of the namespace only."""
    listed, guard = marks(rowids), dialect.plan_guard
    return (
        f"SELECT m.rowid, m.event_time, e.vector, m.who, {'e.parts' if parts else 'NULL'} "
        "FROM memories m LEFT JOIN embeddings e ON e.namespace = m.namespace "
        "AND e.content_hash = m.content_hash AND e.model = ? "
        # `+` on the live rule's columns and the namespace keeps the planner on
        # the rowid lookups.
        f"WHERE m.rowid IN ({listed}) AND {spec_live_sql(spec, 'm', keep_plan=bool(guard))} "
        f"AND {guard}m.namespace = ?",
        [model, *rowids, namespace],
    )


def memories_by_rowid(
    namespace: str,
    rowids: Sequence[int],
    spec: MemoryFilterSpec = _NOW,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """Live memories of the namespace among `rowids` (valid at the spec's
    instant and ranges, services/storage/memory_filter_sql.py live_sql)."""
    listed, guard = marks(rowids), dialect.plan_guard
    return (
        f"SELECT {MEMORY_COLUMNS} FROM memories m "
        f"WHERE m.rowid IN ({listed}) AND {spec_live_sql(spec, 'm', keep_plan=bool(guard))} "
        f"AND {guard}m.namespace = ?",
        [*rowids, namespace],
    )


def restatements(namespace: str, memory_ids: Sequence[str]) -> Query:
    """(memory id, metadata, recorded at) of these memories' `restated` events
    (services/common/restatement.py)."""
    return (
        "SELECT memory_id, metadata, created_at FROM memory_history "
        f"WHERE namespace = ? AND memory_id IN ({marks(memory_ids)}) AND event = ?",
        [namespace, *memory_ids, restatement.RESTATED_EVENT],
    )


def importance_by_rowid(
    namespace: str, rowids: Sequence[int], *, dialect: Dialect = SQLITE
) -> Query:
    """(rowid, importance) of these memories, for importance ranking."""
    listed = marks(rowids)
    return (
        f"SELECT m.rowid, m.importance FROM memories m WHERE m.rowid IN ({listed}) "
        f"AND {dialect.plan_guard}m.namespace = ?",
        [*rowids, namespace],
    )


def contents(namespace: str, rowids: Sequence[int], *, dialect: Dialect = SQLITE) -> Query:
    """(rowid, content) of the namespace's memories among `rowids`."""
    listed = marks(rowids)
    return (
        f"SELECT m.rowid, m.content FROM memories m WHERE m.rowid IN ({listed}) "
        f"AND {dialect.plan_guard}m.namespace = ?",
        [*rowids, namespace],
    )


def in_time_windows(
    namespace: str,
    windows: Sequence[tuple[str, str]],
    spec: MemoryFilterSpec,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """Rowids of live memories of the namespace, passing the filter, whose event
    time falls in any of the half-open `windows`, latest first."""
    clauses, params = filter_sql(spec, "m", dialect)
    ranges = " OR ".join("(m.event_time >= ? AND m.event_time < ?)" for _ in windows)
    return (
        f"SELECT m.rowid FROM memories m WHERE m.namespace = ? "
        f"AND {spec_live_sql(spec, 'm')}{clauses} AND ({ranges}) "
        "ORDER BY m.event_time DESC, m.rowid DESC LIMIT ?",
        [namespace, *params, *(t for w in windows for t in w), limit],
    )


def closed_valid_in_windows(
    namespace: str, spec: MemoryFilterSpec, limit: int, *, dialect: Dialect = SQLITE
) -> Query:
    """(rowid, event_time) of the namespace's memories passing the filter that
    are no longer valid but were during one of the spec's `valid_during`
    ranges (the live rule's own widening), latest end first."""
    clauses, params = filter_sql(spec, "m", dialect)
    return (
        "SELECT m.rowid, m.event_time FROM memories m WHERE m.namespace = ? "
        f"AND m.valid_until IS NOT NULL AND m.valid_until <= {NOW_SQL} "
        f"AND {spec_live_sql(spec, 'm')}{clauses} "
        "ORDER BY m.valid_until DESC, m.rowid DESC LIMIT ?",
        [namespace, *params, limit],
    )


def decay_inputs(
    namespace: str,
    rowids: Sequence[int],
    default_rate: float,
    now: str,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """rowid, importance, pinned, last_accessed, created_at and the seed 003
    current confidence at `now` (services/common/forgetting.py) for decay ranking."""
    listed = marks(rowids)
    current, params = forgetting.current_confidence_sql("m", default_rate, now, dialect=dialect)
    return (
        "SELECT m.rowid AS rowid, m.importance, m.pinned, m.last_accessed, m.created_at, "
        f"{current} AS current_confidence "
        f"FROM memories m WHERE m.rowid IN ({listed}) AND {dialect.plan_guard}m.namespace = ?",
        [*params, *rowids, namespace],
    )
