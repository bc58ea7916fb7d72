"""The keyword channel's query on PostgreSQL (issue 21; not selectable yet):
BM25 over a namespace's live memories, in the same shape as the FTS5 channel's
queries (services/search/queries.py: rows of (rowid, score), best first).

`ts_rank` is not BM25 (no IDF, no document-length normalisation against the
collection), and Postgres keeps no term statistics, so they are computed in the
query from the namespace's own rows: the collection size and average length,
each query term's document frequency, and each matching memory's term
frequencies and length (memories.content_tokens, FTS5's docsize). That is FTS5's formula (k1 1.2, b 0.75, IDF
ln((N - n + 0.5) / (n + 0.5)) floored at 1e-6) with the namespace as the
collection, which is what the SQLite channel rescales FTS5's whole-index IDF to.
Costs grow with the namespace (every live row's length is read for the average:
a per-namespace statistics table is the next step at scale); bench/pg_bm25.py
measures it. A term is a word of services/common/fts.py's
keyword_terms, stemmed by the same configuration that indexes content_tsv.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Query = tuple[str, list[Any]]
K1 = 1.2
B = 0.75
# The terms' lexemes (stemmed as content_tsv is) and the tsquery matching any of them.
_WANTED = """
    SELECT array_agg(lexeme) AS lexemes,
        string_agg(quote_literal(lexeme), ' | ')::tsquery AS q
    FROM (
        SELECT DISTINCT lexeme FROM unnest(%s::text[]) AS t(term),
            unnest(tsvector_to_array(to_tsvector('engram_english'::regconfig, t.term))) AS lexeme
    ) terms
"""


def bm25_top(terms: Sequence[str], namespace: str, limit: int) -> Query:
    """(rowid, BM25) of the namespace's live memories holding any of `terms`,
    best first (ties by rowid), at most `limit`."""
    sql = f"""
        WITH wanted AS MATERIALIZED ({_WANTED}),
        collection AS MATERIALIZED (
            SELECT count(*)::float8 AS n, avg(m.content_tokens)::float8 AS avgdl
            FROM memories m WHERE m.namespace = %s AND m.content_tsv IS NOT NULL
        ),
        hits AS (
            SELECT m.rowid, cardinality(u.positions)::float8 AS tf,
                m.content_tokens::float8 AS dl,
                count(*) OVER (PARTITION BY u.lexeme)::float8 AS df
            FROM memories m CROSS JOIN wanted w CROSS JOIN LATERAL unnest(m.content_tsv) u
            WHERE m.namespace = %s AND m.content_tsv @@ w.q AND u.lexeme = ANY(w.lexemes)
        )
        SELECT h.rowid,
            sum(greatest(ln((c.n - h.df + 0.5) / (h.df + 0.5)), 1e-6) * h.tf * ({K1} + 1)
                / (h.tf + {K1} * (1 - {B} + {B} * h.dl / nullif(c.avgdl, 0)))) AS score
        FROM hits h CROSS JOIN collection c
        GROUP BY h.rowid ORDER BY score DESC, h.rowid LIMIT %s
    """
    return (sql, [list(terms), namespace, namespace, limit])


def ts_rank_top(terms: Sequence[str], namespace: str, limit: int) -> Query:
    """(rowid, ts_rank) over the same memories and terms: the baseline BM25 replaces."""
    sql = f"""
        WITH wanted AS ({_WANTED})
        SELECT m.rowid, ts_rank(m.content_tsv, w.q) AS score
        FROM memories m CROSS JOIN wanted w
        WHERE m.namespace = %s AND m.content_tsv @@ w.q
        ORDER BY score DESC, m.rowid LIMIT %s
    """
    return (sql, [list(terms), namespace, limit])
