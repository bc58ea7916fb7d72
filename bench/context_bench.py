"""AssembleContext (issue 16): latency next to Recall in the same run, and how much of
each LoCoMo question's evidence the context block holds next to a baseline.

    PYTHONPATH=.:gen .venv/bin/python bench/context_bench.py latency [--queries 300]
    PYTHONPATH=.:gen .venv/bin/python bench/context_bench.py quality [--data-dir DIR]

latency: the 100k-memory file of bench/recall_latency.py (bench/latency_data.py),
copied to /tmp/engram-context and migrated by this checkout's store (so the shared
cache stays as main's code expects), with 20 memories pinned. In-process, interleaved
per question (alternating order): Recaller.recall(namespace, question, 10) as
recall_latency.py times it ("recall, cached vector": the query's vector in the
embedder's cache), and ContextAssembler.assemble(namespace, question, budget 0) (the
budget seed 003 picks for the question: 1000 or 3000) over the same Recaller. Target: the
AssembleContext p50 at most the Recall p50 + 10 ms.

quality: LoCoMo dev imported through the public API as bench/locomo.py does (one
namespace per conversation, source_id = dia_id), then for every question of
categories 1-4 with evidence and each budget (500, 1000, 3000 tokens):
  context: AssembleContext(namespaces=[conversation], query, token_budget), and the
    share of the question's evidence turns among the memories in its sections (the
    memories the block shows);
  baseline: Recall(namespace, query, limit = what AssembleContext asks Recall for at
    that budget), each result rendered as the context renders a memory line, in score
    order, cut at the first line that would take the block over the budget (counted
    with the same tokenizer), and the same share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import grpc

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    str(Path(__file__).resolve().parent.parent / "clients" / "python"),
]

import latency_data as data  # noqa: E402
import provenance  # noqa: E402
from recall_latency import CACHE, NO_FILTER, NS, load_average, summary  # noqa: E402

import locomo  # noqa: E402
from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2_grpc  # noqa: E402
from services.common.config import load_config  # noqa: E402
from services.common.memory_record import MemoryRecord  # noqa: E402
from services.common.providers.embedding import LocalEmbedding  # noqa: E402
from services.search.app import context_params, recall_params  # noqa: E402
from services.search.context import ContextAssembler, memory_line_text, recall_limit  # noqa: E402
from services.search.embedder import QueryEmbedder  # noqa: E402
from services.search.inputs import ContextInput  # noqa: E402
from services.search.recall import Recaller  # noqa: E402
from services.search.tokens import CL100K, tokenizer  # noqa: E402
from services.search.vector_cache import VectorCache  # noqa: E402
from services.storage.db import ReadPool, open_read_write  # noqa: E402
from services.storage.sqlite_migrations import apply_migrations  # noqa: E402
from suite import running_suite  # noqa: E402

WORK = Path("/tmp/engram-context")
RESULTS = Path(__file__).resolve().parent / "results"
BUDGETS = (500, 1000, 3000)
PINNED = 20
TARGET_EXTRA_MS = 10.0


# ---- latency ----------------------------------------------------------------------------


def latency_db(size: int) -> Path:
    """A copy of recall_latency's cached file, migrated here, with PINNED memories pinned."""
    source = CACHE / f"recall-{size}-r{data.REAL_VECTORS}.db"
    if not source.exists():
        raise SystemExit(f"{source} is missing: run bench/recall_latency.py --sizes {size} first")
    WORK.mkdir(parents=True, exist_ok=True)
    target = WORK / f"context-{size}.db"
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        shutil.copyfile(source, target)
    conn = open_read_write(target)
    try:
        apply_migrations(conn)
        pinned = conn.execute("SELECT count(*) FROM memories WHERE pinned = 1").fetchone()[0]
        if pinned < PINNED:
            rowids = [r[0] for r in conn.execute("SELECT rowid FROM memories")]
            chosen = random.Random(16).sample(rowids, PINNED)
            marks = ", ".join("?" * len(chosen))
            conn.execute(f"UPDATE memories SET pinned = 1 WHERE rowid IN ({marks})", chosen)
            conn.commit()
    finally:
        conn.close()
    return target


def asked(assembler: ContextAssembler, text: str) -> ContextInput:
    """AssembleContext's input for `text` in NS with the default budget (what its
    parse step makes of such a request)."""
    return ContextInput((NS,), text, assembler.check_question(text, 0), "", None)


async def measure_latency(args: argparse.Namespace) -> dict[str, Any]:
    path = latency_db(args.size)
    config = load_config(None)
    reads = ReadPool(path)
    await reads.open()
    questions = [q["question"] for q in data.load_queries()]
    random.Random(3).shuffle(questions)
    warm, timed = questions[:30], questions[30 : 30 + args.queries]
    provider = LocalEmbedding()
    embedder = QueryEmbedder(provider, cache_size=len(warm) + len(timed) + 10)
    vector_cache = VectorCache(path)
    recaller = Recaller(reads, embedder, recall_params(config), vector_cache=vector_cache)
    assembler = ContextAssembler(recaller, reads, tokenizer(CL100K), context_params(config))
    for text in [*warm, *timed]:  # fills the embedder's cache (the model runs here only)
        while await embedder.embed(text) is None:
            await asyncio.sleep(6)
    load_before = load_average()
    for text in warm:  # page cache, vector cache, every code path
        outcome = await recaller.recall(NS, text, 10, NO_FILTER)
        if outcome.degraded:
            raise RuntimeError(f"recall is degraded during warm-up: {outcome.warnings}")
        await assembler.assemble(asked(assembler, text))
    recall_ms: list[float] = []
    context_ms: list[float] = []
    budgets: dict[int, int] = defaultdict(int)
    tokens: list[int] = []
    for i, text in enumerate(timed):

        async def context(text: str = text) -> None:
            t0 = time.perf_counter()
            assembled = await assembler.assemble(asked(assembler, text))
            context_ms.append((time.perf_counter() - t0) * 1000)
            budgets[assembled.budget] += 1
            tokens.append(assembled.token_count)

        if i % 2:
            await context()
        t0 = time.perf_counter()
        await recaller.recall(NS, text, 10, NO_FILTER)
        recall_ms.append((time.perf_counter() - t0) * 1000)
        if not i % 2:
            await context()
    await vector_cache.close()
    await reads.close()
    await provider.close()
    recall, context_stats = summary(recall_ms), summary(context_ms)
    return {
        "size": args.size,
        "db": str(path),
        "pinned": PINNED,
        "recall": recall,
        "assemble_context": context_stats,
        "budgets": dict(budgets),
        "mean_token_count": sum(tokens) / len(tokens),
        "target": f"AssembleContext p50 <= Recall p50 + {TARGET_EXTRA_MS:g} ms",
        "met": context_stats["p50"] <= recall["p50"] + TARGET_EXTRA_MS,
        "load_before": load_before,
        "load_after": load_average(),
    }


def print_latency(result: dict[str, Any]) -> None:
    recall, context = result["recall"], result["assemble_context"]
    print(f"{result['size']} memories, {result['pinned']} pinned; budgets {result['budgets']}")
    print(f"{'':<18}{'n':>5}{'p50':>9}{'p95':>9}{'mean':>9}")
    for name, block in (("Recall (limit 10)", recall), ("AssembleContext", context)):
        print(
            f"{name:<18}{block['n']:>5}{block['p50']:>9.1f}{block['p95']:>9.1f}{block['mean']:>9.1f}"
        )
    print(
        f"p50 difference {context['p50'] - recall['p50']:+.1f} ms; {result['target']}: "
        f"{'met' if result['met'] else 'NOT met'}; load {result['load_before']} -> {result['load_after']}"
    )


# ---- quality ----------------------------------------------------------------------------


def record_of(memory: Any) -> MemoryRecord:
    """A Memory message as the renderer takes it (only what a line shows matters)."""
    event = memory.event_time.ToDatetime()
    return MemoryRecord(
        id=memory.id,
        namespace=memory.namespace,
        content=memory.content,
        content_hash="",
        type=memory.type,
        importance=memory.importance,
        tags=tuple(memory.tags),
        pinned=memory.pinned,
        who="",
        why="",
        source_type="",
        source_id=memory.source_id,
        version=memory.version,
        deleted=False,
        deleted_at=None,
        created_at="",
        updated_at="",
        event_time=event.strftime("%Y-%m-%dT%H:%M:%S.000000000Z"),
        access_count=0,
        last_accessed=None,
    )


def baseline_ids(results: list[Any], budget: int, count: Any) -> tuple[list[str], int]:
    """Recall's results rendered in score order, cut at the first line over budget."""
    used = 0
    shown: list[str] = []
    for result in results:
        tokens = count(memory_line_text(record_of(result.memory), show_namespace=False) + "\n")
        if used + tokens > budget:
            break
        used += tokens
        shown.append(result.memory.source_id)
    return shown, used


def share(shown: list[str], evidence: list[str]) -> float:
    return len(set(shown) & set(evidence)) / len(evidence)


def measure_quality(args: argparse.Namespace) -> dict[str, Any]:
    samples = json.loads(args.input.read_text())
    count = tokenizer(CL100K).count
    reuse = args.data_dir is not None and (args.data_dir / "engram.db").exists()
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
    scores: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    tokens: dict[tuple[str, int], list[int]] = defaultdict(list)
    with running_suite({}, data_dir=args.data_dir) as suite:
        store = store_pb2_grpc.MemoryStoreServiceStub(grpc.insecure_channel(suite.store))
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        memories = 0 if reuse else sum(locomo.ingest(store, sample) for sample in samples)
        embed_s = locomo.wait_embedded(jobs)
        questions = 0
        for sample in samples:
            namespace = sample["sample_id"]
            session_of = {t["dia_id"]: n for n, t, _ in locomo.turns(sample["conversation"])}
            for qa in sample["qa"]:
                if qa["category"] not in locomo.CATEGORIES:
                    continue
                evidence, _ = locomo.evidence_ids(qa.get("evidence", []), set(session_of))
                if not evidence:
                    continue
                questions += 1
                category = locomo.CATEGORIES[qa["category"]]
                # one Recall at the largest limit: a smaller limit is its prefix (the
                # selection is greedy in score order), so each budget's baseline is too
                recalled = list(
                    search.Recall(
                        search_pb2.RecallRequest(
                            namespace=namespace,
                            query=qa["question"],
                            limit=recall_limit(max(BUDGETS)),
                        )
                    ).results
                )
                for budget in BUDGETS:
                    assembled = search.AssembleContext(
                        search_pb2.AssembleContextRequest(
                            namespaces=[namespace], query=qa["question"], token_budget=budget
                        )
                    )
                    shown = [m.source_id for s in assembled.sections for m in s.memories]
                    cut, cut_tokens = baseline_ids(recalled[: recall_limit(budget)], budget, count)
                    for group in (category, "overall"):
                        scores[(group, budget, "context")].append(share(shown, evidence))
                        scores[(group, budget, "baseline")].append(share(cut, evidence))
                    tokens[(budget, "context")].append(assembled.token_count)
                    tokens[(budget, "baseline")].append(cut_tokens)
    table = {
        f"{group}|{budget}|{kind}": sum(values) / len(values)
        for (group, budget, kind), values in scores.items()
    }
    counts = {
        group: len(scores[(group, BUDGETS[0], "context")]) for group in {g for g, _, _ in scores}
    }
    return {
        "input": str(args.input),
        "memories": memories,
        "reused": reuse,
        "embedding_wait_s": embed_s,
        "questions": questions,
        "per_group_n": counts,
        "evidence_share": table,
        "mean_tokens": {f"{b}|{k}": sum(v) / len(v) for (b, k), v in tokens.items()},
        "met": all(
            table[f"overall|{b}|context"] >= table[f"overall|{b}|baseline"] for b in BUDGETS
        ),
    }


def print_quality(result: dict[str, Any]) -> None:
    table = result["evidence_share"]
    groups = [*sorted(g for g in result["per_group_n"] if g != "overall"), "overall"]
    header = f"{'category':<13}{'n':>5}" + "".join(
        f"{f'{b} ctx':>10}{f'{b} base':>10}" for b in BUDGETS
    )
    print(header)
    for group in groups:
        cells = "".join(
            f"{table[f'{group}|{b}|context']:>10.3f}{table[f'{group}|{b}|baseline']:>10.3f}"
            for b in BUDGETS
        )
        print(f"{group:<13}{result['per_group_n'][group]:>5}{cells}")
    print(
        "mean tokens: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(result["mean_tokens"].items()))
    )
    print(f"context >= baseline at every budget (overall): {result['met']}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    latency = sub.add_parser("latency")
    latency.add_argument("--size", type=int, default=100_000)
    latency.add_argument("--queries", type=int, default=300)
    quality = sub.add_parser("quality")
    quality.add_argument("--input", type=Path, default=locomo.DEFAULT_INPUT)
    quality.add_argument("--data-dir", type=Path)
    parser.add_argument("--out", type=Path, help="write the result JSON here")
    args = parser.parse_args()
    if args.mode == "latency":
        result = asyncio.run(measure_latency(args))
        print_latency(result)
    else:
        result = measure_quality(args)
        print_quality(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(provenance.stamped(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
