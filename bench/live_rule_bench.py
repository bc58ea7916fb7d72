"""What the live rule costs Recall (issue 16): every read now asks "not deleted
AND not expired" (services/storage/memory_filter_sql.live_sql) where it asked "not
deleted" (and, since issue 17, "valid"). Both rules are timed in one run, on one file, interleaved query by
query (alternating which goes first), so load and page cache hit both alike.

    PYTHONPATH=.:gen .venv/bin/python bench/live_rule_bench.py [--queries 100]

Data: a copy of recall_latency.py's 100k-memory file (build it first with
`bench/recall_latency.py --sizes 100000 --million 0`), migrated to the current
schema, in /tmp/engram-latency-sessions (the shared cache stays as it is). A
fifth of its memories become short-term memories of sessions (expire_at a day
ahead) and one in fifty has expired (expire_at in the past, not yet swept:
the rows the rule must drop, still in the FTS and vector indexes).

What is timed: Recaller.recall(namespace, question, 10) in-process, query
vectors cached (recall_latency.py's "cached vector" mode, the vector cache
loaded), no access tracking. "live rule" is the code as it is; "no expiry" is
the same code with search's queries built by the live rule minus its expiry
clause (`expire_at IS NULL OR expire_at > now`, swapped in for the run:
nothing else differs). The results of the two differ only by the expired
memories the rule without expiry returns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    # this checkout's engram.client, not an installed one built from other protos
    str(Path(__file__).resolve().parent.parent / "clients" / "python"),
]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import latency_data as data  # noqa: E402
import provenance  # noqa: E402
from recall_latency import NO_FILTER, NS, load_average, summary  # noqa: E402

from services.common import clock  # noqa: E402
from services.common.config import load_config  # noqa: E402
from services.common.providers.embedding import LocalEmbedding  # noqa: E402
from services.search.app import recall_params  # noqa: E402
from services.search.embedder import QueryEmbedder  # noqa: E402
from services.search.recall import Recaller  # noqa: E402
from services.search.vector_cache import VectorCache  # noqa: E402
from services.storage.db import ReadPool, open_read_write  # noqa: E402
from services.storage.memory_filter_sql import NOW_SQL, live_sql  # noqa: E402
from services.storage.search import graph_queries, queries  # noqa: E402

SOURCE = Path("/tmp/engram-latency/recall-100000-r10000.db")
WORK = Path("/tmp/engram-latency-sessions")
RESULTS = Path(__file__).resolve().parent / "results"


def no_expiry_sql(alias: str = "m", *, keep_plan: bool = False, as_of: str | None = None) -> str:
    """The live rule without its expiry clause."""
    p = f"{'+' if keep_plan else ''}{alias}."
    clause = f" AND ({p}expire_at IS NULL OR {p}expire_at > {NOW_SQL})"
    rule = live_sql(alias, keep_plan=keep_plan, as_of=as_of)
    assert clause in rule, rule
    return rule.replace(clause, "")


def prepare() -> Path:
    """The migrated copy, with its short-term and expired memories."""
    if not SOURCE.exists():
        raise SystemExit(f"{SOURCE} is missing: run bench/recall_latency.py first")
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "live.db"
    if not path.exists():
        source = open_read_write(SOURCE, synchronous="NORMAL")
        try:
            source.execute("VACUUM INTO ?", (str(path),))
        finally:
            source.close()
    data.migrate(path)
    conn = open_read_write(path, synchronous="NORMAL")
    try:
        ahead = clock.days_ago_text(-1)
        behind = clock.days_ago_text(1)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE memories SET session_id = 's' || (rowid / 20), expire_at = ? "
            "WHERE rowid % 5 = 0",
            (ahead,),
        )
        conn.execute("UPDATE memories SET expire_at = ? WHERE rowid % 50 = 0", (behind,))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return path


async def measure(path: Path, count: int) -> dict[str, Any]:
    provider = LocalEmbedding()
    await provider.warm_up()
    questions = [q["question"] for q in data.load_queries() if q["question"].strip()]
    picked = random.Random(3).sample(questions, count + 20)
    warm, texts = picked[:20], picked[20:]
    reads = ReadPool(path)
    await reads.open()
    embedder = QueryEmbedder(provider, cache_size=len(picked) + 10)
    for text in picked:
        while await embedder.embed(text) is None:
            await asyncio.sleep(6)
    recaller = Recaller(
        reads, embedder, recall_params(load_config(None)), vector_cache=VectorCache(path)
    )
    rules = {"live rule": live_sql, "no expiry": no_expiry_sql}

    async def timed(rule: str, text: str) -> tuple[float, list[str]]:
        queries.live_sql = graph_queries.live_sql = rules[rule]  # type: ignore[assignment]
        try:
            started = time.perf_counter()
            outcome = await recaller.recall(NS, text, 10, NO_FILTER, track_access=False)
            return (time.perf_counter() - started) * 1000, [h.memory.id for h in outcome.hits]
        finally:
            queries.live_sql = graph_queries.live_sql = live_sql  # type: ignore[assignment]

    for text in warm + texts:  # page cache, the vector cache, every code path
        for rule in rules:
            await timed(rule, text)
    load_before = load_average()
    times: dict[str, list[float]] = {rule: [] for rule in rules}
    differing = 0
    for index, text in enumerate(texts):
        order = list(rules) if index % 2 == 0 else list(reversed(rules))
        found: dict[str, list[str]] = {}
        for rule in order:
            ms, ids = await timed(rule, text)
            times[rule].append(ms)
            found[rule] = ids
        differing += found["live rule"] != found["no expiry"]
    await reads.close()
    stats = {rule: summary(values) for rule, values in times.items()}
    return {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_average(),
        "queries": count,
        "stats_ms": stats,
        "p50_ratio": stats["live rule"]["p50"] / stats["no expiry"]["p50"],
        "p95_ratio": stats["live rule"]["p95"] / stats["no expiry"]["p95"],
        "queries_whose_results_differ": differing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    path = prepare()
    result = asyncio.run(measure(path, args.queries))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"live_rule-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(provenance.stamped(result), indent=2) + "\n")
    for rule, stats in result["stats_ms"].items():
        print(f"{rule:12s}  p50 {stats['p50']:7.1f} ms  p95 {stats['p95']:7.1f} ms  n {stats['n']}")
    print(
        f"ratio live/no-expiry: p50 {result['p50_ratio']:.3f}  p95 {result['p95_ratio']:.3f}; "
        f"results differ for {result['queries_whose_results_differ']} of {args.queries} queries; "
        f"load {result['load_before']} -> {result['load_after']}; {out}"
    )


if __name__ == "__main__":
    main()
