"""The cost of question decomposition (issue 19, services/search/decompose.py):
Recall latency over gRPC of the LongMemEval dev questions the rules split, and of
as many that they do not, with `search.decompose_weight` 0 and on, alternated.

    PYTHONPATH=.:gen .venv/bin/python bench/decompose_latency.py --data-dirs DIR_OFF DIR_ON
        [--weight 0.5] [--repeats 3] [--out bench/results/decompose_latency.json]

DIR_OFF and DIR_ON are two copies of a database bench/longmemeval.py has filled
(a kept one's copies): one suite runs over each, decomposition off and at
`--weight`, and every question is asked of both in turn (the order alternating),
so drift in the machine's load hits both alike. Queries are served from
bench/embed_cache.py's vector cache as in longmemeval.py; each question is asked
once to warm the search service's query-vector cache, then `--repeats` times, so
the figures are the cached-vector Recall (the parts' vectors cached too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import grpc

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

import provenance  # noqa: E402
from embed_cache import DEFAULT_PATH as CACHE_PATH  # noqa: E402
from embed_cache import VectorCache, serving  # noqa: E402
from longmemeval import DEFAULT_INPUT, RECALL_LIMIT, scored_questions, session_time  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from locomo import merge  # noqa: E402
from services.search.decompose import parts  # noqa: E402
from suite import running_suite  # noqa: E402


def measure(
    data_dirs: tuple[Path, Path],
    weight: float,
    questions: list[dict[str, Any]],
    repeats: int,
) -> dict[float, list[float]]:
    """Milliseconds per Recall by weight (0 and `weight`), `repeats` per question
    after one warm-up each: two suites, one per weight, each over its own copy
    of the database, asked in turn question by question (the order alternating),
    so the machine's load hits both alike."""
    latencies: dict[float, list[float]] = {0.0: [], weight: []}
    with contextlib.ExitStack() as stack:
        serve = stack.enter_context(serving(VectorCache(CACHE_PATH)))
        stubs = {}
        for data_dir, value in zip(data_dirs, (0.0, weight), strict=True):
            settings = merge(
                json.loads(json.dumps(serve)),
                {"search": {"decompose_weight": value, "query_embedding_timeout_ms": 20000}},
            )
            suite = stack.enter_context(running_suite(settings, data_dir=data_dir))
            stubs[value] = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        for round_ in range(repeats + 1):
            for index, question in enumerate(questions):
                request = search_pb2.RecallRequest(
                    namespace=f"lme-{question['question_id']}",
                    query=question["question"],
                    limit=RECALL_LIMIT,
                    min_score=0.0,
                )
                request.asked_at.FromDatetime(session_time(question["question_date"]))
                order = [0.0, weight] if (round_ + index) % 2 == 0 else [weight, 0.0]
                for value in order:
                    t0 = time.perf_counter()
                    response = stubs[value].Recall(request)
                    if round_:
                        latencies[value].append((time.perf_counter() - t0) * 1000)
                    assert not response.degraded, list(response.warnings)
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p95": ordered[int(len(ordered) * 0.95)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dirs", type=Path, nargs=2, required=True)
    parser.add_argument("--weight", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    questions = scored_questions(DEFAULT_INPUT)
    split = [q for q in questions if parts(q["question"])]
    whole = [q for q in questions if not parts(q["question"])][: len(split)]
    asked = split + whole
    measured = measure(tuple(args.data_dirs), args.weight, asked, args.repeats)
    results: dict[str, Any] = {"command": " ".join(sys.argv)}
    for value, times in measured.items():
        # each round asks every question in `asked` order: the split ones first
        split_times = [t for k, t in enumerate(times) if k % len(asked) < len(split)]
        whole_times = [t for k, t in enumerate(times) if k % len(asked) >= len(split)]
        for name, chosen in (("split", split_times), ("not split", whole_times)):
            results[f"weight {value} {name}"] = summary(chosen)
            print(f"weight {value} {name}: {results[f'weight {value} {name}']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(provenance.stamped(results), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
