"""Retrieval quality on LongMemEval-S through the public gRPC API.

Each question brings its own haystack (about 50 sessions, 500 turns): it is
imported into a namespace of its own, one memory per turn (content = the
turn's text, who = its role, source_id = "<session id>:<turn index from 0>",
event_time = the session's date). Once every memory is embedded, the question
is asked through Recall with limit 50 and min_score 0 (a ranking, not an
answer), and the ranked source ids are scored:

- turn level: R@5 and R@10 over the turns flagged has_answer, nDCG@10;
- session level: sessions ranked by the first appearance of any of their
  turns; recall_any@5 (an evidence session in the top 5), recall_all@5 and
  recall_all@10 (every evidence session).

Abstention questions (ids ending in _abs) are excluded, as in the official
print_retrieval_metrics.py. A turn whose text repeats an earlier turn of the
same haystack is deduplicated by the store; its source id is ranked where the
surviving memory is. Recall has no "time of asking" field yet, so the
question_date is not used.

    .venv/bin/python bench/longmemeval.py [--input FILE] [--limit N] [--rankings-out FILE]
        [--set search.fusion=rrf]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from locomo import merge, parse_setting, wait_embedded  # noqa: E402
from suite import running_suite, shared_dataset  # noqa: E402

DEFAULT_INPUT = shared_dataset("longmemeval/longmemeval-s-dev.json.gz")
RECALL_LIMIT = 50
METRICS = ("turn R@5", "turn R@10", "nDCG@10", "any@5", "all@5", "all@10")


def load(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return list(json.load(handle))


def session_time(text: str) -> datetime:
    """'2023/05/30 (Tue) 23:42' -> an aware datetime (the file gives no zone; UTC)."""
    day, _, clock = text.partition(" (")
    return datetime.strptime(f"{day} {clock.split(') ', 1)[1]}", "%Y/%m/%d %H:%M").replace(
        tzinfo=UTC
    )


def turn_items(question: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], datetime]]:
    for session_id, date, session in zip(
        question["haystack_session_ids"],
        question["haystack_dates"],
        question["haystack_sessions"],
        strict=True,
    ):
        when = session_time(date)
        for index, turn in enumerate(session):
            yield f"{session_id}:{index}", turn, when


def ingest(
    store: store_pb2_grpc.MemoryStoreServiceStub, namespace: str, question: dict[str, Any]
) -> dict[str, list[str]]:
    """Import one haystack; returns memory id -> the source ids it stands for."""
    items: list[store_pb2.ImportItem] = []
    sources: list[str] = []
    for source_id, turn, when in turn_items(question):
        if not turn["content"].strip():
            continue
        event_time = timestamp_pb2.Timestamp()
        event_time.FromDatetime(when)
        items.append(
            store_pb2.ImportItem(
                content=turn["content"],
                who=turn["role"],
                source_type="longmemeval",
                source_id=source_id,
                event_time=event_time,
            )
        )
        sources.append(source_id)

    def batches() -> Iterator[store_pb2.ImportMemoriesRequest]:
        for start in range(0, len(items), 500):
            yield store_pb2.ImportMemoriesRequest(
                namespace=namespace, items=items[start : start + 500]
            )

    response = store.ImportMemories(batches())
    stands_for: dict[str, list[str]] = defaultdict(list)
    for result in response.results:
        if result.memory_id:
            stands_for[result.memory_id].append(sources[result.index])
    if response.failed_count:
        errors = {r.error for r in response.results if r.error}
        raise RuntimeError(f"{namespace}: {response.failed_count} turns failed: {errors}")
    return stands_for


def score(ranked: list[str], question: dict[str, Any]) -> dict[str, float]:
    """The official retrieval metrics for one question's ranking of source ids."""
    answer_turns = {
        source_id for source_id, turn, _ in turn_items(question) if turn.get("has_answer")
    }
    evidence_sessions = set(question["answer_session_ids"])
    sessions: list[str] = []
    for source_id in ranked:
        session = source_id.rsplit(":", 1)[0]
        if session not in sessions:
            sessions.append(session)
    metrics: dict[str, float] = {}
    if answer_turns:
        hits = [rank for rank, s in enumerate(ranked[:10]) if s in answer_turns]
        ideal = sum(1 / math.log2(r + 2) for r in range(min(len(answer_turns), 10)))
        metrics["turn R@5"] = sum(h < 5 for h in hits) / len(answer_turns)
        metrics["turn R@10"] = len(hits) / len(answer_turns)
        metrics["nDCG@10"] = sum(1 / math.log2(h + 2) for h in hits) / ideal
    for k, name in ((5, "any@5"), (5, "all@5"), (10, "all@10")):
        found = evidence_sessions & set(sessions[:k])
        if name.startswith("any"):
            metrics[name] = float(bool(found))
        else:
            metrics[name] = float(found == evidence_sessions)
    return metrics


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help=".json or .json.gz")
    parser.add_argument("--limit", type=int, help="only the first N questions (quick iterations)")
    parser.add_argument("--rankings-out", type=Path)
    parser.add_argument(
        "--set", action="append", default=[], help="engram.yaml key=value, e.g. search.fusion=rrf"
    )
    args = parser.parse_args()
    questions = [q for q in load(args.input) if not q["question_id"].endswith("_abs")]
    if args.limit:
        questions = questions[: args.limit]
    settings: dict[str, Any] = {}
    for item in args.set:
        merge(settings, parse_setting(item))

    per_type: dict[str, list[dict[str, float]]] = defaultdict(list)
    latencies: list[float] = []
    degraded = 0
    with running_suite(settings) as suite:
        store = store_pb2_grpc.MemoryStoreServiceStub(grpc.insecure_channel(suite.store))
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        started = time.monotonic()
        stands_for: dict[str, dict[str, list[str]]] = {}
        for question in questions:
            namespace = f"lme-{question['question_id']}"
            stands_for[namespace] = ingest(store, namespace, question)
        ingest_s = time.monotonic() - started
        memories = sum(len(m) for m in stands_for.values())
        embed_s = wait_embedded(jobs, timeout_s=4 * 3600)

        rankings = open(args.rankings_out, "w") if args.rankings_out else None  # noqa: SIM115
        for question in questions:
            namespace = f"lme-{question['question_id']}"
            request = search_pb2.RecallRequest(
                namespace=namespace, query=question["question"], limit=RECALL_LIMIT, min_score=0.0
            )
            t0 = time.perf_counter()
            response = search.Recall(request)
            latencies.append((time.perf_counter() - t0) * 1000)
            degraded += response.degraded
            ranked = [s for r in response.results for s in stands_for[namespace][r.memory.id]]
            if rankings:
                rankings.write(
                    json.dumps({"query_id": question["question_id"], "ranked": ranked}) + "\n"
                )
            per_type[question["question_type"]].append(score(ranked, question))
        if rankings:
            rankings.close()

    latencies.sort()
    print(f"input: {args.input}  settings: {settings or 'defaults'}")
    print(
        f"questions: {len(questions)} (abstention excluded)  memories: {memories}  "
        f"ingest {ingest_s:.1f} s  embedding wait {embed_s:.1f} s "
        f"({memories / max(embed_s, 1e-9):.0f} memories/s)"
    )
    print(
        f"recall latency over gRPC: p50 {latencies[len(latencies) // 2]:.1f} ms  "
        f"p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms  degraded answers: {degraded}"
    )
    print(f"{'question type':<28}{'n':>4}" + "".join(f"{m:>11}" for m in METRICS))
    everything = [row for rows in per_type.values() for row in rows]
    for name, rows in [*sorted(per_type.items()), ("overall", everything)]:
        cells = []
        for metric in METRICS:
            values = [row[metric] for row in rows if metric in row]
            cells.append(f"{sum(values) / len(values):>11.3f}" if values else f"{'-':>11}")
        print(f"{name:<28}{len(rows):>4}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
