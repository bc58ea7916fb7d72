"""The keyword channel's query on PostgreSQL (issue 21; not selectable yet):
BM25 over a namespace's live memories, in the same shape as the FTS5 channel's
queries (services/search/queries.py: rows of (rowid, score), best first).

`ts_rank` is not BM25 (no IDF, no document-length normalisation against the
collection), and Postgres keeps no term statistics, so they are computed in the
query from the namespace's own rows: the collection size and average length,
each query term's document frequency, and each matching memory's term
frequencies and length. That is FTS5's formula (k1 1.2, b 0.75, IDF
ln((N - n + 0.5) / (n + 0.5)) floored at 1e-6) with the namespace as the
collection, which is what the SQLite channel rescales FTS5's whole-index IDF to.
Costs grow with the namespace (every live row's length is read for the average);
bench/pg_bm25.py measures it. A term is a word of services/common/fts.py's
keyword_terms, stemmed by the same configuration that indexes content_tsv.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Query = tuple[str, list[Any]]
K1 = 1.2
B = 0.75

# A memory's length in tokens (FTS5's docsize): every position of every lexeme.
_LENGTH = "(SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest({tsv}) u)"


def bm25_top(terms: Sequence[str], namespace: str, limit: int) -> Query:
    """(rowid, BM25) of the namespace's live memories holding any of `terms`,
    best first (ties by rowid), at most `limit`."""
    sql = f"""
        WITH terms AS (
            SELECT DISTINCT lexeme FROM unnest(%s::text[]) AS t(term),
                unnest(tsvector_to_array(to_tsvector('engram_english'::regconfig, t.term)))
                    AS lexeme
        ),
        wanted AS (
            SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS q FROM terms
        ),
        collection AS (
            SELECT count(*) AS n, avg({_LENGTH.format(tsv="m.content_tsv")}) AS avgdl
            FROM memories m WHERE m.namespace = %s AND m.content_tsv IS NOT NULL
        ),
        hits AS (
            SELECT m.rowid, u.lexeme, cardinality(u.positions) AS tf,
                {_LENGTH.format(tsv="m.content_tsv")} AS dl
            FROM memories m CROSS JOIN wanted w
                CROSS JOIN LATERAL unnest(m.content_tsv) u
            WHERE m.namespace = %s AND m.content_tsv @@ w.q
                AND u.lexeme IN (SELECT lexeme FROM terms)
        ),
        idf AS (
            SELECT h.lexeme,
                greatest(ln((c.n - count(*) + 0.5) / (count(*) + 0.5)), 1e-6) AS idf
            FROM hits h CROSS JOIN collection c GROUP BY h.lexeme, c.n
        )
        SELECT h.rowid,
            sum(i.idf * h.tf * ({K1} + 1)
                / (h.tf + {K1} * (1 - {B} + {B} * h.dl / nullif(c.avgdl, 0)))) AS score
        FROM hits h JOIN idf i USING (lexeme) CROSS JOIN collection c
        GROUP BY h.rowid ORDER BY score DESC, h.rowid LIMIT %s
    """
    return (sql, [list(terms), namespace, namespace, limit])


def ts_rank_top(terms: Sequence[str], namespace: str, limit: int) -> Query:
    """(rowid, ts_rank) over the same memories and terms: the baseline BM25 replaces."""
    sql = """
        WITH wanted AS (
            SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS q
            FROM (SELECT DISTINCT lexeme FROM unnest(%s::text[]) AS t(term),
                unnest(tsvector_to_array(to_tsvector('engram_english'::regconfig, t.term)))
                    AS lexeme) terms
        )
        SELECT m.rowid, ts_rank(m.content_tsv, w.q) AS score
        FROM memories m CROSS JOIN wanted w
        WHERE m.namespace = %s AND m.content_tsv @@ w.q
        ORDER BY score DESC, m.rowid LIMIT %s
    """
    return (sql, [list(terms), namespace, limit])
