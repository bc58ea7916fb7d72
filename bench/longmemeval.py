"""Retrieval quality on LongMemEval-S through the public gRPC API.

Each question brings its own haystack (about 50 sessions, 500 turns): it is
imported into a namespace of its own, one memory per turn (content = the
turn's text, who = its role, source_id = "<session id>:<turn index from 0>",
event_time = the session's date, session_id = the session id, so the store
links each turn to the one before it; --path flat imports without sessions,
the path before issue 34). Once every memory is embedded, the question
is asked through Recall with limit 50 and min_score 0 (a ranking, not an
answer), and the ranked source ids are scored:

- turn level: R@5 and R@10 over the turns flagged has_answer, nDCG@10;
- session level: sessions ranked by the first appearance of any of their
  turns; recall_any@5 (an evidence session in the top 5), recall_all@5 and
  recall_all@10 (every evidence session).

Abstention questions (ids ending in _abs) are excluded, as in the official
print_retrieval_metrics.py. A turn whose text repeats an earlier turn of the
same haystack is deduplicated by the store; its source id is ranked where the
surviving memory is. Each question is asked at its question_date (Recall's
`asked_at`, for the relative dates a question names).

The suite's embeddings come from bench/embed_cache.py: the local MiniLM's own
vectors, computed once per text and served over Ollama's HTTP protocol (misses
are embedded on the spot by the same model); --live-model runs the model in the
pipeline instead. --offset/--limit pick a slice of the questions (chunks of one
run, concatenated, score like one run). --data-dir keeps the database (and the
memory -> source ids map) for the next run with other --set values.

--baselines runs no suite: BM25, dense (MiniLM) and RRF over each haystack's
turns (bench/baselines.py), scored the same way. --score FILE [FILE ...] runs no
suite either: it scores rankings files (one configuration each); with --kfold K
it also picks, for each of K folds of the questions, the configuration with the
best mean turn R@10 on the other folds and reports the held-out figures.

    .venv/bin/python bench/longmemeval.py [--input FILE] [--offset N] [--limit N]
        [--rankings-out FILE] [--set search.fusion=rrf] [--data-dir DIR] [--live-model]
        [--path sessions|flat]
    .venv/bin/python bench/longmemeval.py --baselines [--rankings-out PREFIX]
    .venv/bin/python bench/longmemeval.py --score RANKINGS.jsonl [...] [--kfold 5]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
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
import numpy as np
from google.protobuf import timestamp_pb2

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

import baselines as baseline  # noqa: E402
import provenance  # noqa: E402
from embed_cache import DEFAULT_PATH as CACHE_PATH  # noqa: E402
from embed_cache import VectorCache, serving  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from locomo import merge, parse_setting, wait_embedded  # noqa: E402
from services.common.normalize import is_blank, normalize_content  # noqa: E402
from suite import running_suite, shared_dataset  # noqa: E402

DEFAULT_INPUT = shared_dataset("longmemeval/longmemeval-s-dev.json.gz")
RECALL_LIMIT = 50
METRICS = ("turn R@5", "turn R@10", "nDCG@10", "any@5", "all@5", "all@10")


def load(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return list(json.load(handle))


def scored_questions(path: Path) -> list[dict[str, Any]]:
    """The questions a run asks: abstention ones left out, the types interleaved
    (round robin, each type in file order), so that any --offset/--limit slice,
    and a partly filled vector cache, cover every type alike."""
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for question in load(path):
        if not question["question_id"].endswith("_abs"):
            by_type[question["question_type"]].append(question)
    queues = [by_type[name] for name in sorted(by_type)]
    longest = max(map(len, queues), default=0)
    return [queue[rank] for rank in range(longest) for queue in queues if rank < len(queue)]


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


def haystack_texts(questions: list[dict[str, Any]]) -> Iterator[str]:
    """Every turn text a run imports, as the store keeps it (what the pipeline embeds)."""
    for question in questions:
        for _, turn, _ in turn_items(question):
            if not is_blank(turn["content"]):
                yield normalize_content(turn["content"]).storage


# How a haystack is imported: "sessions" gives each turn its haystack session
# as session_id, as an agent's turns carry theirs (the store links each turn to
# the one before it, and "when" questions take the temporal route's link hop);
# "flat" gives none (the path before issue 34: no link, so no benchmark met
# that hop). Namespaces: "lme-<question id>", with ".flat" for the flat path.
PATHS = ("sessions", "flat")


def namespace_of(question_id: str, path: str) -> str:
    return f"lme-{question_id}" if path == "sessions" else f"lme-{question_id}.{path}"


def import_items(
    question: dict[str, Any], path: str
) -> tuple[list[store_pb2.ImportItem], list[str]]:
    """One haystack's non-blank turns as import items, in order, and their source ids."""
    items: list[store_pb2.ImportItem] = []
    sources: list[str] = []
    for source_id, turn, when in turn_items(question):
        if is_blank(turn["content"]):
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
                session_id=source_id.rsplit(":", 1)[0] if path == "sessions" else "",
            )
        )
        sources.append(source_id)
    return items, sources


def ingest(
    store: store_pb2_grpc.MemoryStoreServiceStub,
    namespace: str,
    question: dict[str, Any],
    path: str = "sessions",
) -> dict[str, list[str]]:
    """Import one haystack; returns memory id -> the source ids it stands for."""
    items, sources = import_items(question, path)

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


def rows_by_type(
    questions: list[dict[str, Any]], ranked: dict[str, list[str]]
) -> dict[str, list[dict[str, float]]]:
    per_type: dict[str, list[dict[str, float]]] = defaultdict(list)
    for question in questions:
        if question["question_id"] in ranked:
            per_type[question["question_type"]].append(
                score(ranked[question["question_id"]], question)
            )
    return per_type


def mean(rows: list[dict[str, float]], metric: str) -> float | None:
    values = [row[metric] for row in rows if metric in row]
    return sum(values) / len(values) if values else None


def print_table(per_type: dict[str, list[dict[str, float]]]) -> None:
    print(f"{'question type':<28}{'n':>4}" + "".join(f"{m:>11}" for m in METRICS))
    everything = [row for rows in per_type.values() for row in rows]
    for name, rows in [*sorted(per_type.items()), ("overall", everything)]:
        cells = [mean(rows, metric) for metric in METRICS]
        print(
            f"{name:<28}{len(rows):>4}"
            + "".join(f"{c:>11.3f}" if c is not None else f"{'-':>11}" for c in cells)
        )


def read_rankings(path: Path) -> dict[str, list[str]]:
    with open(path) as lines:
        return {row["query_id"]: row["ranked"] for row in map(json.loads, lines)}


def write_rankings(path: Path, ranked: dict[str, list[str]], **about: Any) -> None:
    """The rankings, and beside them what made them (bench/provenance.py; `about`:
    the settings, where the vectors came from)."""
    with open(path, "w") as out:
        for query_id, ids in ranked.items():
            out.write(json.dumps({"query_id": query_id, "ranked": ids}) + "\n")
    provenance.write_beside(path, **about)


def vectors_from(cache: VectorCache | None) -> dict[str, Any]:
    """Where a run's vectors came from: the cache file and the runtimes recorded in it."""
    if cache is None:
        return {"vectors": "the pipeline's local model"}
    return {"vector_cache": str(cache.path), "vector_cache_runtimes": cache.recorded_runtimes()}


def fold_of(question_id: str, folds: int) -> int:
    """A question's fold: by a hash of its id (stable, independent of file order)."""
    return int(hashlib.sha256(question_id.encode()).hexdigest(), 16) % folds


def fitted(questions: list[dict[str, Any]], ranked: dict[str, list[str]]) -> float:
    """What k-fold picks a configuration by: mean turn R@10."""
    rows = [r for rows in rows_by_type(questions, ranked).values() for r in rows]
    return mean(rows, "turn R@10") or 0.0


def kfold(questions: list[dict[str, Any]], files: list[Path], folds: int) -> None:
    """K-fold over questions: each fold is scored with the configuration whose mean
    turn R@10 is best on the other folds."""
    runs = {f.stem: read_rankings(f) for f in files}
    held_out: dict[str, list[str]] = {}
    for fold in range(folds):
        inside = [q for q in questions if fold_of(q["question_id"], folds) != fold]

        best = max(runs, key=lambda name, inside=inside: fitted(inside, runs[name]))
        print(f"fold {fold}: picked {best}")
        for q in questions:
            if fold_of(q["question_id"], folds) == fold and q["question_id"] in runs[best]:
                held_out[q["question_id"]] = runs[best][q["question_id"]]
    print(f"\n{folds}-fold cross-validated (each fold scored with the configuration picked above)")
    print_table(rows_by_type(questions, held_out))


def baselines(questions: list[dict[str, Any]], cache_path: Path, prefix: Path | None) -> None:
    cache = VectorCache(cache_path)
    cache.warn_runtime()
    ranked: dict[str, dict[str, list[str]]] = {"bm25": {}, "dense": {}, "rrf": {}}
    started = time.monotonic()
    for question in questions:
        ids, texts = [], []
        for source_id, turn, _ in turn_items(question):
            if not is_blank(turn["content"]):
                ids.append(source_id)
                texts.append(normalize_content(turn["content"]).storage)
        vectors = np.stack(cache.vectors(texts))
        [query_vector] = cache.vectors([question["question"]])
        by_words = baseline.bm25(question["question"], texts)
        by_meaning = baseline.dense(query_vector, vectors)
        fused = baseline.rrf(by_words, by_meaning)
        for name, order in (("bm25", by_words), ("dense", by_meaning), ("rrf", fused)):
            ranked[name][question["question_id"]] = [ids[i] for i in order[:RECALL_LIMIT]]
    print(
        f"baselines over {len(questions)} questions in {time.monotonic() - started:.0f} s "
        f"({cache.computed} texts embedded now, the rest from {cache_path})"
    )
    for name, rankings in ranked.items():
        print(f"\n{name} (top {RECALL_LIMIT} turns)")
        print_table(rows_by_type(questions, rankings))
        if prefix:
            write_rankings(prefix.with_suffix(f".{name}.jsonl"), rankings, **vectors_from(cache))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help=".json or .json.gz")
    parser.add_argument("--offset", type=int, default=0, help="skip the first N questions")
    parser.add_argument("--limit", type=int, help="only N questions (quick iterations)")
    parser.add_argument("--rankings-out", type=Path)
    parser.add_argument(
        "--set", action="append", default=[], help="engram.yaml key=value, e.g. search.fusion=rrf"
    )
    parser.add_argument("--vector-cache", type=Path, default=CACHE_PATH)
    parser.add_argument(
        "--live-model", action="store_true", help="the pipeline runs the model (no vector cache)"
    )
    parser.add_argument(
        "--data-dir", type=Path, help="keep the database here; one that holds it is reused"
    )
    parser.add_argument(
        "--path",
        choices=PATHS,
        default="sessions",
        help="import path (sessions: each turn's haystack session as session_id; flat: none)",
    )
    parser.add_argument("--baselines", action="store_true", help="BM25, dense, RRF; no suite")
    parser.add_argument("--score", type=Path, nargs="+", help="rankings files to score; no suite")
    parser.add_argument("--kfold", type=int, help="with --score: K-fold over questions")
    args = parser.parse_args()
    questions = scored_questions(args.input)[args.offset :]
    if args.limit:
        questions = questions[: args.limit]
    if args.score:
        for path in args.score:
            print(f"\n{path}")
            print_table(rows_by_type(questions, read_rankings(path)))
        if args.kfold:
            kfold(questions, args.score, args.kfold)
        return 0
    print(provenance.summary(), flush=True)
    if args.baselines:
        baselines(questions, args.vector_cache, args.rankings_out)
        return 0
    settings: dict[str, Any] = {}
    for item in args.set:
        merge(settings, parse_setting(item))
    with contextlib.ExitStack() as stack:
        cache = None
        suite_settings = dict(settings)
        if not args.live_model:
            cache = VectorCache(args.vector_cache)
            suite_settings = merge(stack.enter_context(serving(cache)), settings)
        return run(args, questions, settings, suite_settings, cache)


def run(
    args: argparse.Namespace,
    questions: list[dict[str, Any]],
    settings: dict[str, Any],
    suite_settings: dict[str, Any],
    cache: VectorCache | None,
) -> int:
    latencies: list[float] = []
    degraded = 0
    saved = args.data_dir / "stands_for.json" if args.data_dir else None
    reuse = saved is not None and saved.exists()
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
    database = provenance.kept_database(
        args.data_dir, reuse, settings=settings, path=args.path, **vectors_from(cache)
    )
    if reuse and database is not None and database.get("path", "flat") != args.path:
        raise SystemExit(f"{args.data_dir} holds the {database.get('path', 'flat')} path")
    ranked: dict[str, list[str]] = {}
    with running_suite(suite_settings, data_dir=args.data_dir) as suite:
        store = store_pb2_grpc.MemoryStoreServiceStub(grpc.insecure_channel(suite.store))
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        started = time.monotonic()
        stands_for: dict[str, dict[str, list[str]]] = (
            json.loads(saved.read_text()) if saved is not None and reuse else {}
        )
        for question in questions:
            namespace = namespace_of(question["question_id"], args.path)
            if namespace not in stands_for:
                stands_for[namespace] = ingest(store, namespace, question, args.path)
        if saved is not None:
            saved.write_text(json.dumps(stands_for))
        ingest_s = time.monotonic() - started
        memories = sum(
            len(stands_for[namespace_of(q["question_id"], args.path)]) for q in questions
        )
        embed_s = wait_embedded(jobs, timeout_s=4 * 3600)

        for question in questions:
            namespace = namespace_of(question["question_id"], args.path)
            request = search_pb2.RecallRequest(
                namespace=namespace, query=question["question"], limit=RECALL_LIMIT, min_score=0.0
            )
            request.asked_at.FromDatetime(session_time(question["question_date"]))
            t0 = time.perf_counter()
            response = search.Recall(request)
            latencies.append((time.perf_counter() - t0) * 1000)
            degraded += response.degraded
            ranked[question["question_id"]] = [
                s for r in response.results for s in stands_for[namespace][r.memory.id]
            ]
    if args.rankings_out:
        write_rankings(
            args.rankings_out,
            ranked,
            settings=settings,
            data_dir=args.data_dir,
            database=database,
            **vectors_from(cache),
        )

    latencies.sort()
    print(f"input: {args.input}  import path: {args.path}  settings: {settings or 'defaults'}")
    print(
        f"questions: {len(questions)} from #{args.offset} (abstention excluded)  "
        f"memories: {memories}{' (database reused)' if reuse else ''}  ingest {ingest_s:.1f} s  "
        f"embedding wait {embed_s:.1f} s"
        + (
            f" (vectors from {cache.path}; {cache.computed} texts embedded now)"
            if cache
            else " (the pipeline's local model)"
        )
    )
    print(
        f"recall latency over gRPC: p50 {latencies[len(latencies) // 2]:.1f} ms  "
        f"p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms  degraded answers: {degraded}"
    )
    print_table(rows_by_type(questions, ranked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
