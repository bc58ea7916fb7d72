"""Pipeline V2 overhead: extract jobs per second with an instant scripted LLM.

    .venv/bin/python bench/pipeline_bench.py [--jobs N] [--quick]

One run, on the same machine:

1. a scripted Ollama LLM (tests/llm_fakes.py, a ThreadingHTTPServer in this
   process) that answers at once: three facts per memory, then one decision
   per fact (ADD or NONE, alternating);
2. store, search and pipeline as three real processes (`engram serve ...`),
   `memory.pipelineV2.enabled: true`, four extract workers, LLM concurrency 4,
   embeddings `none` (keywords-only candidates, no vector pre-fetch: the local
   model would otherwise be the bottleneck, which is not what this measures);
3. N memories imported in one ImportMemories stream; the clock runs from the
   import until GetQueueStats shows N completed extract jobs;
4. the baseline: the very same LLM requests the pipeline made (recorded by the
   fake), replayed by one httpx client with the same concurrency (4), with no
   Engram in the loop. The difference per job is Engram's overhead: leasing,
   recall for candidates, prompt building, parsing, CompleteExtractJob's
   transaction, lease renewal.

Prints a table, writes bench/results/pipeline-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(ROOT / "tests"), str(ROOT / "bench")]

import provenance  # noqa: E402

from engram.common.v1 import job_pb2  # noqa: E402
from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2 as jq  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from llm_fakes import (  # noqa: E402
    LlmServer,
    decision_answer,
    extraction_answer,
    fact,
    is_extraction,
    memory_of,
)
from suite import free_port, wait_serving  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "4"))
FACTS_PER_JOB = 3
TARGET_JOBS_PER_S = 50.0


FIRST = [
    "Ada",
    "Ben",
    "Cleo",
    "Dov",
    "Eli",
    "Fay",
    "Gus",
    "Hal",
    "Ida",
    "Jon",
    "Kai",
    "Lea",
    "Max",
    "Nia",
    "Oto",
    "Pia",
    "Raj",
    "Sol",
    "Tia",
    "Uma",
]
LAST = [
    "Abe",
    "Bose",
    "Cruz",
    "Diaz",
    "Endo",
    "Ford",
    "Gray",
    "Holm",
    "Ives",
    "Jung",
    "Kerr",
    "Lund",
    "Moss",
    "Nagy",
    "Ortiz",
    "Park",
]
VERBS = [
    "maintains",
    "reviews",
    "designs",
    "funds",
    "tests",
    "documents",
    "migrates",
    "benchmarks",
    "audits",
]
THINGS = [
    "billing",
    "search",
    "payroll",
    "invoicing",
    "routing",
    "caching",
    "logging",
    "alerting",
    "backups",
]
PLACES = [
    "Lisbon",
    "Oslo",
    "Lima",
    "Pune",
    "Quito",
    "Riga",
    "Seoul",
    "Tunis",
    "Umea",
    "Vigo",
    "Wuhan",
]


def memory_text(i: int) -> str:
    """Names, verbs, systems and cities cycle at different periods, so a fact's
    keywords match a bounded share of the other memories (as real notes do)."""
    person = f"{FIRST[i % len(FIRST)]} {LAST[(i // len(FIRST)) % len(LAST)]}"
    return (
        f"{person} {VERBS[i % len(VERBS)]} the {THINGS[i % len(THINGS)]} service "
        f"from {PLACES[i % len(PLACES)]} since {1990 + i % 35}"
    )


def script(prompt: str) -> str:
    """Three facts per memory (its parts); decisions alternate ADD and NONE."""
    if is_extraction(prompt):
        words = memory_of(prompt).split()
        person = " ".join(words[:2])
        facts = [
            f"{person} {words[2]} the {words[4]} service",
            f"{person} works from {words[7]}",
            f"{person} has done so since {words[9]}",
        ]
        return extraction_answer([fact(f, confidence=0.9) for f in facts[:FACTS_PER_JOB]])
    action = "ADD" if len(prompt) % 2 else "NONE"
    return decision_answer(action, confidence=0.9, reason="benchmark")


def start(name: str, config_path: Path, log_dir: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "gen")]))
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "serve", name, "--config", str(config_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log_dir / f"{name}.log", "w"),
    )


def completed_extract(jobs: job_queue_pb2_grpc.JobQueueServiceStub) -> tuple[int, int]:
    stats = jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=10)
    done = dead = 0
    for count in stats.counts:
        if count.job_type == job_pb2.JOB_TYPE_EXTRACT:
            if count.status == job_pb2.JOB_STATUS_COMPLETED:
                done += count.count
            elif count.status == job_pb2.JOB_STATUS_DEAD:
                dead += count.count
    return done, dead


def run_pipeline(n: int, llm: LlmServer, tmp: Path) -> dict[str, Any]:
    ports = {name: free_port() for name in ("store", "store_internal", "search", "pipeline")}
    config = {
        "server": {"ports": ports},
        "clients": {
            "store_address": f"127.0.0.1:{ports['store']}",
            "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
            "search_address": f"127.0.0.1:{ports['search']}",
        },
        "storage": {"path": str(tmp / "engram.db")},
        "memory": {"pipelineV2": {"enabled": True, "workerPollMs": 100}},
        "providers": {
            "embedding": {"kind": "none"},
            "llm": {"kind": "ollama", "base_url": llm.url, "concurrency": CONCURRENCY},
        },
        "workers": {"extract": {"concurrency": CONCURRENCY}},
        "logging": {"level": "WARNING"},
    }
    config_path = tmp / "engram.yaml"
    config_path.write_text(yaml.safe_dump(config))
    # In dependency order: a pipeline started before its store finds it unreachable
    # and backs off (1 s doubling), which would put seconds of startup into the timing.
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name in ("store", "search", "pipeline"):
            processes.append(start(name, config_path, tmp))
            wait_serving(f"127.0.0.1:{ports[name]}")
        with (
            grpc.insecure_channel(f"127.0.0.1:{ports['store']}") as channel,
            grpc.insecure_channel(f"127.0.0.1:{ports['store_internal']}") as jobs_channel,
        ):
            store = store_pb2_grpc.MemoryStoreServiceStub(channel)
            jobs = job_queue_pb2_grpc.JobQueueServiceStub(jobs_channel)
            llm.clear()
            started = time.perf_counter()
            batches = [
                store_pb2.ImportMemoriesRequest(
                    items=[
                        store_pb2.ImportItem(content=memory_text(i))
                        for i in range(lo, min(lo + 1000, n))
                    ]
                )
                for lo in range(0, n, 1000)
            ]
            store.ImportMemories(iter(batches), timeout=120)
            imported = time.perf_counter()
            while True:
                done, dead = completed_extract(jobs)
                if done + dead >= n:
                    break
                time.sleep(0.2)  # GetQueueStats counts whole tables: poll gently
            elapsed = time.perf_counter() - started
        with grpc.insecure_channel(f"127.0.0.1:{ports['pipeline']}") as channel:
            status = pipeline_pb2_grpc.PipelineServiceStub(channel).GetStatus(
                pipeline_pb2.GetStatusRequest(), timeout=10
            )
        [worker] = [w for w in status.workers if w.name == "extract"]
        return {
            "worker_failed": worker.failed_count,
            "worker_released": worker.released_count,
            "worker_last_error": worker.last_error,
            "jobs": n,
            "completed": done,
            "dead": dead,
            "import_s": imported - started,
            "elapsed_s": elapsed,
            "llm_requests": len(llm.requests_to("POST", "/api/generate")),
        }
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


async def replay(llm: LlmServer, bodies: list[Any]) -> float:
    """The recorded LLM requests, CONCURRENCY at a time, with no Engram in the loop."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            response = await http.post("/api/generate", json=body)
            response.raise_for_status()
            json.loads(response.json()["response"])

    async with httpx.AsyncClient(base_url=llm.url, timeout=30) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(CONCURRENCY)))
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="200 jobs")
    args = parser.parse_args()
    n = 200 if args.quick else args.jobs

    llm = LlmServer(script)
    llm.start()
    try:
        with tempfile.TemporaryDirectory(prefix="engram-pipeline-bench-") as tmp:
            pipeline = run_pipeline(n, llm, Path(tmp))
        bodies = [r.json for r in llm.requests_to("POST", "/api/generate")]
        baseline_s = asyncio.run(replay(llm, bodies))
    finally:
        llm.stop()

    jobs_per_s = pipeline["completed"] / pipeline["elapsed_s"]
    baseline_jobs_per_s = n / baseline_s
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "setup": {
            "facts_per_job": FACTS_PER_JOB,
            "extract_workers": CONCURRENCY,
            "llm_concurrency": CONCURRENCY,
            "embedding": "none",
        },
        "pipeline": pipeline,
        "pipeline_jobs_per_s": jobs_per_s,
        "pipeline_ms_per_job": 1000 * pipeline["elapsed_s"] / n,
        "llm_requests_per_job": pipeline["llm_requests"] / n,
        "baseline_llm_only_s": baseline_s,
        "baseline_jobs_per_s": baseline_jobs_per_s,
        "baseline_ms_per_job": 1000 * baseline_s / n,
        "overhead_ms_per_job": 1000 * (pipeline["elapsed_s"] - baseline_s) / n,
        "target_jobs_per_s": TARGET_JOBS_PER_S,
        "met": jobs_per_s >= TARGET_JOBS_PER_S,
    }
    print(f"{'measure':<44}{'value':>12}")
    for label, key in (
        ("extract jobs (3 facts each)", "jobs"),
        ("LLM requests per job", "llm_requests_per_job"),
        ("pipeline: jobs/s", "pipeline_jobs_per_s"),
        ("pipeline: wall ms per job", "pipeline_ms_per_job"),
        ("baseline (LLM round trips only): jobs/s", "baseline_jobs_per_s"),
        ("baseline: wall ms per job", "baseline_ms_per_job"),
        ("Engram overhead: ms per job", "overhead_ms_per_job"),
    ):
        value = pipeline[key] if key == "jobs" else result[key]
        print(
            f"{label:<44}{value:>12.2f}" if isinstance(value, float) else f"{label:<44}{value:>12}"
        )
    print(f"target >= {TARGET_JOBS_PER_S:.0f} jobs/s: {'met' if result['met'] else 'NOT met'}")
    if pipeline["dead"]:
        print(f"warning: {pipeline['dead']} jobs went dead (see the logs)")
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS_DIR / f"pipeline-{stamp}.json").write_text(
        json.dumps(provenance.stamped(result), indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
