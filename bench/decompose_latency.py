"""The cost of question decomposition (issue 19, services/search/decompose.py):
Recall latency over gRPC of the LongMemEval dev questions the rules split, and of
as many that they do not, with `search.decompose_weight` 0 and on, alternated.

    PYTHONPATH=.:gen .venv/bin/python bench/decompose_latency.py --data-dir DIR
        [--weights 0,1,0,1] [--repeats 5] [--out bench/results/decompose_latency.json]

DIR is a database bench/longmemeval.py has filled (a copy of a kept one: each
pass starts the suite over it with the pass's weight). Queries are served from
bench/embed_cache.py's vector cache as in longmemeval.py; each question is asked
once to warm the search service's query-vector cache, then `--repeats` times, so
the figures are the cached-vector Recall (the part's vectors cached too). Passes
run in the order `--weights` gives (0,1,0,1: drift in the machine's load hits
both alike).
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

from embed_cache import DEFAULT_PATH as CACHE_PATH  # noqa: E402
from embed_cache import VectorCache, serving  # noqa: E402
from longmemeval import DEFAULT_INPUT, RECALL_LIMIT, scored_questions, session_time  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from locomo import merge  # noqa: E402
from services.search.decompose import parts  # noqa: E402
from suite import running_suite  # noqa: E402


def measure(
    data_dir: Path, weight: float, questions: list[dict[str, Any]], repeats: int
) -> list[float]:
    """Milliseconds per Recall, `repeats` per question, after one warm-up each."""
    latencies: list[float] = []
    with contextlib.ExitStack() as stack:
        cache = VectorCache(CACHE_PATH)
        settings = merge(
            stack.enter_context(serving(cache)), {"search": {"decompose_weight": weight}}
        )
        suite = stack.enter_context(running_suite(settings, data_dir=data_dir))
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        for round_ in range(repeats + 1):
            for question in questions:
                request = search_pb2.RecallRequest(
                    namespace=f"lme-{question['question_id']}",
                    query=question["question"],
                    limit=RECALL_LIMIT,
                    min_score=0.0,
                )
                request.asked_at.FromDatetime(session_time(question["question_date"]))
                t0 = time.perf_counter()
                response = search.Recall(request)
                if round_:
                    latencies.append((time.perf_counter() - t0) * 1000)
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
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--weights", default="0,1,0,1")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    questions = scored_questions(DEFAULT_INPUT)
    split = [q for q in questions if parts(q["question"])]
    whole = [q for q in questions if not parts(q["question"])][: len(split)]
    passes = []
    for weight in (float(w) for w in args.weights.split(",")):
        entry: dict[str, Any] = {"decompose_weight": weight}
        for name, chosen in (("split", split), ("not split", whole)):
            entry[name] = summary(measure(args.data_dir, weight, chosen, args.repeats))
            print(f"weight {weight} {name}: {entry[name]}", flush=True)
        passes.append(entry)
    if args.out:
        args.out.write_text(json.dumps({"passes": passes}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
