"""Embedding throughput: the provider alone against the pipeline, in one run.

    PYTHONPATH=.:gen .venv/bin/python bench/embed_bench.py [--count 20000] [--trickle-seconds 30]
        [--rate 5] [--set KEY=VALUE ...] [--code DIR] [--skip provider,locomo,synthetic,trickle]
        [--json-out FILE]

1. Provider alone, in this process, on the same texts the pipeline gets (the LoCoMo dev
   turns, then the synthetic notes): sentences per second at batch sizes 1, 16, 64 and
   128; and the query embedding (one LoCoMo question at a time, each distinct) p50/p95,
   for the configured runtime and, beside it, the other local runtime when installed.
2. Pipeline end to end: a private suite (store, search, pipeline; `--code` runs another
   checkout's services), ImportMemories of the LoCoMo dev turns, then of `--count`
   synthetic notes (a fresh suite each); the clock runs from the end of the import until
   GetQueueStats shows every live memory indexed. Memories per second, and the ratio to
   the provider's own rate at the pipeline's batch size (64) on the same texts.
3. Trickle: in the synthetic suite, once it is drained, one Remember every 1/rate s for
   `--trickle-seconds`; for each, the time from Remember's answer until a Recall of its
   text returns it through the vector channel (recallable by meaning), p50/p95.
4. Where the time goes per batch (the pipeline's engram_embed_worker_stage_seconds from
   its /metrics, when the code has it): lease, tokenise, model, complete, and the time
   the model's loop waited for a lease or a completion slot.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(ROOT / "bench")]

import provenance  # noqa: E402
from pipeline_bench import memory_text  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2 as jq  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from locomo import DEFAULT_INPUT, ingest, parse_setting, turns  # noqa: E402
from suite import merge, running_suite  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
BATCHES = (1, 16, 64, 128)
PIPELINE_BATCH = 64  # providers.embedding.batch_size's default
STAGES = ("lease", "wait_lease", "tokenise", "model", "wait_complete", "complete")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def locomo_texts(samples: list[dict[str, Any]]) -> list[str]:
    """The contents bench/locomo.py's ingest stores, in its order."""
    texts = []
    for sample in samples:
        for _, turn, _ in turns(sample["conversation"]):
            content = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares image: {turn['blip_caption']}]"
            texts.append(content)
    return texts


def synthetic_text(i: int) -> str:
    return f"Note {i}: {memory_text(i)}"


# ---- 1. the provider alone -------------------------------------------------------------


def provider_alone(
    settings: dict[str, Any], locomo: list[str], synthetic: list[str], questions: list[str]
) -> dict[str, Any]:
    from services.common.config import load_config
    from services.common.providers.embedding import embedding_provider

    flat = flatten(settings)
    config = load_config(environ={}, overrides=flat)
    runtimes = [config.providers.embedding.runtime]
    if config.providers.embedding.kind == "local":
        other = "torch" if runtimes[0] == "onnx" else "onnx"
        runtimes.append(other)
    report: dict[str, Any] = {}
    for runtime in runtimes:
        provider = embedding_provider(
            load_config(environ={}, overrides={**flat, "providers.embedding.runtime": runtime})
        )
        try:
            asyncio.run(provider.embed(["warm up"]))
        except Exception as exc:  # the other runtime may not be installed
            report[runtime] = {"error": str(exc)}
            continue

        async def rates(
            texts: list[str], batches: tuple[int, ...], provider: Any = provider
        ) -> dict[str, float]:
            out = {}
            for batch in batches:
                sample = texts[: 128 if batch == 1 else 512]
                started = time.perf_counter()
                for lo in range(0, len(sample), batch):
                    await provider.embed(sample[lo : lo + batch])
                out[str(batch)] = len(sample) / (time.perf_counter() - started)
            return out

        async def query_ms(provider: Any = provider) -> list[float]:
            times = []
            for question in questions:
                started = time.perf_counter()
                await provider.embed([question])
                times.append((time.perf_counter() - started) * 1000)
            return times

        async def measure(provider: Any = provider) -> dict[str, Any]:
            locomo_rates = await rates(locomo, BATCHES)
            synthetic_rates = await rates(synthetic, (PIPELINE_BATCH,))
            times = await query_ms()
            await provider.close()
            return {
                "locomo_per_s": locomo_rates,
                "synthetic_per_s": synthetic_rates,
                "query_ms_p50": percentile(times, 0.5),
                "query_ms_p95": percentile(times, 0.95),
                "queries": len(times),
            }

        report[runtime] = asyncio.run(measure())
    return report


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# ---- 2. the pipeline end to end --------------------------------------------------------


def stage_totals(address: str) -> dict[str, tuple[float, float]]:
    """stage -> (seconds, batches) from the pipeline's /metrics (empty when absent)."""
    try:
        text = httpx.get(f"http://{address}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "engram_embed_worker_stage_seconds":
            continue
        for sample in family.samples:
            stage = sample.labels.get("stage", "")
            if sample.name.endswith("_sum"):
                sums[stage] = sample.value
            elif sample.name.endswith("_count"):
                counts[stage] = sample.value
    return {stage: (sums[stage], counts.get(stage, 0.0)) for stage in sums}


def breakdown(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], wall_s: float
) -> dict[str, Any]:
    stages = {}
    for stage in STAGES:
        seconds = after.get(stage, (0.0, 0.0))[0] - before.get(stage, (0.0, 0.0))[0]
        calls = after.get(stage, (0.0, 0.0))[1] - before.get(stage, (0.0, 0.0))[1]
        stages[stage] = {
            "seconds": seconds,
            "calls": calls,
            "ms_per_call": 1000 * seconds / calls if calls else 0.0,
        }
    batches = stages["complete"]["calls"]
    busy = stages["tokenise"]["seconds"] + stages["model"]["seconds"]
    return {
        "stages": stages,
        "batches": batches,
        "memories_per_batch": None,
        "model_busy_share": busy / wall_s if wall_s else 0.0,
        "model_idle_s": max(0.0, wall_s - busy),
    }


def wait_indexed(jobs: job_queue_pb2_grpc.JobQueueServiceStub, timeout_s: float = 3600) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        stats = jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=30)
        if stats.live_memory_count and stats.indexed_memory_count >= stats.live_memory_count:
            return time.perf_counter() - started
        time.sleep(0.1)
    raise TimeoutError("memories were not embedded in time")


def pipeline_run(suite: Any, load: Any, count: int) -> dict[str, Any]:
    """`load(store)` imports the memories; then wait until all are indexed."""
    with (
        grpc.insecure_channel(suite.store) as store_channel,
        grpc.insecure_channel(suite.store_internal) as jobs_channel,
    ):
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(jobs_channel)
        metrics_address = (suite.metrics or {}).get("pipeline", "")
        before = stage_totals(metrics_address) if metrics_address else {}
        started = time.perf_counter()
        load(store)
        imported = time.perf_counter()
        embed_s = wait_indexed(jobs)
        after = stage_totals(metrics_address) if metrics_address else {}
    wall = imported - started + embed_s
    result = {
        "memories": count,
        "import_s": imported - started,
        "embed_after_import_s": embed_s,
        "memories_per_s": count / embed_s,
        "memories_per_s_from_import_start": count / wall,
    }
    if after:
        result["breakdown"] = breakdown(before, after, wall)
        batches = result["breakdown"]["batches"]
        result["breakdown"]["memories_per_batch"] = count / batches if batches else None
    return result


def import_synthetic(store: store_pb2_grpc.MemoryStoreServiceStub, count: int) -> None:
    for lo in range(0, count, 20000):  # the store takes at most 25,000 items a stream
        hi = min(lo + 20000, count)
        requests = (
            store_pb2.ImportMemoriesRequest(
                items=[
                    store_pb2.ImportItem(content=synthetic_text(i))
                    for i in range(b, min(b + 500, hi))
                ]
            )
            for b in range(lo, hi, 500)
        )
        store.ImportMemories(requests, timeout=600)


# ---- 3. trickle ------------------------------------------------------------------------


def trickle(suite: Any, seconds: float, rate: float) -> dict[str, Any]:
    latencies: list[float] = []
    missed = 0
    lock = threading.Lock()
    store_channel = grpc.insecure_channel(suite.store)
    search_channel = grpc.insecure_channel(suite.search)
    store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
    search = search_pb2_grpc.SearchServiceStub(search_channel)

    def one(i: int) -> None:
        nonlocal missed
        content = f"Trickle {i}: {memory_text(500_000 + i * 7)} and a walk by the river"
        memory = store.Remember(
            store_pb2.RememberRequest(namespace="trickle", content=content), timeout=30
        ).memory
        remembered = time.perf_counter()
        while time.perf_counter() - remembered < 30:
            response = search.Recall(
                search_pb2.RecallRequest(namespace="trickle", query=content, limit=5), timeout=30
            )
            if any(r.memory.id == memory.id and r.vector.rank > 0 for r in response.results):
                with lock:
                    latencies.append((time.perf_counter() - remembered) * 1000)
                return
            time.sleep(0.02)
        with lock:
            missed += 1

    total = int(seconds * rate)
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        started = time.perf_counter()
        futures = []
        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, i))
        for future in futures:
            future.result()
    store_channel.close()
    search_channel.close()
    return {
        "remembered": total,
        "rate_per_s": rate,
        "recallable_ms_p50": percentile(latencies, 0.5),
        "recallable_ms_p95": percentile(latencies, 0.95),
        "recallable_ms_max": max(latencies) if latencies else float("nan"),
        "not_recallable_in_30_s": missed,
    }


# ---- main ------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--count", type=int, default=20000, help="synthetic memories")
    parser.add_argument("--trickle-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=5.0, help="trickle Remembers per second")
    parser.add_argument("--set", action="append", default=[], help="engram.yaml key=value")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout the suite runs from")
    parser.add_argument(
        "--skip", default="", help="comma-separated: provider,locomo,synthetic,trickle"
    )
    parser.add_argument(
        "--provider-runtime",
        help="the local runtime the suite's pipeline runs (default: the configured one); "
        "its rate is the baseline of the ratio",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    settings: dict[str, Any] = {}
    for item in args.set:
        merge(settings, parse_setting(item))
    samples = json.loads(args.input.read_text())
    locomo = locomo_texts(samples)
    synthetic = [synthetic_text(i) for i in range(max(args.count, 1024))]
    questions = list(
        dict.fromkeys(qa["question"] for s in samples for qa in s["qa"] if qa["category"] != 5)
    )[:200]

    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
        },
        "code": str(args.code),
        "settings": settings,
    }
    if "provider" not in skip:
        result["provider"] = provider_alone(settings, locomo, synthetic, questions)
        print(json.dumps(result["provider"], indent=1))
    if "locomo" not in skip:
        with running_suite(settings, code=args.code.resolve()) as suite:
            result["pipeline_locomo"] = pipeline_run(
                suite, lambda store: [ingest(store, s) for s in samples], len(locomo)
            )
        print("locomo", json.dumps(result["pipeline_locomo"], indent=1))
    if not {"synthetic", "trickle"} <= skip:
        with running_suite(settings, code=args.code.resolve()) as suite:
            if "synthetic" not in skip:
                result["pipeline_synthetic"] = pipeline_run(
                    suite, lambda store: import_synthetic(store, args.count), args.count
                )
                print("synthetic", json.dumps(result["pipeline_synthetic"], indent=1))
            if "trickle" not in skip:
                result["trickle"] = trickle(suite, args.trickle_seconds, args.rate)
                print("trickle", json.dumps(result["trickle"], indent=1))
    summarise(result, args.provider_runtime)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.json_out or RESULTS_DIR / f"embed-{stamp}.json"
    out.write_text(json.dumps(provenance.stamped(result), indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def summarise(result: dict[str, Any], runtime: str | None) -> None:
    """The targets, each beside its same-run baseline."""
    provider = result.get("provider", {})
    runtime = runtime or next(iter(provider), None)
    rates = provider.get(runtime, {}) if runtime else {}
    for name, key in (("locomo", "pipeline_locomo"), ("synthetic", "pipeline_synthetic")):
        run = result.get(key)
        base = rates.get(f"{name}_per_s", {}).get(str(PIPELINE_BATCH))
        if run and base:
            run["provider_per_s_at_batch_64"] = base
            run["ratio_to_provider"] = run["memories_per_s"] / base
            print(
                f"{name}: pipeline {run['memories_per_s']:.1f}/s, provider alone {base:.1f}/s "
                f"at batch {PIPELINE_BATCH}: ratio {run['ratio_to_provider']:.2f} (target >= 0.8)"
            )
    for name, numbers in provider.items():
        if "query_ms_p50" in numbers:
            print(
                f"query embedding, {name}: p50 {numbers['query_ms_p50']:.1f} ms, "
                f"p95 {numbers['query_ms_p95']:.1f} ms (target p50 <= 12)"
            )
    if "trickle" in result:
        t = result["trickle"]
        print(
            f"trickle {t['rate_per_s']:g}/s: recallable by meaning p50 {t['recallable_ms_p50']:.0f} ms, "
            f"p95 {t['recallable_ms_p95']:.0f} ms (target p50 <= 1000)"
        )


if __name__ == "__main__":
    sys.exit(main())
