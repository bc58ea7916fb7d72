"""The keyword channel's query on PostgreSQL (issue 21): BM25 over the
searched collection (a namespace's live memories passing the filter), in the
shape of the FTS5 channel's rows (services/storage/search/queries.py: (rowid, score),
best first), with what the channel's coverage needs in the same round trip.

`ts_rank` is not BM25 (no IDF, no document-length normalisation against the
collection), so BM25 is computed here: FTS5's formula (k1 1.2, b 0.75, IDF
ln((N - n + 0.5) / (n + 0.5)) floored at 1e-6) over each matching memory's term
frequencies and length (memories.content_tokens, FTS5's docsize), with the
collection's size, average length and each term's document frequency. An
unfiltered namespace's come from the tables the store keeps exact by trigger
(pg_migrations.py `keyword_term_statistics`: one indexed read,
`kept_statistics`); like FTS5's, they count every memory the text index holds
(not deleted), where the query's live rule also drops expired and superseded
memories by the clock, so until the retention sweep purges them those weigh in
the IDF and average length as they do in FTS5's on SQLite. A filtered
collection's are counted from its own rows in the query (a pass over them).
bench/pg_bm25.py measures the query.

A term is a word of services/common/fts.py's keyword_terms (the one home of the
query's parsing), matched as FTS5 matches a quoted term: the phrase of its
lexemes (`phraseto_tsquery`), stemmed by the configuration that indexes
content_tsv. Each term is scored on its own, as FTS5 scores each phrase of an
OR query. The SQL is sqlite3-style (`?`): the read pool translates it
(services/storage/pg.py translate), the live rule's clock included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common.memory_filter import MemoryFilterSpec
from services.storage.dialect import POSTGRES
from services.storage.memory_filter_sql import filter_sql, spec_live_sql

Query = tuple[str, list[Any]]
K1 = 1.2
B = 0.75
_NOW = MemoryFilterSpec()
# Each term: its position, the phrase query FTS5's quoted term means, and its lexemes.
_TERMS = """
    SELECT t.i, phraseto_tsquery('engram_english'::regconfig, t.term) AS q,
        tsvector_to_array(to_tsvector('engram_english'::regconfig, t.term)) AS lexemes
    FROM unnest(?::text[]) WITH ORDINALITY AS t(term, i)
"""


def _collection(namespace_mark: str, spec: MemoryFilterSpec) -> tuple[str, list[Any]]:
    clauses, params = filter_sql(spec, "m", POSTGRES)
    return (
        f"m.namespace = {namespace_mark} AND m.content_tsv IS NOT NULL "
        f"AND {spec_live_sql(spec, 'm')}{clauses}",
        params,
    )


def bm25_top(
    terms: Sequence[str],
    namespace: str,
    limit: int,
    spec: MemoryFilterSpec = _NOW,
    statistics: tuple[int, float] | None = None,
    frequencies: Sequence[int] | None = None,
    required: Sequence[int] | None = None,
) -> Query:
    """The collection's memories holding any of `terms`, best first by BM25 (ties
    by rowid), at most `limit`: rows of (rowid, score, the 1-based positions in
    `terms` of the terms the memory holds, the collection's size, each term's
    document frequency in the collection, in `terms` order, the collection's
    average length). The last three are the same on every row (none when
    nothing matches). `statistics`: the collection's (size, average length), and
    `frequencies`: each term's document frequency, when the caller has them
    (kept_statistics); else they are counted here. `required` (1-based positions in `terms`, with
    `frequencies`): only memories holding one of these terms are scored (every
    term counting in their score), the common-terms cutoff Recall applies on
    both backends."""
    where, params = _collection("?", spec)
    if statistics is None:
        collection = (
            "SELECT count(*)::float8 AS n, avg(m.content_tokens)::float8 AS avgdl "
            f"FROM memories m WHERE {where}"
        )
        collection_params: list[Any] = [namespace, *params]
    else:
        collection = "SELECT ?::float8 AS n, ?::float8 AS avgdl"
        collection_params = [float(statistics[0]), float(statistics[1])]
    if frequencies is None:
        df = "SELECT i, count(*)::float8 AS df FROM hits GROUP BY i"
        df_params: list[Any] = []
    else:
        df = "SELECT i, df::float8 AS df FROM unnest(?::bigint[]) WITH ORDINALITY AS f(df, i)"
        df_params = [list(frequencies)]
    scored = "" if required is None else "AND i = ANY(?::bigint[]) "
    scored_params = [] if required is None else [list(required)]
    sql = f"""
        WITH terms AS MATERIALIZED ({_TERMS}),
        wanted AS MATERIALIZED (
            SELECT string_agg('(' || q::text || ')', ' | ')::tsquery AS q,
                ARRAY(SELECT DISTINCT l FROM terms, unnest(terms.lexemes) AS l) AS lexemes
            FROM terms WHERE numnode(q) > 0 {scored}
        ),
        collection AS MATERIALIZED ({collection}),
        matched AS MATERIALIZED (
            SELECT m.rowid, m.content_tokens::float8 AS dl,
                ts_filter(setweight(m.content_tsv, 'A', every.lexemes), '{{a}}') AS held
            FROM memories m CROSS JOIN wanted w
                CROSS JOIN (SELECT ARRAY(
                    SELECT DISTINCT l FROM terms, unnest(terms.lexemes) AS l) AS lexemes) every
            WHERE m.content_tsv @@ w.q AND {where}
        ),
        occurrences AS MATERIALIZED (
            SELECT h.rowid, h.dl, u.lexeme, cardinality(u.positions) AS n
            FROM matched h CROSS JOIN LATERAL unnest(h.held) AS u
        ),
        term_lexemes AS MATERIALIZED (
            SELECT t.i, l.lexeme, cardinality(t.lexemes) AS size
            FROM terms t CROSS JOIN LATERAL unnest(t.lexemes) AS l(lexeme)
        ),
        hits AS MATERIALIZED (
            SELECT o.rowid, min(o.dl) AS dl, t.i, min(o.n)::float8 AS tf
            FROM occurrences o JOIN term_lexemes t ON t.lexeme = o.lexeme
            GROUP BY o.rowid, t.i, t.size HAVING count(*) = t.size
        ),
        df AS MATERIALIZED ({df}),
        frequencies AS MATERIALIZED (
            SELECT array_agg(coalesce(d.df, 0)::bigint ORDER BY t.i) AS dfs
            FROM terms t LEFT JOIN df d ON d.i = t.i
        ),
        top AS MATERIALIZED (
            SELECT h.rowid,
                sum(greatest(ln((c.n - d.df + 0.5) / (d.df + 0.5)), 1e-6) * h.tf * ({K1} + 1)
                    / (h.tf + {K1} * (1 - {B} + {B} * h.dl / nullif(c.avgdl, 0)))) AS score,
                array_agg(h.i ORDER BY h.i) AS held
            FROM hits h JOIN df d ON d.i = h.i CROSS JOIN collection c
            GROUP BY h.rowid ORDER BY score DESC, h.rowid LIMIT ?
        )
        SELECT s.rowid, s.score, s.held, c.n::bigint AS n, f.dfs, c.avgdl
        FROM top s CROSS JOIN collection c CROSS JOIN frequencies f
        ORDER BY s.score DESC, s.rowid
    """
    return (
        sql,
        [
            list(terms),
            *scored_params,
            *collection_params,
            namespace,
            *params,
            *df_params,
            limit,
        ],
    )


def kept_statistics(terms: Sequence[str], namespace: str) -> Query:
    """One row: (memories the namespace's text index holds, their average length,
    each term's document frequency in `terms` order), from the kept tables. A
    term of one lexeme is its lexeme's row; a term of several (a phrase, rare:
    keyword_terms splits at punctuation) is counted over the namespace's
    indexed memories, the tables' rule; a term of none matches nothing."""
    sql = f"""
        WITH terms AS MATERIALIZED ({_TERMS})
        SELECT coalesce(max(s.documents), 0),
            coalesce(max(s.tokens)::float8 / nullif(max(s.documents), 0), 0),
            ARRAY(
                SELECT CASE
                    WHEN numnode(t.q) = 0 THEN 0
                    WHEN numnode(t.q) = 1 THEN coalesce((
                        SELECT k.documents FROM namespace_terms k
                        WHERE k.namespace = ? AND k.lexeme = t.lexemes[1]), 0)
                    ELSE (SELECT count(*) FROM memories m
                        WHERE m.namespace = ? AND m.content_tsv @@ t.q)
                END
                FROM terms t ORDER BY t.i)
        FROM namespace_text_totals s WHERE s.namespace = ?
    """
    return (sql, [list(terms), namespace, namespace, namespace])


def ts_rank_top(
    terms: Sequence[str], namespace: str, limit: int, spec: MemoryFilterSpec = _NOW
) -> Query:
    """(rowid, ts_rank) over the same memories and terms: the baseline BM25 replaces."""
    where, params = _collection("?", spec)
    sql = f"""
        WITH terms AS ({_TERMS}),
        wanted AS (
            SELECT string_agg('(' || q::text || ')', ' | ')::tsquery AS q
            FROM terms WHERE numnode(q) > 0
        )
        SELECT m.rowid, ts_rank(m.content_tsv, w.q) AS score
        FROM memories m CROSS JOIN wanted w
        WHERE m.content_tsv @@ w.q AND {where}
        ORDER BY score DESC, m.rowid LIMIT ?
    """
    return (sql, [list(terms), namespace, *params, limit])
