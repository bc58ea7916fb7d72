"""Recall latency at 100k memories with sentence vectors (issue 19), next to the
same Recall without them and next to recall_latency.py's raw-SQL floor, in one run
on one database.

    PYTHONPATH=.:gen .venv/bin/python bench/sentence_latency.py [--queries 200] [--weights 0,1.0]
        [--dir /tmp/engram-sentence-latency] [--prepare-only]

The database is a copy of bench/recall_latency.py's cached 100k file (build it
with that script first), migrated to the current schema, with the sentence
vectors of every synthetic memory of two or more sentences written into
`embeddings.parts`: the real MiniLM vectors of its sentences (bench/latency_data.py
embeds every distinct sentence), stored as the embed worker's would be
(services/common/vectors.py normalized_parts_f16). The shared cache is never
migrated (other checkouts read it). Each pass is recall_latency.measure_size
(cached vector and with embedding, each interleaved with the floor) under one
`search.sentence_weight` (0: no sentence vectors read), in the order `--weights`
gives (0,1.0,0,1.0 alternates, so drift in the machine's load hits both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

import latency_data as data  # noqa: E402
import provenance  # noqa: E402
import recall_latency  # noqa: E402

from services.common.config import load_config  # noqa: E402
from services.common.providers.local_embedding import local_embedding  # noqa: E402
from services.common.vectors import normalized_parts_f16  # noqa: E402
from services.storage.db import open_read_write  # noqa: E402
from services.storage.sqlite_migrations import apply_migrations  # noqa: E402

SIZE = 100_000
ENV = "ENGRAM_SEARCH__SENTENCE_WEIGHT"


def with_parts(
    source: Path, target: Path, corpus: data.Corpus, sentences: np.ndarray
) -> dict[str, Any]:
    """Copy `source` to `target` (once) and write the synthetic memories' parts."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        dst = sqlite3.connect(target)
        src.backup(dst)
        src.close()
        dst.close()
    conn = open_read_write(target, synchronous="NORMAL")
    apply_migrations(conn)
    hashes = {
        row[0]: row[1]
        for row in conn.execute(
            "SELECT source_id, content_hash FROM memories WHERE namespace = ?", (data.NAMESPACE,)
        )
    }
    counts: list[int] = []
    updates = []
    for i in range(corpus.real_turns, SIZE):
        picked = corpus.parts[i]
        if len(picked) < 2:
            continue
        flat = sentences[list(picked)].reshape(-1)
        updates.append(
            (normalized_parts_f16(flat, sentences.shape[1]), hashes[corpus.source_ids[i]])
        )
        counts.append(len(picked))
    conn.execute("BEGIN")
    conn.executemany(
        "UPDATE embeddings SET parts = ? WHERE namespace = 'latency' AND content_hash = ?",
        updates,
    )
    conn.execute("COMMIT")
    conn.close()
    return {
        "memories_with_parts": len(counts),
        "part_vectors": int(sum(counts)),
        "parts_per_memory_with_parts": float(np.mean(counts)) if counts else 0.0,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    provider = local_embedding(load_config().providers.embedding.runtime)
    await provider.warm_up()
    corpus = data.build_corpus(SIZE)
    vecs = data.corpus_vectors(provider, corpus, recall_latency.CACHE, data.REAL_VECTORS)
    source = recall_latency.CACHE / f"recall-{SIZE}-r{min(vecs.real, SIZE)}.db"
    target = args.dir / source.name
    results: dict[str, Any] = {"command": " ".join(sys.argv), "started": time.strftime("%FT%T")}
    results["parts"] = with_parts(source, target, corpus, vecs.sentences)
    print(json.dumps(results["parts"]), flush=True)
    if args.prepare_only:
        return results
    all_questions = [q for q in data.load_queries() if q["question"].strip()]
    picked = random.Random(3).sample(all_questions, args.queries + 20)
    warm, questions = picked[:20], picked[20:]
    measure = argparse.Namespace(breakdown=False, profile=False, candidates=[400])
    passes: list[dict[str, Any]] = []
    lock = data.PageCacheLock([target])
    try:
        for weight in args.weights.split(","):
            os.environ[ENV] = weight
            print(f"measuring sentence_weight {weight} ...", flush=True)
            entry = await recall_latency.measure_size(
                SIZE, target, provider, questions, warm, measure
            )
            entry.pop("quantisation", None)
            passes.append({"sentence_weight": weight, **entry})
            print(summary_line(passes[-1]), flush=True)
    finally:
        lock.release()
        os.environ.pop(ENV, None)
    results["passes"] = passes
    return results


def summary_line(p: dict[str, Any]) -> str:
    cached, embedded = p["cached vector"], p["with embedding"]
    return (
        f"sentence_weight {p['sentence_weight']}: cached p50 {cached['recall']['p50']:.1f} ms "
        f"(floor {cached['floor']['p50']:.1f}), p95 {cached['recall']['p95']:.1f}; "
        f"with embedding p50 {embedded['recall']['p50']:.1f} ms "
        f"(floor {embedded['floor']['p50']:.1f}); hybrid R@10 {p['hybrid_evidence_R@10']:.3f}; "
        f"load {p['load_before']} -> {p['load_after']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--weights", default="0,1.0", help="search.sentence_weight of each pass, in order"
    )
    parser.add_argument("--prepare-only", action="store_true", help="build the database only")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/engram-sentence-latency"))
    parser.add_argument(
        "--out", type=Path, default=recall_latency.RESULTS / "sentence_latency.json"
    )
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    if args.prepare_only:
        return 0
    for p in results["passes"]:
        print(summary_line(p))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(provenance.stamped(results), indent=2, default=str))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
