"""Near-duplicate merging on LoCoMo dev: which turns the pipeline folds together.

Imports the conversations as bench/locomo.py does into `--data-dir` (or reuses
the database there), with `dedup.enabled` on, waits until every memory is
embedded and every near-duplicate check is done, then lists each merge (the
folded turn, its survivor, the cosine, both dates) and counts the merged turns
that a question cites as evidence (a merged turn is no longer returned, so its
source id cannot be). Afterwards `bench/locomo.py --data-dir DIR --set
dedup.enabled=true` asks the questions against the merged store.

    .venv/bin/python bench/near_dup_locomo.py --data-dir DIR [--input FILE] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

import provenance  # noqa: E402

from engram.common.v1 import job_pb2  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2, job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from locomo import DEFAULT_INPUT, evidence_ids, ingest, turns, wait_embedded  # noqa: E402
from suite import running_suite  # noqa: E402

OPEN = (job_pb2.JOB_STATUS_PENDING, job_pb2.JOB_STATUS_LEASED)


def wait_checked(jobs: job_queue_pb2_grpc.JobQueueServiceStub, timeout_s: float = 1800) -> float:
    """Seconds until no near-duplicate check is pending or leased."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        stats = jobs.GetQueueStats(job_queue_pb2.GetQueueStatsRequest())
        open_checks = sum(
            c.count
            for c in stats.counts
            if c.job_type == job_pb2.JOB_TYPE_NEAR_DUPLICATE and c.status in OPEN
        )
        if open_checks == 0:
            return time.monotonic() - started
        time.sleep(1.0)
    raise TimeoutError("near-duplicate checks were not done in time")


def check_counts(jobs: job_queue_pb2_grpc.JobQueueServiceStub) -> dict[str, int]:
    stats = jobs.GetQueueStats(job_queue_pb2.GetQueueStatsRequest())
    return {
        job_pb2.JobStatus.Name(c.status): c.count
        for c in stats.counts
        if c.job_type == job_pb2.JOB_TYPE_NEAR_DUPLICATE
    }


def merges(store: store_pb2_grpc.MemoryStoreServiceStub, namespace: str) -> list[dict[str, Any]]:
    found = []
    token = ""
    while True:
        page = store.ListMemories(
            store_pb2.ListMemoriesRequest(
                namespace=namespace, deleted=True, page_size=500, page_token=token
            )
        )
        for memory in page.memories:
            events = store.ListMemoryHistory(
                store_pb2.ListMemoryHistoryRequest(namespace=namespace, memory_id=memory.id)
            ).events
            merged = [e for e in events if e.event_type == store_pb2.HISTORY_EVENT_TYPE_MERGED]
            if not merged:
                continue
            survivor = store.GetMemory(
                store_pb2.GetMemoryRequest(
                    namespace=namespace, id=merged[-1].metadata["survivor_id"]
                )
            ).memory
            found.append(
                {
                    "namespace": namespace,
                    "merged": memory.content,
                    "merged_source": memory.source_id,
                    "merged_date": memory.event_time.ToJsonString(),
                    "survivor": survivor.content,
                    "survivor_source": survivor.source_id,
                    "survivor_date": survivor.event_time.ToJsonString(),
                    "similarity": float(merged[-1].metadata["similarity"]),
                    "decided_by": merged[-1].metadata["decided_by"],
                }
            )
        token = page.next_page_token
        if not token:
            return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    samples = json.loads(args.input.read_text())
    reuse = (args.data_dir / "engram.db").exists()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    with running_suite({"dedup": {"enabled": True}}, data_dir=args.data_dir) as suite:
        store = store_pb2_grpc.MemoryStoreServiceStub(grpc.insecure_channel(suite.store))
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        imported = 0 if reuse else sum(ingest(store, sample) for sample in samples)
        embed_s = wait_embedded(jobs)
        check_s = wait_checked(jobs)
        found: list[dict[str, Any]] = []
        evidence_lost = 0
        questions_hit = 0
        for sample in samples:
            namespace = sample["sample_id"]
            of_sample = merges(store, namespace)
            found.extend(of_sample)
            known = {t["dia_id"] for _, t, _ in turns(sample["conversation"])}
            cited: set[str] = set()
            for qa in sample["qa"]:
                if qa.get("category") in (1, 2, 3, 4):
                    ids, _ = evidence_ids(qa.get("evidence", []), known)
                    if {m["merged_source"] for m in of_sample} & set(ids):
                        questions_hit += 1
                    cited.update(ids)
            evidence_lost += sum(m["merged_source"] in cited for m in of_sample)
        summary = {
            "imported": imported,
            "embed_wait_s": round(embed_s, 1),
            "check_wait_s": round(check_s, 1),
            "checks": check_counts(jobs),
            "merges": len(found),
            "merged_turns_cited_as_evidence": evidence_lost,
            "questions_citing_a_merged_turn": questions_hit,
            "same_speaker": sum(
                m["merged"].split(":", 1)[0] == m["survivor"].split(":", 1)[0] for m in found
            ),
            "same_date": sum(m["merged_date"] == m["survivor_date"] for m in found),
        }
        print(json.dumps(summary, indent=2))
        for m in sorted(found, key=lambda m: -m["similarity"]):
            print(
                f"{m['similarity']:.3f} {m['merged_source']} -> {m['survivor_source']}: "
                f"{m['merged']!r} => {m['survivor']!r}"
            )
        if args.json_out:
            args.json_out.write_text(
                json.dumps(provenance.stamped({"summary": summary, "merges": found}), indent=2)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
