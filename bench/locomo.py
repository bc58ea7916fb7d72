"""Retrieval quality on LoCoMo through the public gRPC API.

For each conversation: import its turns into a namespace of its own (content
"Speaker: text" plus " [shares image: caption]", source_id = dia_id,
event_time = the session date), wait until every memory is embedded, then ask
every question of categories 1-4 through Recall with limit 10 and score the
ranked source ids against the question's evidence.

    .venv/bin/python bench/locomo.py [--input FILE] [--rankings-out FILE] [--set search.fusion=rrf]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import timestamp_pb2

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2, job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from suite import ROOT, running_suite  # noqa: E402

DEFAULT_INPUT = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
METRICS = ("R@5", "R@10", "Hit@10", "MRR", "nDCG@10", "SessR@10")
_EVIDENCE = re.compile(r"D(\d+):0*(\d+)")


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime (the file gives no zone; UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turns(conversation: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], datetime]]:
    sessions = sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))
    for number in sessions:
        when = session_time(conversation[f"session_{number}_date_time"])
        for turn in conversation[f"session_{number}"]:
            yield number, turn, when


def evidence_ids(raw: list[str], known: set[str]) -> tuple[list[str], int]:
    """Repair the file's known malformations ("D8:6; D9:17", "D:11:26", "D30:05");
    drop ids that name no turn. Returns (ids, dropped)."""
    ids: list[str] = []
    dropped = 0
    for entry in raw:
        for part in re.split(r"[;,\s]+", entry.strip()):
            if not part:
                continue
            match = _EVIDENCE.fullmatch(re.sub(r"^D:", "D", part))
            candidate = f"D{match[1]}:{match[2]}" if match else None
            if candidate in known:
                ids.append(candidate)
            else:
                dropped += 1
    return list(dict.fromkeys(ids)), dropped


def score(ranked: list[str], evidence: list[str], session_of: dict[str, int]) -> dict[str, float]:
    top = ranked[:10]
    position = {source: rank for rank, source in enumerate(top)}
    hits = sorted(position[e] for e in evidence if e in position)
    ideal = sum(1 / math.log2(r + 2) for r in range(min(len(evidence), 10)))
    wanted_sessions = {session_of[e] for e in evidence}
    found_sessions = {session_of[s] for s in top if s in session_of}
    return {
        "R@5": sum(h < 5 for h in hits) / len(evidence),
        "R@10": len(hits) / len(evidence),
        "Hit@10": float(bool(hits)),
        "MRR": 1 / (hits[0] + 1) if hits else 0.0,
        "nDCG@10": sum(1 / math.log2(h + 2) for h in hits) / ideal,
        "SessR@10": len(wanted_sessions & found_sessions) / len(wanted_sessions),
    }


def ingest(store: store_pb2_grpc.MemoryStoreServiceStub, sample: dict[str, Any]) -> int:
    namespace = sample["sample_id"]

    def batches() -> Iterator[store_pb2.ImportMemoriesRequest]:
        items = []
        for _, turn, when in turns(sample["conversation"]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares image: {turn['blip_caption']}]"
            event_time = timestamp_pb2.Timestamp()
            event_time.FromDatetime(when)
            items.append(
                store_pb2.ImportItem(
                    content=content,
                    who=turn["speaker"],
                    source_type="locomo",
                    source_id=turn["dia_id"],
                    event_time=event_time,
                )
            )
        for start in range(0, len(items), 500):
            yield store_pb2.ImportMemoriesRequest(
                namespace=namespace, items=items[start : start + 500]
            )

    response = store.ImportMemories(batches())
    return int(response.created_count + response.deduplicated_count)


def wait_embedded(jobs: job_queue_pb2_grpc.JobQueueServiceStub, timeout_s: float = 1800) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        stats = jobs.GetQueueStats(job_queue_pb2.GetQueueStatsRequest())
        if stats.live_memory_count and stats.indexed_memory_count >= stats.live_memory_count:
            return time.monotonic() - started
        time.sleep(0.5)
    raise TimeoutError("memories were not embedded in time")


def parse_setting(text: str) -> dict[str, Any]:
    key, _, value = text.partition("=")
    tree: dict[str, Any] = {}
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = yaml.safe_load(value)
    return tree


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    for key, value in b.items():
        a[key] = merge(a.get(key, {}), value) if isinstance(value, dict) else value
    return a


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--rankings-out", type=Path)
    parser.add_argument(
        "--set", action="append", default=[], help="engram.yaml key=value, e.g. search.fusion=rrf"
    )
    args = parser.parse_args()
    samples = json.loads(args.input.read_text())
    settings: dict[str, Any] = {}
    for item in args.set:
        merge(settings, parse_setting(item))

    per_question: list[tuple[int, dict[str, float]]] = []
    skipped = dropped = 0
    latencies: list[float] = []
    degraded = 0  # answers without the vector channel (query embedding failed or timed out)
    with running_suite(settings) as suite:
        store_channel = grpc.insecure_channel(suite.store)
        search_channel = grpc.insecure_channel(suite.search)
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        started = time.monotonic()
        memories = sum(ingest(store, sample) for sample in samples)
        ingest_s = time.monotonic() - started
        embed_s = wait_embedded(jobs)
        rankings = open(args.rankings_out, "w") if args.rankings_out else None  # noqa: SIM115
        for sample in samples:
            namespace = sample["sample_id"]
            session_of = {t["dia_id"]: n for n, t, _ in turns(sample["conversation"])}
            for index, qa in enumerate(sample["qa"]):
                if qa["category"] not in CATEGORIES:
                    continue
                evidence, lost = evidence_ids(qa.get("evidence", []), set(session_of))
                dropped += lost
                t0 = time.perf_counter()
                response = search.Recall(
                    search_pb2.RecallRequest(namespace=namespace, query=qa["question"], limit=10)
                )
                latencies.append((time.perf_counter() - t0) * 1000)
                degraded += response.degraded
                ranked = [r.memory.source_id for r in response.results]
                if rankings:
                    rankings.write(
                        json.dumps({"query_id": f"{namespace}:q{index}", "ranked": ranked}) + "\n"
                    )
                if not evidence:
                    skipped += 1
                    continue
                per_question.append((qa["category"], score(ranked, evidence, session_of)))
        if rankings:
            rankings.close()

    latencies.sort()
    print(f"input: {args.input}  settings: {settings or 'defaults'}")
    print(
        f"memories: {memories}  ingest {ingest_s:.1f} s  embedding wait {embed_s:.1f} s  "
        f"questions scored: {len(per_question)}  (no usable evidence: {skipped}; evidence ids dropped: {dropped})"
    )
    print(
        f"recall latency over gRPC: p50 {latencies[len(latencies) // 2]:.1f} ms  p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms  "
        f"degraded answers (keywords only): {degraded}"
    )
    header = f"{'category':<14}{'n':>5}" + "".join(f"{m:>10}" for m in METRICS)
    print(header)
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for category, metrics in per_question:
        groups[f"{category} {CATEGORIES[category]}"].append(metrics)
        groups["overall"].append(metrics)
    for name in [*sorted(k for k in groups if k != "overall"), "overall"]:
        rows = groups[name]
        print(
            f"{name:<14}{len(rows):>5}"
            + "".join(f"{sum(r[m] for r in rows) / len(rows):>10.3f}" for m in METRICS)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
