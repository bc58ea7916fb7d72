"""Recall under mixed load: a real `engram up` suite (local MiniLM in search and
pipeline), Recall alone first, then Remember and Recall together.

    PYTHONPATH=.:gen .venv/bin/python bench/recall_load.py [--seconds 60]
        [--mixed-seconds 0] [--watch-every 10]
        [--in-flight 16] [--recall-slots 8] [--idle-calls 200]
        [--set KEY=VALUE ...] [--code DIR] [--locomo DIR] [--json-out FILE]

Phases, in one run against one suite:
  load   the 2,760 LoCoMo turns through ImportMemories, then wait until the
         pipeline has embedded every one (so Recall has a vector index).
  idle   `--idle-calls` Recalls, one at a time, nothing else running.
  reads  `--recall-slots` Recalls always outstanding for `--seconds`, no writes:
         the floor the mixed phase is held to. A closed loop of N callers on C
         cores, each call needing S of CPU, waits about N/C x S per call, so
         reads p99 / idle p99 is what the machine allows before any write runs.
  mixed  `--in-flight` calls always outstanding for `--seconds`: `--recall-slots`
         of them loop on Recall, the rest on Remember (each new memory queues an
         embed job, so the pipeline embeds in batches all through the phase).
Every Recall query is distinct (LoCoMo questions, then the same questions with
a leading word), so the search service's query-vector cache never answers.
Reported: latency p50/p99 per RPC and phase, how many Recalls came back
`degraded` and with which warnings, the embed jobs the pipeline completed during
the mixed phase, and mixed Recall p99 / idle Recall p99.

The search process's footprint (RSS, anonymous and file-backed; threads; open
fds, and those on the database) and the size of the store's WAL file are sampled
every `--watch-every` seconds through all phases; `--mixed-seconds` makes the mixed phase longer than the others (the
15-minute memory run), and the summary compares its last third with its start.

`--code DIR` runs the suite from another checkout (the before/after runs);
`--set` adds engram.yaml keys, e.g. `--set providers.embedding.batch_size=16`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen")]

import provenance  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from engram.common.v1 import job_pb2  # noqa: E402
from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2 as jq  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from suite import shared_dataset  # noqa: E402

LOCOMO = shared_dataset("locomo/generic")
NAMESPACE = "load"
LEADS = ("Remind me", "Quickly", "Tell me", "Briefly", "Exactly", "Honestly", "Again", "Please")
STARTUP_S = 180.0
UP = (sys.executable, "-m", "services.cli.main", "up")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def turns(locomo: Path) -> list[str]:
    with open(locomo / "corpus.jsonl") as handle:
        return [f"{t['speaker']}: {t['text']}" for t in map(json.loads, handle)]


SYSTEMS = ("billing", "payroll", "routing", "caching", "alerting", "backups", "ledger")
PLACES = ("Lisbon", "Oslo", "Lima", "Pune", "Quito", "Riga", "Seoul", "Tunis", "Vigo")
PARTS = ("TLS", "disk", "queue", "shard", "replica", "kernel", "firmware", "quota")


def ops_note(i: int) -> str:
    """A Remember for the mixed phase in words the LoCoMo questions do not use, so
    the keyword index the Recalls search does not grow with the load."""
    return (
        f"Ops ticket {i}: the {SYSTEMS[i % 7]} cluster in {PLACES[i % 9]} rotated its "
        f"{PARTS[i % 8]} keys after change {i // 7}"
    )


def questions(locomo: Path) -> Iterator[str]:
    """Distinct queries: every LoCoMo question, then each again behind a lead word,
    then (a long run) behind a lead word and a round number, without end."""
    with open(locomo / "queries.jsonl") as handle:
        base = [q["question"] for q in map(json.loads, handle)]
    yield from base
    for lead in LEADS:
        for question in base:
            yield f"{lead}: {question}"
    for round_ in itertools.count(2):
        for lead in LEADS:
            for question in base:
                yield f"{lead} ({round_}): {question}"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def setting(text: str) -> tuple[list[str], Any]:
    key, _, raw = text.partition("=")
    return key.split("."), yaml.safe_load(raw)


# ---- the suite ---------------------------------------------------------------------------


@dataclass
class Suite:
    addresses: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def jobs_address(self) -> str:
        """Where the job queue answers: the store's internal listener, if it has one."""
        return self.addresses.get("store_internal", self.addresses["store"])


def start_suite(code: Path, tmp: Path, extra: list[str]) -> Suite:
    listeners = ["store", "search", "pipeline", "maintenance"]
    # the job queue's own listener, in a checkout that has one (issue 14)
    if (code / "protos" / "engram" / "store" / "internal").exists():
        listeners.append("store_internal")
    ports = {name: free_port() for name in listeners}
    config: dict[str, Any] = {
        "server": {"ports": ports},
        "clients": {
            f"{n}_address": f"127.0.0.1:{ports[n]}" for n in listeners if n != "maintenance"
        },
        "logging": {"level": "WARNING"},
    }
    for text in extra:
        path, value = setting(text)
        node = config
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    config_path = tmp / "engram.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = tmp / "suite.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), str(code / "gen")]))
    process = subprocess.Popen(
        [*UP, "--config", str(config_path), "--data-dir", str(tmp / "data")],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115
    )
    suite = Suite({n: f"127.0.0.1:{p}" for n, p in ports.items()}, process, log)
    deadline = time.monotonic() + STARTUP_S
    for address in suite.addresses.values():
        while not serving(address):
            if process.poll() is not None or time.monotonic() > deadline:
                stop_suite(suite)
                raise SystemExit(f"the suite did not start; see {log}:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
    return suite


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def service_pids(suite: Suite) -> dict[str, int]:
    """The suite's service processes by name (Linux /proc; empty elsewhere)."""
    pids: dict[str, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "serve" in argv and str(suite.process.pid) in argv:
            pids[argv[argv.index("serve") + 1]] = int(entry.name)
    return pids


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds so far of each process, and of this benchmark client."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    own = os.times()
    out["client"] = own.user + own.system
    return out


@dataclass
class CpuMeter:
    """CPU each process used during a phase: where the machine's cores went."""

    pids: dict[str, int]
    started: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def __enter__(self) -> CpuMeter:
        self.started, self.wall = cpu_seconds(self.pids), time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        ended = cpu_seconds(self.pids)
        self.wall = time.perf_counter() - self.wall
        self.used = {name: ended[name] - self.started[name] for name in ended}

    def summary(self, recalls: int) -> dict[str, Any]:
        return {
            "cores_used": {name: round(s / self.wall, 2) for name, s in self.used.items()},
            "search_cpu_ms_per_recall": round(1000 * self.used["search"] / recalls, 1),
        }


def stop_suite(suite: Suite) -> None:
    if suite.process.poll() is None:
        suite.process.send_signal(signal.SIGTERM)
        try:
            suite.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            suite.process.kill()


# ---- the search process's footprint -------------------------------------------------------


def footprint(pid: int) -> dict[str, Any]:
    """RSS (anonymous and file-backed apart: a mapped database page counts once per
    mapping), threads and open fds of one process, from Linux /proc."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.split()
    fds = list(Path(f"/proc/{pid}/fd").iterdir())
    database_fds = 0
    for fd in fds:
        try:
            database_fds += "engram.db" in os.readlink(fd)
        except OSError:
            continue

    def mb(key: str) -> float:
        return round(int(status[key][0]) / 1024, 1) if key in status else float("nan")

    return {
        "rss_mb": mb("VmRSS"),
        "rss_anon_mb": mb("RssAnon"),
        "rss_file_mb": mb("RssFile"),
        "threads": int(status["Threads"][0]),
        "fds": len(fds),
        "database_fds": database_fds,
    }


class Watch:
    """Samples the search process every `every_s` seconds on a thread, each sample
    tagged with the phase running then: the series a plateau is judged on."""

    def __init__(self, pid: int, every_s: float, wal: Path) -> None:
        self.pid, self.every_s, self.wal = pid, every_s, wal
        self.phase = "load"
        self.samples: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> dict[str, Any]:
        taken = {"t_s": round(time.monotonic() - self._started, 1), "phase": self.phase}
        taken |= footprint(self.pid)
        try:
            taken["wal_mb"] = round(self.wal.stat().st_size / 2**20, 1)
        except FileNotFoundError:
            taken["wal_mb"] = 0.0
        self.samples.append(taken)
        return taken

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(OSError):  # the process is gone: the run says why
                self.sample()

    def summary(self) -> dict[str, Any]:
        """Start of the mixed phase (the baseline), its peak and end, and the growth
        over its last third, against its first two thirds."""
        mixed = [s for s in self.samples if s["phase"] == "mixed"]
        if len(mixed) < 3:
            return {}
        first = mixed[0]
        cut = mixed[len(mixed) * 2 // 3]
        keys = ("rss_mb", "rss_anon_mb", "rss_file_mb", "threads", "fds", "database_fds", "wal_mb")
        return {
            "after_load": {k: self.samples[0][k] for k in keys},
            "mixed_start": {k: first[k] for k in keys},
            "mixed_peak": {k: max(s[k] for s in mixed) for k in keys},
            "mixed_end": {k: mixed[-1][k] for k in keys},
            "mixed_two_thirds": {k: cut[k] for k in keys},
            "rss_growth_last_third_mb": round(
                max(s["rss_mb"] for s in mixed[len(mixed) * 2 // 3 :]) - cut["rss_mb"], 1
            ),
        }


# ---- phases ------------------------------------------------------------------------------


@dataclass
class Calls:
    recall_ms: list[float] = field(default_factory=list)
    remember_ms: list[float] = field(default_factory=list)
    degraded: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    warnings: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        recalls = len(self.recall_ms)
        out: dict[str, Any] = {
            "recalls": recalls,
            "recall_p50_ms": round(percentile(self.recall_ms, 50), 1),
            "recall_p99_ms": round(percentile(self.recall_ms, 99), 1),
            "recall_mean_ms": round(statistics.fmean(self.recall_ms), 1) if recalls else None,
            "degraded": self.degraded,
            "degraded_share": round(self.degraded / recalls, 4) if recalls else None,
            "warnings": dict(self.warnings.most_common(5)),
            "errors": dict(self.errors),
        }
        if self.remember_ms:
            out |= {
                "remembers": len(self.remember_ms),
                "remember_p50_ms": round(percentile(self.remember_ms, 50), 1),
                "remember_p99_ms": round(percentile(self.remember_ms, 99), 1),
            }
        return out


async def recall(stub: Any, query: str, calls: Calls) -> None:
    started = time.perf_counter()
    try:
        reply = await stub.Recall(
            search_pb2.RecallRequest(namespace=NAMESPACE, query=query, limit=10), timeout=30
        )
    except grpc.aio.AioRpcError as exc:
        calls.errors[f"Recall {exc.code().name}"] += 1
        return
    calls.recall_ms.append((time.perf_counter() - started) * 1000)
    if reply.degraded:
        calls.degraded += 1
        for warning in reply.warnings:
            calls.warnings[repr(warning)] += 1


async def remember(stub: Any, content: str, calls: Calls) -> None:
    started = time.perf_counter()
    try:
        await stub.Remember(
            store_pb2.RememberRequest(namespace=NAMESPACE, content=content), timeout=30
        )
    except grpc.aio.AioRpcError as exc:
        calls.errors[f"Remember {exc.code().name}"] += 1
        return
    calls.remember_ms.append((time.perf_counter() - started) * 1000)


def embed_counts(jobs: Any) -> tuple[int, int]:
    """(completed, pending or leased) embed jobs."""
    stats = jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=10)
    done = waiting = 0
    for count in stats.counts:
        if count.job_type == job_pb2.JOB_TYPE_EMBED:
            if count.status == job_pb2.JOB_STATUS_COMPLETED:
                done += count.count
            elif count.status in (job_pb2.JOB_STATUS_PENDING, job_pb2.JOB_STATUS_LEASED):
                waiting += count.count
    return done, waiting


def load(suite: Suite, texts: list[str]) -> float:
    """Import the turns and wait until all are embedded; returns seconds taken."""
    started = time.perf_counter()
    with (
        grpc.insecure_channel(suite.addresses["store"]) as channel,
        grpc.insecure_channel(suite.jobs_address) as jobs_channel,
    ):
        store = store_pb2_grpc.MemoryStoreServiceStub(channel)
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(jobs_channel)
        chunks = [texts[i : i + 500] for i in range(0, len(texts), 500)]
        store.ImportMemories(
            iter(
                store_pb2.ImportMemoriesRequest(
                    namespace=NAMESPACE, items=[store_pb2.ImportItem(content=t) for t in chunk]
                )
                for chunk in chunks
            ),
            timeout=300,
        )
        while embed_counts(jobs)[1]:
            if time.perf_counter() - started > 900:
                raise SystemExit("the pipeline did not embed the loaded memories in 15 min")
            time.sleep(0.5)
    return time.perf_counter() - started


async def idle_phase(suite: Suite, queries: Iterator[str], n: int) -> Calls:
    calls = Calls()
    async with grpc.aio.insecure_channel(suite.addresses["search"]) as channel:
        stub = search_pb2_grpc.SearchServiceStub(channel)
        for _ in range(5):  # connection and first-call costs
            await stub.Recall(search_pb2.RecallRequest(namespace=NAMESPACE, query="warm up"))
        for _ in range(n):
            await recall(stub, next(queries), calls)
    return calls


async def mixed_phase(
    suite: Suite,
    queries: Iterator[str],
    texts: list[str],
    args: argparse.Namespace,
    writers: int,
    seconds: float,
) -> Calls:
    calls = Calls()
    deadline = time.perf_counter() + seconds
    counter = iter(range(10**9))
    async with (
        grpc.aio.insecure_channel(suite.addresses["search"]) as search_channel,
        grpc.aio.insecure_channel(suite.addresses["store"]) as store_channel,
    ):
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)

        async def recall_loop() -> None:
            while time.perf_counter() < deadline:
                await recall(search, next(queries), calls)

        async def remember_loop() -> None:
            while time.perf_counter() < deadline:
                i = next(counter)
                if args.remember_text == "locomo":
                    content = f"{texts[i % len(texts)]} (load note {i})"
                else:
                    content = ops_note(i)
                await remember(store, content, calls)

        slots = [recall_loop() for _ in range(args.recall_slots)]
        slots += [remember_loop() for _ in range(writers)]
        await asyncio.gather(*slots)
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--recall-slots", type=int, default=8)
    parser.add_argument(
        "--mixed-seconds", type=float, default=0.0, help="the mixed phase's length (0: --seconds)"
    )
    parser.add_argument(
        "--watch-every", type=float, default=10.0, help="seconds between footprint samples"
    )
    parser.add_argument("--idle-calls", type=int, default=200)
    parser.add_argument("--memories", type=int, default=2760, help="LoCoMo turns loaded first")
    parser.add_argument(
        "--remember-text",
        choices=("ops", "locomo"),
        default="ops",
        help="ops: words apart from the queries; locomo: copies of the loaded turns",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout the suite runs from")
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="corpus.jsonl, queries.jsonl")
    parser.add_argument("--label", default="")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    texts = turns(args.locomo)[: args.memories]
    queries = questions(args.locomo)
    with tempfile.TemporaryDirectory(prefix="engram-recall-load-") as tmp:
        suite = start_suite(args.code.resolve(), Path(tmp), args.set)
        try:
            pids = service_pids(suite)
            wal = Path(tmp) / "data" / "engram.db-wal"
            with Watch(pids["search"], args.watch_every, wal) as watch:
                load_s = load(suite, texts)
                watch.phase = "idle"
                watch.sample()
                with CpuMeter(pids) as idle_cpu:
                    idle = asyncio.run(idle_phase(suite, queries, args.idle_calls))
                watch.phase = "reads"
                with CpuMeter(pids) as reads_cpu:
                    reads = asyncio.run(
                        mixed_phase(suite, queries, texts, args, writers=0, seconds=args.seconds)
                    )
                with grpc.insecure_channel(suite.jobs_address) as channel:
                    jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
                    embedded_before, _ = embed_counts(jobs)
                    writers = args.in_flight - args.recall_slots
                    watch.phase = "mixed"
                    watch.sample()
                    with CpuMeter(pids) as mixed_cpu:
                        mixed = asyncio.run(
                            mixed_phase(
                                suite,
                                queries,
                                texts,
                                args,
                                writers,
                                seconds=args.mixed_seconds or args.seconds,
                            )
                        )
                    embedded_after, waiting = embed_counts(jobs)
                    watch.sample()
                database = Path(tmp) / "data" / "engram.db"
                database_mb = round(database.stat().st_size / 2**20, 1)
                wal_mb = round(wal.stat().st_size / 2**20, 1) if wal.exists() else 0.0
        finally:
            stop_suite(suite)
    result = {
        "label": args.label,
        "code": str(args.code),
        "settings": args.set,
        "seconds": args.seconds,
        "in_flight": args.in_flight,
        "recall_slots": args.recall_slots,
        "remember_text": args.remember_text,
        "load_s": round(load_s, 1),
        "cores": os.cpu_count(),
        "idle": idle.summary() | idle_cpu.summary(len(idle.recall_ms) + 5),
        "reads": reads.summary() | reads_cpu.summary(len(reads.recall_ms)),
        "mixed": mixed.summary() | mixed_cpu.summary(len(mixed.recall_ms)),
        "mixed_embedded": embedded_after - embedded_before,
        "mixed_embed_backlog_at_end": waiting,
        "mixed_seconds": args.mixed_seconds or args.seconds,
        "database_mb_at_end": database_mb,
        "wal_mb_at_end": wal_mb,
        "search_footprint": watch.summary(),
        "search_samples": watch.samples,
    }
    result["recall_p99_mixed_over_idle"] = round(
        result["mixed"]["recall_p99_ms"] / result["idle"]["recall_p99_ms"], 2
    )
    result["recall_p99_reads_over_idle"] = round(
        result["reads"]["recall_p99_ms"] / result["idle"]["recall_p99_ms"], 2
    )
    i, r, m = result["idle"], result["reads"], result["mixed"]
    # A closed loop of N callers sharing C cores, each call needing S of CPU,
    # cannot average below N x S / C: the reads phase's lower bound.
    result["reads_mean_floor_ms"] = round(
        args.recall_slots * i["search_cpu_ms_per_recall"] / (os.cpu_count() or 1), 1
    )
    print(
        f"idle  Recall p50 {i['recall_p50_ms']} ms  p99 {i['recall_p99_ms']} ms  "
        f"degraded {i['degraded']}/{i['recalls']}"
    )
    print(
        f"reads Recall p50 {r['recall_p50_ms']} ms  p99 {r['recall_p99_ms']} ms  "
        f"degraded {r['degraded']}/{r['recalls']}  ({args.recall_slots} in flight, no writes)"
    )
    print(
        f"mixed Recall p50 {m['recall_p50_ms']} ms  p99 {m['recall_p99_ms']} ms  "
        f"degraded {m['degraded']}/{m['recalls']} ({100 * (m['degraded_share'] or 0):.1f}%)  "
        f"Remember p50 {m.get('remember_p50_ms')} ms  p99 {m.get('remember_p99_ms')} ms"
    )
    print(
        f"search CPU per Recall: idle {i['search_cpu_ms_per_recall']} ms, reads "
        f"{r['search_cpu_ms_per_recall']} ms, mixed {m['search_cpu_ms_per_recall']} ms; "
        f"reads mean >= {result['reads_mean_floor_ms']} ms on {os.cpu_count()} cores "
        f"(measured {r['recall_mean_ms']} ms)"
    )
    for phase in ("idle", "reads", "mixed"):
        print(f"{phase:5} cores used {result[phase]['cores_used']}")
    print(
        f"mixed/idle Recall p99 {result['recall_p99_mixed_over_idle']}  "
        f"reads/idle {result['recall_p99_reads_over_idle']}  "
        f"embedded during mixed {result['mixed_embedded']}  backlog {waiting}"
    )
    foot = result["search_footprint"]
    if foot:
        for point in ("after_load", "mixed_start", "mixed_two_thirds", "mixed_peak", "mixed_end"):
            print(f"search {point:16} {foot[point]}")
        print(
            f"search RSS growth over the mixed phase's last third: "
            f"{foot['rss_growth_last_third_mb']} MB; database {database_mb} MB, wal {wal_mb} MB"
        )
    print(json.dumps(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(provenance.stamped(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
