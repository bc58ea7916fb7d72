"""Recall latency at 10k and 100k memories in one namespace, each figure next to
a raw-SQL floor measured in the same run on the same file; the vector channel
alone at 1M; and the accuracy of the binary-quantised vector first pass.

    PYTHONPATH=.:gen .venv/bin/python bench/recall_latency.py [--rebuild]
        [--sizes 10000,100000] [--queries 300] [--grpc-queries 100]
        [--million 1000000 | --million 0] [--breakdown] [--profile] [--build-only]
        [--compare-decompose W]

What is timed
  recall, cached vector: Recaller.recall(namespace, question, 10) in-process
    (ReadPool, QueryEmbedder(LocalEmbedding()), recall_params(load_config())),
    with the query's vector already in the QueryEmbedder's cache (filled in the
    warm-up): keyword channel (with its common-terms cutoff), Hamming first pass
    (the in-memory VectorCache, as the search service runs it; loaded in the
    warm-up), pool + exact rescore, fusion, boosts, selection and the final row
    fetch. No access tracking, no reranker.
    Also reported: the questions services.search.decompose splits, alone, and
    the process's CPU time per Recall (every thread); --compare-decompose W times
    a second Recaller at search.decompose_weight W, alternating with the
    configured one query by query.
  recall, with embedding: the same with a QueryEmbedder whose cache is off, so
    each query is embedded by the local MiniLM inside the timed call.
  floor: one read-only connection, no Python scoring: one FTS5 OR query over
    the query's keyword terms (`SELECT rowid, bm25(memories_fts) ... MATCH ?
    ORDER BY rank LIMIT 100`), one sqlite-vec query doing what recall's vector
    channel does (Hamming first pass over memory_vectors LIMIT 400, then exact
    float32 vec_distance_cosine of those 400 against `embeddings`, LIMIT 100),
    an interleaving merge of the two lists, and a fetch of the top 10 rows.
    With embedding, the floor embeds the query with the same provider first.
  gRPC: the Recall round trip to a `serve search` process over the 100k file;
    first pass with an empty server-side cache (the server embeds), second
    pass over the same questions (the server's cache holds their vectors).
  1M: the vector channel alone (Recaller._vector_candidates, the Hamming first
    pass from the VectorCache, then Recaller._pool: the rows and exact float32
    rescore of the 400 candidates) against the same single-SQL floor. The
    cache's first load of the namespace is timed separately.

The floor stays raw SQL (FTS5 OR query, sqlite-vec scan): it is the reference
for what SQLite alone costs, so recall can now be below it.

Data: see bench/latency_data.py; databases are cached in /tmp/engram-latency.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import io
import json
import math
import os
import pstats
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import grpc  # noqa: E402
import latency_data as data  # noqa: E402
import provenance  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from services.common.config import load_config  # noqa: E402
from services.common.memory_filter import MemoryFilterSpec  # noqa: E402
from services.common.providers.embedding import LOCAL_MODEL, LocalEmbedding, NoEmbedding  # noqa: E402
from services.common.providers.local_embedding import local_embedding  # noqa: E402
from services.common.vectors import normalized_f32  # noqa: E402
from services.search import decompose  # noqa: E402
from services.search import recall as recall_module  # noqa: E402
from services.search.app import recall_params  # noqa: E402
from services.search.embedder import QueryEmbedder  # noqa: E402
from services.search.recall import Found, Recaller, RecallParams  # noqa: E402
from services.search.scoring import Candidate  # noqa: E402
from services.search.text import keyword_terms  # noqa: E402
from services.search.vector_cache import VectorCache  # noqa: E402
from services.storage.db import ReadPool, open_read_only  # noqa: E402
from services.storage.search import queries as search_sql  # noqa: E402
from suite import free_port, wait_serving  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path("/tmp/engram-latency")
RESULTS = ROOT / "bench" / "results"
NS = data.NAMESPACE
NO_FILTER = MemoryFilterSpec()
TARGETS = {  # (size, mode) -> {stat: ms}
    (100_000, "cached vector"): {"p50": 30.0, "p95": 60.0},
    (100_000, "with embedding"): {"p50": 50.0},
    (1_000_000, "vector channel"): {"p50": 150.0},
}

FLOOR_KEYWORD = "SELECT rowid, bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT 100"
FLOOR_VECTOR = (
    "WITH first AS (SELECT memory_rowid, "
    "vec_distance_hamming(vec_bit(bits), vec_quantize_binary(vec_f32(?1))) AS d "
    "FROM memory_vectors WHERE namespace = ?2 ORDER BY d LIMIT ?3) "
    "SELECT first.memory_rowid, vec_distance_cosine(vec_f32(e.vector), vec_f32(?1)) AS cd "
    "FROM first CROSS JOIN memories m ON m.rowid = first.memory_rowid "
    "JOIN embeddings e ON e.namespace = m.namespace AND e.content_hash = m.content_hash "
    "AND e.model = ?4 ORDER BY cd LIMIT 100"
)


def percentile(values: list[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.50),
        "p95": percentile(values, 0.95),
        "mean": sum(values) / len(values),
        "max": max(values),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---- the floor -------------------------------------------------------------------------


class Floor:
    def __init__(self, path: Path, candidates: int) -> None:
        self.path = path
        self.conn = open_read_only(path)
        self.candidates = candidates
        self._second: Any = None
        self._threads: ThreadPoolExecutor | None = None

    def vector(self, query_f32: bytes) -> list[int]:
        rows = self.conn.execute(
            FLOOR_VECTOR, (query_f32, NS, self.candidates, LOCAL_MODEL)
        ).fetchall()
        return [r[0] for r in rows]

    def keyword(self, query: str, conn: Any = None) -> list[int]:
        terms = keyword_terms(query)
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        return [r[0] for r in (conn or self.conn).execute(FLOOR_KEYWORD, (match,)).fetchall()]

    def run(self, query: str, query_f32: bytes | None) -> list[Any]:
        keyword = self.keyword(query)
        vector = self.vector(query_f32) if query_f32 is not None else []
        return self._merge(keyword, vector)

    def run_parallel(self, query: str, query_f32: bytes) -> list[Any]:
        """The same work, the FTS query on a second connection in a second thread
        (SQLite releases the GIL), as recall overlaps its channels."""
        if self._second is None:
            self._second = open_read_only(self.path)
            self._threads = ThreadPoolExecutor(1)
        keyword = self._threads.submit(self.keyword, query, self._second)  # type: ignore[union-attr]
        vector = self.vector(query_f32)
        return self._merge(keyword.result(), vector)

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
            self._second.close()
        self.conn.close()

    def _merge(self, keyword: list[int], vector: list[int]) -> list[Any]:
        merged: dict[int, None] = {}
        for pair in zip(keyword, vector, strict=False):
            merged.update(dict.fromkeys(pair))
        merged.update(dict.fromkeys(keyword + vector))
        top = list(merged)[:10]
        return self.conn.execute(*search_sql.memories_by_rowid(NS, top)).fetchall() if top else []


# ---- in-process recall ---------------------------------------------------------------


class StagedRecaller(Recaller):
    """Recaller with per-stage wall times (used only in the breakdown pass)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stages: dict[str, list[float]] = defaultdict(list)
        # the channel objects' own entry points, timed on this instance
        self.keyword.ranked = self._timed("keyword channel", self.keyword.ranked)  # type: ignore[method-assign]
        self.vector.nearest = self._timed("vector first pass", self.vector.nearest)  # type: ignore[method-assign]

    def _timed(self, stage: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            result = await method(*args, **kwargs)
            self.stages[stage].append((time.perf_counter() - t0) * 1000)
            return result

        return timed

    async def _pool(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        result = await super()._pool(*args, **kwargs)
        self.stages["pool rows + rescore"].append((time.perf_counter() - t0) * 1000)
        return result


async def cpu_timed(recaller: Recaller, query: str, cpu_ms: list[float]) -> tuple[float, Any]:
    """timed_recall, with the process's CPU milliseconds appended to `cpu_ms`."""
    cpu = time.process_time()
    ms, outcome = await timed_recall(recaller, query)
    cpu_ms.append((time.process_time() - cpu) * 1000)
    return ms, outcome


async def timed_recall(recaller: Recaller, query: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    outcome = await recaller.recall(NS, query, 10, NO_FILTER)
    return (time.perf_counter() - t0) * 1000, outcome


async def vector_channel(
    recaller: Recaller, vector: list[float], spec: MemoryFilterSpec = NO_FILTER
) -> tuple[list[Candidate], float, float]:
    """The vector channel alone, as Recall runs it on one namespace: the first pass
    (the vector cache), then the pool's rows and exact float32 rescore. Returns the
    pool and the two stages' milliseconds (the snapshot and scope are read first,
    outside both)."""
    async with recaller._reads.snapshot() as reads:
        scope = await recaller.scope(reads, NS, spec)
        t0 = time.perf_counter()
        candidates = await recaller.vector.nearest(scope, normalized_f32(vector))  # type: ignore[arg-type]
        t1 = time.perf_counter()
        pool = await recaller._pool(scope, Found(vector_candidates=candidates, vector=vector))
        t2 = time.perf_counter()
    return pool, (t1 - t0) * 1000, (t2 - t1) * 1000


async def vector_top(recaller: Recaller, vector: list[float], k: int = 10) -> list[int]:
    """The vector channel's own ranking (first pass, then exact rescore), top k."""
    pool, _, _ = await vector_channel(recaller, vector)
    ranked = sorted((c for c in pool if c.vector_rank), key=lambda c: c.vector_rank)
    return [c.rowid for c in ranked[:k]]


def evidence_recall(ranked: list[int], evidence: list[int]) -> float:
    return len(set(ranked[:10]) & set(evidence)) / len(evidence)


async def measure_size(
    size: int,
    path: Path,
    provider: LocalEmbedding,
    questions: list[dict[str, Any]],
    warm: list[dict[str, Any]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    params = recall_params(load_config(None))
    reads = ReadPool(path)
    await reads.open()
    cached = QueryEmbedder(provider, cache_size=len(questions) + len(warm) + 10)
    uncached = QueryEmbedder(provider, cache_size=0)
    vector_cache = VectorCache(path)
    recaller = Recaller(reads, cached, params, vector_cache=vector_cache)
    embedding_recaller = Recaller(reads, uncached, params, vector_cache=vector_cache)
    floor = Floor(path, params.vector_candidates)
    result: dict[str, Any] = {"size": size, "db": str(path), "db_bytes": path.stat().st_size}
    rowid_of = {
        r[1]: r[0]
        for r in floor.conn.execute(
            "SELECT rowid, source_id FROM memories WHERE source_type = 'locomo'"
        )
    }
    texts = [q["question"] for q in questions]
    vectors: dict[str, list[float]] = {}
    for q in [*warm, *questions]:  # fills the cached embedder
        # (a query embedding slower than the 2 s timeout opens a 5 s circuit: wait it out)
        while (vector := await cached.embed(q["question"])) is None:
            await asyncio.sleep(6)
        vectors[q["question"]] = vector
    blobs = {q: normalized_f32(v) for q, v in vectors.items()}

    # warm-up: the page cache, the model, every code path; also checks recall is hybrid
    result["load_before"] = load_average()
    for q in [*(w["question"] for w in warm), *texts]:
        _, outcome = await timed_recall(recaller, q)
        if outcome.degraded or outcome.warnings:
            raise RuntimeError(f"recall is degraded during warm-up: {outcome.warnings}")
        floor.run(q, blobs[q])
    for w in warm:
        await timed_recall(embedding_recaller, w["question"])
        await provider.embed([w["question"]])

    # the other decomposition weight, timed beside recall in the same loop (--compare-decompose)
    compared: Recaller | None = None
    if args.compare_decompose is not None:
        other = dataclasses.replace(params, decompose_weight=args.compare_decompose)
        compared = Recaller(reads, cached, other, vector_cache=vector_cache)
        for q in [*(w["question"] for w in warm), *texts]:
            await timed_recall(compared, q)

    # cached vector: recall and floor interleaved per query (alternating order)
    recall_ms: list[float] = []
    floor_ms: list[float] = []
    compared_ms: list[float] = []
    # the process's CPU time (every thread) per call: what the work costs, apart from the load
    recall_cpu: list[float] = []
    compared_cpu: list[float] = []
    hybrid_r10: list[float] = []
    for i, q in enumerate(questions):
        text = q["question"]

        def run_floor(text: str = text) -> float:
            t0 = time.perf_counter()
            floor.run(text, blobs[text])
            return (time.perf_counter() - t0) * 1000

        if i % 2:
            floor_ms.append(run_floor())
        if compared is not None and i % 2:
            compared_ms.append((await cpu_timed(compared, text, compared_cpu))[0])
        ms, outcome = await cpu_timed(recaller, text, recall_cpu)
        recall_ms.append(ms)
        if compared is not None and not i % 2:
            compared_ms.append((await cpu_timed(compared, text, compared_cpu))[0])
        if not i % 2:
            floor_ms.append(run_floor())
        evidence = [rowid_of[e] for e in q.get("evidence_ids", []) if e in rowid_of]
        if evidence:
            ranked = [rowid_of.get(h.memory.source_id, -1) for h in outcome.hits]
            hybrid_r10.append(evidence_recall(ranked, evidence))
    result["cached vector"] = {
        "recall": summary(recall_ms),
        "floor": summary(floor_ms),
        "decompose_weight": params.decompose_weight,
        "recall process CPU": summary(recall_cpu),
    }
    # the questions services.search.decompose splits (at the configured rules), alone
    split = [i for i, text in enumerate(texts) if decompose.parts(text, params.decompose_rules)]
    if split:
        result["cached vector"]["questions split"] = {
            "recall": summary([recall_ms[i] for i in split]),
            "floor": summary([floor_ms[i] for i in split]),
            "recall process CPU": summary([recall_cpu[i] for i in split]),
        }
    if compared is not None:
        weight = f"decompose_weight {args.compare_decompose:g}"
        result["cached vector"][weight] = {
            "recall": summary(compared_ms),
            "recall process CPU": summary(compared_cpu),
        }
        if split:
            result["cached vector"][weight]["questions split"] = summary(
                [compared_ms[i] for i in split]
            )
            result["cached vector"][weight]["questions split, process CPU"] = summary(
                [compared_cpu[i] for i in split]
            )
    result["hybrid_evidence_R@10"] = sum(hybrid_r10) / len(hybrid_r10) if hybrid_r10 else None

    # with embedding: every query embedded inside the timed call (recall and floor)
    recall_ms, floor_ms, embed_ms, degraded = [], [], [], 0
    for i, q in enumerate(questions):
        text = q["question"]

        async def run_floor(text: str = text) -> float:
            t0 = time.perf_counter()
            [vector] = await provider.embed([text])
            embed_ms.append((time.perf_counter() - t0) * 1000)
            floor.run(text, normalized_f32(vector))
            return (time.perf_counter() - t0) * 1000

        if i % 2:
            floor_ms.append(await run_floor())
        ms, outcome = await timed_recall(embedding_recaller, text)
        degraded += outcome.degraded
        recall_ms.append(ms)
        if not i % 2:
            floor_ms.append(await run_floor())
    result["with embedding"] = {
        "recall": summary(recall_ms),
        "floor": summary(floor_ms),
        "query embedding alone (in the floor)": summary(embed_ms),
        "degraded_answers": degraded,
    }
    result["load_after"] = load_average()

    if args.breakdown:
        result["breakdown"] = await breakdown(reads, cached, params, questions, floor, vector_cache)
    result["quantisation"] = await quantisation(
        reads, cached, params, questions, vectors, rowid_of, args, vector_cache
    )
    if args.profile:
        result["profile"] = await profile(recaller, texts[: args.profile_queries])
    floor.close()
    await vector_cache.close()
    await reads.close()
    return result


async def breakdown(
    reads: ReadPool,
    embedder: QueryEmbedder,
    params: RecallParams,
    questions: list[dict[str, Any]],
    floor: Floor,
    vector_cache: VectorCache,
) -> dict[str, Any]:
    """Per-stage times (a separate pass: the wrappers are not in the headline figures)."""
    staged = StagedRecaller(reads, embedder, params, vector_cache=vector_cache)
    totals: list[float] = []
    scoring: list[float] = []
    originals = {name: getattr(recall_module, name) for name in ("fuse", "boost", "select")}

    def timed(fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*a, **k)
            scoring[-1] += (time.perf_counter() - t0) * 1000
            return out

        return wrapper

    for name, fn in originals.items():
        setattr(recall_module, name, timed(fn))
    try:
        for q in questions:
            scoring.append(0.0)
            ms, _ = await timed_recall(staged, q["question"])
            totals.append(ms)
    finally:
        for name, fn in originals.items():
            setattr(recall_module, name, fn)
    stages = {name: summary(values) for name, values in staged.stages.items()}
    stages["fuse + boost + select"] = summary(scoring)
    stages["total"] = summary(totals)
    # what the keyword channel reads: postings per query (documents matching any term)
    postings: list[int] = []
    terms_per_query: list[int] = []
    for q in questions:
        terms = keyword_terms(q["question"])
        terms_per_query.append(len(terms))
        postings.append(
            sum(
                floor.conn.execute(*search_sql.term_document_count(f'"{t}"')).fetchone()[0]
                for t in terms
            )
        )
    # the keyword channel's SQL alone vs the floor's single FTS query, sequential on one connection
    sql_ms: list[float] = []
    fts_ms: list[float] = []
    ham_ms: list[float] = []
    parallel_ms: list[float] = []
    for q in questions:
        terms = keyword_terms(q["question"])
        t0 = time.perf_counter()
        floor.conn.execute(*search_sql.live_count(NS, NO_FILTER)).fetchone()
        floor.conn.execute(*search_sql.live_count(None, NO_FILTER)).fetchone()
        if terms:  # one namespace is the whole index here: recall's ranked FTS query
            floor.conn.execute(
                *search_sql.whole_index_keyword_top(
                    " OR ".join(f'"{t}"' for t in terms), params.channel_depth
                )
            ).fetchall()
        sql_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        if terms:
            floor.conn.execute(FLOOR_KEYWORD, (" OR ".join(f'"{t}"' for t in terms),)).fetchall()
        fts_ms.append((time.perf_counter() - t0) * 1000)
        vector = await embedder.embed(q["question"])
        t0 = time.perf_counter()
        floor.conn.execute(
            *search_sql.vector_candidates(
                normalized_f32(vector), NS, NO_FILTER, params.vector_candidates, True
            )  # type: ignore[arg-type]
        ).fetchall()
        ham_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        floor.run_parallel(q["question"], normalized_f32(vector))  # type: ignore[arg-type]
        parallel_ms.append((time.perf_counter() - t0) * 1000)
    stages["keyword SQL alone (2 counts + ranked FTS query, sequential)"] = summary(sql_ms)
    stages["floor FTS OR query alone"] = summary(fts_ms)
    stages["Hamming first-pass SQL alone"] = summary(ham_ms)
    stages["floor with its FTS and vector SQL on 2 threads in parallel"] = summary(parallel_ms)
    return {
        "stages": stages,
        "keyword_terms_per_query": summary([float(x) for x in terms_per_query]),
        "postings_per_query": summary([float(x) for x in postings]),
    }


async def quantisation(
    reads: ReadPool,
    embedder: QueryEmbedder,
    params: RecallParams,
    questions: list[dict[str, Any]],
    vectors: dict[str, list[float]],
    rowid_of: dict[str, int],
    args: argparse.Namespace,
    vector_cache: VectorCache,
) -> dict[str, Any]:
    """Vector channel top-10 with the Hamming first pass (+ exact rescore) vs the
    exact float32 scan (vector_candidates=0), over the same file."""
    exact_recaller = Recaller(reads, embedder, dataclasses.replace(params, vector_candidates=0))
    exact: dict[str, list[int]] = {}
    exact_ms: list[float] = []
    for q in questions:
        t0 = time.perf_counter()
        exact[q["question"]] = await vector_top(exact_recaller, vectors[q["question"]])
        exact_ms.append((time.perf_counter() - t0) * 1000)
    out: dict[str, Any] = {"exact_scan_ms": summary(exact_ms), "by_candidates": {}}
    for candidates in args.candidates:
        approx_recaller = Recaller(
            reads,
            embedder,
            dataclasses.replace(params, vector_candidates=candidates),
            vector_cache=vector_cache,
        )
        overlaps: list[float] = []
        r10_exact: list[float] = []
        r10_approx: list[float] = []
        for q in questions:
            approx = await vector_top(approx_recaller, vectors[q["question"]])
            truth = exact[q["question"]]
            overlaps.append(len(set(approx) & set(truth)) / max(1, len(truth)))
            evidence = [rowid_of[e] for e in q.get("evidence_ids", []) if e in rowid_of]
            if evidence:
                r10_exact.append(evidence_recall(truth, evidence))
                r10_approx.append(evidence_recall(approx, evidence))
        out["by_candidates"][candidates] = {
            "overlap@10_mean": sum(overlaps) / len(overlaps),
            "overlap@10_min": min(overlaps),
            "queries_identical_top10_set": sum(o == 1.0 for o in overlaps) / len(overlaps),
            "vector_channel_evidence_R@10_exact": sum(r10_exact) / len(r10_exact),
            "vector_channel_evidence_R@10_quantised": sum(r10_approx) / len(r10_approx),
            "questions_with_evidence": len(r10_exact),
        }
    return out


async def profile(recaller: Recaller, texts: list[str]) -> str:
    """cProfile of the event-loop thread (SQL runs in aiosqlite's threads and shows
    up there as waiting)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for text in texts:
        await timed_recall(recaller, text)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
    return stream.getvalue()


# ---- gRPC -----------------------------------------------------------------------------


def grpc_sample(
    path: Path, questions: list[dict[str, Any]], warm: list[dict[str, Any]]
) -> dict[str, Any]:
    """Recall round trips to a real `serve search` process over the same file."""
    port = free_port()
    unused_store = free_port()  # nothing listens: access tracking fails and is dropped
    with tempfile.TemporaryDirectory(prefix="engram-latency-") as tmp:
        config = {
            "server": {"ports": {"search": port}},
            "clients": {
                "store_address": f"127.0.0.1:{unused_store}",
                "store_internal_address": f"127.0.0.1:{unused_store}",
            },
            "storage": {"path": str(path)},
        }
        config_path = Path(tmp) / "engram.yaml"
        config_path.write_text(yaml.safe_dump(config))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "gen")]))
        log = open(Path(tmp) / "search.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "serve",
                "search",
                "--config",
                str(config_path),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            address = f"127.0.0.1:{port}"
            wait_serving(address)
            with grpc.insecure_channel(address) as channel:
                stub = search_pb2_grpc.SearchServiceStub(channel)

                def call(text: str) -> tuple[float, Any]:
                    t0 = time.perf_counter()
                    response = stub.Recall(
                        search_pb2.RecallRequest(namespace=NS, query=text, limit=10), timeout=30
                    )
                    return (time.perf_counter() - t0) * 1000, response

                deadline = time.monotonic() + 120
                while True:  # until the model is loaded and answers are hybrid
                    _, response = call(warm[0]["question"])
                    if not response.degraded:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"search stays degraded: {list(response.warnings)}")
                    time.sleep(1)
                for w in warm:
                    call(w["question"])
                texts = [q["question"] for q in questions]
                first = [call(t) for t in texts]
                second = [call(t) for t in texts]
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()
    return {
        "with embedding": {
            "recall": summary([ms for ms, _ in first]),
            "degraded_answers": sum(r.degraded for _, r in first),
        },
        "cached vector": {
            "recall": summary([ms for ms, _ in second]),
            "degraded_answers": sum(r.degraded for _, r in second),
        },
    }


# ---- 1M: the vector channel alone -------------------------------------------------------


async def measure_million(path: Path, vectors: list[list[float]], warm: int) -> dict[str, Any]:
    params = recall_params(load_config(None))
    reads = ReadPool(path)
    await reads.open()
    vector_cache = VectorCache(path)
    recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params, vector_cache=vector_cache)
    floor = Floor(path, params.vector_candidates)
    t0 = time.perf_counter()
    await vector_top(recaller, vectors[0])  # loads the namespace into the cache
    cache_load_ms = (time.perf_counter() - t0) * 1000
    for vector in vectors[:warm]:
        await vector_top(recaller, vector)
        floor.vector(normalized_f32(vector))  # type: ignore[arg-type]
    total, first_pass, rescore, floor_ms = [], [], [], []
    load_before = load_average()
    for i, vector in enumerate(vectors[warm:]):
        blob = normalized_f32(vector)
        if i % 2:
            t0 = time.perf_counter()
            floor.vector(blob)  # type: ignore[arg-type]
            floor_ms.append((time.perf_counter() - t0) * 1000)
        _, first_ms, rescore_ms = await vector_channel(recaller, vector)
        total.append(first_ms + rescore_ms)
        first_pass.append(first_ms)
        rescore.append(rescore_ms)
        if not i % 2:
            t0 = time.perf_counter()
            floor.vector(blob)  # type: ignore[arg-type]
            floor_ms.append((time.perf_counter() - t0) * 1000)
    floor.close()
    await vector_cache.close()
    await reads.close()
    return {
        "cache_load_ms": cache_load_ms,
        "db": str(path),
        "db_bytes": path.stat().st_size,
        "vector channel": {"recall": summary(total), "floor": summary(floor_ms)},
        "first pass": summary(first_pass),
        "pool rows + rescore": summary(rescore),
        "load_before": load_before,
        "load_after": load_average(),
    }


# ---- the report --------------------------------------------------------------------------


def table_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []

    def add(
        size: int, mode: str, path: str, block: dict[str, Any], floor: dict[str, Any] | None
    ) -> None:
        target = TARGETS.get((size, mode)) if path != "gRPC" else None
        met = None
        if target:
            met = all(block[stat] <= limit for stat, limit in target.items())
        rows.append(
            {
                "size": size,
                "mode": mode,
                "path": path,
                "n": block["n"],
                "p50": block["p50"],
                "p95": block["p95"],
                "floor_p50": floor["p50"] if floor else None,
                "floor_p95": floor["p95"] if floor else None,
                "target": ", ".join(f"{k} ≤ {v:g} ms" for k, v in target.items()) if target else "",
                "met": met,
            }
        )

    for entry in results["sizes"]:
        size = entry["size"]
        for mode in ("cached vector", "with embedding"):
            add(size, mode, "in-process", entry[mode]["recall"], entry[mode]["floor"])
        grpc_entry = entry.get("grpc")
        if grpc_entry:
            for mode in ("cached vector", "with embedding"):
                add(size, mode, "gRPC", grpc_entry[mode]["recall"], entry[mode]["floor"])
    million = results.get("million")
    if million:
        block = million["vector channel"]
        add(million["size"], "vector channel", "in-process", block["recall"], block["floor"])
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'memories':>9}  {'mode':<15} {'path':<10} {'n':>4} {'p50':>8} {'p95':>8} "
        f"{'floor p50':>10} {'floor p95':>10}  {'target':<26} met?"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        floor50 = f"{r['floor_p50']:.1f}" if r["floor_p50"] is not None else "-"
        floor95 = f"{r['floor_p95']:.1f}" if r["floor_p95"] is not None else "-"
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        print(
            f"{r['size']:>9}  {r['mode']:<15} {r['path']:<10} {r['n']:>4} {r['p50']:>8.1f} {r['p95']:>8.1f} "
            f"{floor50:>10} {floor95:>10}  {r['target'] or '-':<26} {met}"
        )


def print_details(results: dict[str, Any]) -> None:
    print()
    data_info = results["data"]
    print(
        f"data: {data_info['real_turns']} LoCoMo turns + synthetic recombinations; real MiniLM vectors for "
        f"the first {data_info['real_vectors']} memories and {data_info['sentences']} sentences; derived "
        f"vectors: sentence mean + noise of norm {data_info['noise_norm']:.3f} "
        f"(calibration cos {data_info['calibration_cos']:.3f})"
    )
    for entry in results["sizes"]:
        embed = entry["with embedding"]["query embedding alone (in the floor)"]
        print(
            f"{entry['size']} ({entry['real_vectors']} real vectors): hybrid recall evidence R@10 "
            f"{entry['hybrid_evidence_R@10']:.3f}; MiniLM query embedding alone p50 {embed['p50']:.1f} "
            f"p95 {embed['p95']:.1f} ms; load {entry['load_before']} -> {entry['load_after']}; "
            f"file {entry['db_bytes'] / 2**20:.0f} MiB; page cache locked {entry['page_cache_locked']}"
        )
        cached = entry["cached vector"]
        if "questions split" in cached:
            split = cached["questions split"]
            print(
                f"  questions decomposition splits (n {split['recall']['n']}), cached vector at "
                f"decompose_weight {cached['decompose_weight']:g}: p50 {split['recall']['p50']:.1f} "
                f"p95 {split['recall']['p95']:.1f} ms, floor p50 {split['floor']['p50']:.1f} ms; "
                f"process CPU p50 {split['recall process CPU']['p50']:.1f} ms (all questions "
                f"{cached['recall process CPU']['p50']:.1f})"
            )
        for key, block in cached.items():
            if key.startswith("decompose_weight "):
                line = f"  {key} (alternating): p50 {block['recall']['p50']:.1f} p95 {block['recall']['p95']:.1f} ms"
                line += f", process CPU p50 {block['recall process CPU']['p50']:.1f} ms"
                if "questions split" in block:
                    line += (
                        f"; questions split p50 {block['questions split']['p50']:.1f} ms, "
                        f"process CPU p50 {block['questions split, process CPU']['p50']:.1f} ms"
                    )
                print(line)
        quant = entry["quantisation"]
        print(
            f"  exact float32 vector scan (vector_candidates=0): p50 {quant['exact_scan_ms']['p50']:.1f} ms, "
            f"p95 {quant['exact_scan_ms']['p95']:.1f} ms"
        )
        for candidates, q in quant["by_candidates"].items():
            print(
                f"  vector_candidates={candidates}: overlap@10 with exact mean {q['overlap@10_mean']:.4f} "
                f"(min {q['overlap@10_min']:.1f}, identical top-10 in {q['queries_identical_top10_set']:.1%}); "
                f"vector-channel evidence R@10 quantised {q['vector_channel_evidence_R@10_quantised']:.4f} vs exact "
                f"{q['vector_channel_evidence_R@10_exact']:.4f} ({q['questions_with_evidence']} questions)"
            )
        if "breakdown" in entry:
            b = entry["breakdown"]
            print(
                f"  breakdown (cached vector; keyword terms/query p50 {b['keyword_terms_per_query']['p50']:.0f}, "
                f"postings/query p50 {b['postings_per_query']['p50']:.0f} p95 {b['postings_per_query']['p95']:.0f}):"
            )
            for name, s in b["stages"].items():
                print(
                    f"    {name:<62} p50 {s['p50']:7.1f}  p95 {s['p95']:7.1f}  mean {s['mean']:7.1f}"
                )
        if "profile" in entry:
            print(entry["profile"])
    million = results.get("million")
    if million:
        print(
            f"{million['size']} vectors: first pass p50 {million['first pass']['p50']:.1f} ms, "
            f"pool rows + rescore p50 {million['pool rows + rescore']['p50']:.1f} ms; "
            f"first cache load {million['cache_load_ms']:.0f} ms; load "
            f"{million['load_before']} -> {million['load_after']}; file {million['db_bytes'] / 2**20:.0f} MiB"
        )
        print(f"  {million['vectors']}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    CACHE.mkdir(parents=True, exist_ok=True)
    sizes = sorted(args.sizes)
    biggest = max(sizes)
    # the configured local runtime (LocalEmbedding is abstract since the int8 runtime)
    provider = local_embedding(load_config().providers.embedding.runtime)
    await provider.warm_up()
    corpus = data.build_corpus(biggest)
    vecs = data.corpus_vectors(provider, corpus, CACHE, args.real_vectors)
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cpus": os.cpu_count(),
        "data": {
            "real_turns": corpus.real_turns,
            "real_vectors": vecs.real,
            "sentences": len(corpus.sentences),
            "calibration_cos": vecs.calibration_cos,
            "noise_norm": vecs.noise_norm,
            "synthesis": (data.__doc__ or "").strip(),
        },
        "sizes": [],
    }
    all_questions = [q for q in data.load_queries() if q["question"].strip()]
    rng = random.Random(3)
    picked = rng.sample(all_questions, args.queries + 20)
    warm, questions = picked[:20], picked[20:]
    for size in sizes:
        real = min(vecs.real, size)
        path = CACHE / f"recall-{size}-r{real}.db"
        description = {
            "version": data.DATA_VERSION,
            "size": size,
            "real_vectors": real,
            "noise_norm": round(vecs.noise_norm, 6),
        }
        if args.rebuild or not data.cached_db(path, description):
            print(f"building {path} ...", flush=True)
            seconds = await data.build_memory_db(path, corpus, vecs.memories, size, description)
            print(f"  built in {seconds:.0f} s", flush=True)
        data.migrate(path)
        if args.build_only:
            continue
        lock = data.PageCacheLock([path] if args.lock_files else [])
        try:
            print(f"measuring {size} memories ...", flush=True)
            entry = await measure_size(size, path, provider, questions, warm, args)
            entry["real_vectors"] = real
            entry["page_cache_locked"] = bool(lock.locked)
            if size == biggest and args.grpc_queries:
                print(f"gRPC sample at {size} ...", flush=True)
                entry["grpc"] = grpc_sample(path, questions[: args.grpc_queries], warm)
        finally:
            lock.release()
        results["sizes"].append(entry)
    if args.build_only:
        return results
    if args.million:
        path = CACHE / f"vectors-{args.million}.db"
        # fixed whatever --real-vectors is: the first 10k memory vectors (all real) + sentences
        base = np.concatenate([vecs.memories[: min(vecs.real, data.REAL_VECTORS)], vecs.sentences])
        description = {
            "version": data.DATA_VERSION,
            "size": args.million,
            "base": len(base),
            "noise_norm": round(vecs.noise_norm, 6),
        }
        if args.rebuild or not data.cached_db(path, description):
            print(f"building {path} ...", flush=True)
            seconds = data.build_vector_db(path, base, args.million, vecs.noise_norm, description)
            print(f"  built in {seconds:.0f} s", flush=True)
        data.migrate(path)
        print(f"measuring the vector channel at {args.million} ...", flush=True)
        provider_vectors = await provider.embed([q["question"] for q in picked])
        lock = data.PageCacheLock([path] if args.lock_files else [])
        try:
            entry = await measure_million(path, provider_vectors[: 20 + args.million_queries], 20)  # type: ignore[arg-type]
        finally:
            lock.release()
        entry["page_cache_locked"] = bool(lock.locked)
        entry["size"] = args.million
        entry["vectors"] = (
            f"{args.million} vectors = normalize(u + e): u cycles over {len(base)} real MiniLM vectors "
            f"({vecs.real} memory texts + {len(corpus.sentences)} sentences), e a Gaussian direction "
            f"of norm {vecs.noise_norm:.3f}; memories rows minimal, FTS trigger dropped"
        )
        results["million"] = entry
    results["table"] = table_rows(results)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000]
    )
    parser.add_argument("--queries", type=int, default=300, help="LoCoMo questions timed per size")
    parser.add_argument("--grpc-queries", type=int, default=100, help="0 skips the gRPC sample")
    parser.add_argument(
        "--million", type=int, default=1_000_000, help="vector-channel size; 0 skips"
    )
    parser.add_argument("--million-queries", type=int, default=100)
    parser.add_argument(
        "--candidates",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[100, 400, 1000],
        help="first-pass sizes compared with the exact scan",
    )
    parser.add_argument("--breakdown", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--compare-decompose",
        type=float,
        help="also time recall (cached vector) at this search.decompose_weight, alternating with "
        "the configured one query by query",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the event-loop thread")
    parser.add_argument("--profile-queries", type=int, default=100)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached databases")
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="build (or reuse) the --sizes files and stop: no measurement, no --million file",
    )
    parser.add_argument(
        "--real-vectors",
        type=int,
        default=data.REAL_VECTORS,
        help="memories embedded for real with MiniLM (later ones get derived vectors); cached",
    )
    parser.add_argument(
        "--lock-files",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the database file in the page cache (mmap + mlock) while measuring",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "recall_latency.json")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.build_only:
        return 0
    print()
    print_table(results["table"])
    print_details(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(provenance.stamped(results), indent=2, default=str))
    print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
