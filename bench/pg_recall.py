"""Recall on PostgreSQL next to SQLite (issue 21), through the gRPC API, one run:
latency p50/p95 at 100k memories (1M with `--size 1000000`), and throughput with 1 and 2 search replicas
against one database.

    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_recall.py --load-only
    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_recall.py
        [--size 100000] [--queries 100] [--throughput-queries 30] [--in-flight 16] [--rounds 3]
        [--round-seconds 10] [--versus DIR] [--json-out FILE]

Data: bench/recall_latency.py's file (/tmp/engram-latency/recall-<size>-r10000.db:
one namespace of LoCoMo turns and recombinations of them, real MiniLM vectors for
the first 10k, derived ones after; build it with `bench/recall_latency.py --build-only --million 0 --sizes
<size>`). Its memories and embeddings are copied into a fresh Postgres 18.6 +
pgvector 0.8.1 database (bench/pg_server.py), migrated by pg_migrations, and the
vector index is filled by the store's own functions, the HNSW index built over
the rows (bench/pg_vectors.py's load_postgres). The loaded server's data directory is
kept (/tmp/engram-latency/pg-<size>/, `--pg-cache`; delete it to reload): loading
takes 2-4 minutes here at 100k and 22 at 1M (run `--load-only` at `nice -n 10`
without the benchmark lock: a load is not a measurement). A kept database gets
the migrations added since (their backfills run then: again a `--load-only`
run); one made by a checkout whose migrations differ is dropped and reloaded.

Four `engram serve search` processes run at once, with the local MiniLM: two
over the SQLite file (read-only, as compose's search does) and two with
`storage.kind: postgres` on that database (each its own read pool). Nothing
listens at their store address, so access tracking is dropped alike.

latency  Each question (LoCoMo, distinct) goes to SQLite replica 1 and Postgres
         replica 1, interleaved, alternating which goes first: the first pass
         with the query embedded by the search process (its cache empty), the
         second with the query's vector cached. p50/p95 per backend and pass.
throughput  Closed loop, `--in-flight` callers, every query's vector cached in
         every replica (so the figure is search's own work, not the embedding):
         SQLite x1, SQLite x2, Postgres x1, Postgres x2 replicas (callers spread
         round-robin over the replicas), `--rounds` rounds of `--round-seconds`
         each, the configurations rotated within each round so outside load
         falls on all alike. Recalls/s = median over rounds.
Answers are also compared: top-10 overlap between the two backends per
question (same data, same ranking code; the keyword channel's tokenisation and
the vector channel's HNSW scan differ, bench/README.md "PostgreSQL").

--versus DIR: the four processes are instead the code checked out at DIR and
this code on each backend (sqlite-before, sqlite-after, postgres-before,
postgres-after); latency interleaves all four per question (alternating the
order), the top-10 overlap compares before with after on each backend, and
throughput runs each process alone.

The machine has 2 cores: the replicas, the Postgres server and this load
generator share them, so 2 replicas can only use what 1 leaves idle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen"), str(Path(__file__).resolve().parent)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import latency_data as data  # noqa: E402
import provenance  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from pg_server import (  # noqa: E402
    create_database,
    database_dsn,
    drop_database,
    postgres_server,
    storage_settings,
)
from suite import free_port, wait_serving  # noqa: E402

CACHE = Path("/tmp/engram-latency")
RESULTS = ROOT / "bench" / "results"
NS = data.NAMESPACE
# A 1M load writes several GB of WAL: checkpoints by size every 1 GB (the
# default) would rewrite the same pages over and over. Durability is unchanged.
LOAD_SETTINGS = {"max_wal_size": "8GB"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.50),
        "p95": percentile(values, 0.95),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


class Search:
    """One `engram serve search` process with the given storage settings."""

    def __init__(
        self, name: str, storage: dict[str, Any], tmp: Path, code_root: Path = ROOT
    ) -> None:
        self.name = name
        port = free_port()
        unused_store = free_port()  # nothing listens: access tracking fails and is dropped
        config = {
            "server": {"ports": {"search": port}, "metrics_ports": {"search": free_port()}},
            "clients": {
                "store_address": f"127.0.0.1:{unused_store}",
                "store_internal_address": f"127.0.0.1:{unused_store}",
            },
            "storage": storage,
        }
        config_path = tmp / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(config))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code_root), str(code_root / "gen")]))
        self.log_path = tmp / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "serve",
                "search",
                "--config",
                str(config_path),
            ],
            cwd=code_root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.address = f"127.0.0.1:{port}"

    def wait(self) -> None:
        try:
            wait_serving(self.address, timeout_s=300)
        except Exception as error:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"{self.name} did not serve:\n" + "\n".join(tail)) from error

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def request(text: str) -> search_pb2.RecallRequest:
    return search_pb2.RecallRequest(namespace=NS, query=text, limit=10)


def call(stub: Any, text: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    response = stub.Recall(request(text), timeout=60)
    return (time.perf_counter() - t0) * 1000, response


def until_hybrid(stub: Any, text: str, name: str) -> None:
    """Until the model is loaded and answers are not degraded."""
    deadline = time.monotonic() + 180
    while True:
        _, response = call(stub, text)
        if not response.degraded:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} stays degraded: {list(response.warnings)}")
        time.sleep(1)


def ids(response: Any) -> list[str]:
    return [hit.memory.id for hit in response.results]


def latency(
    stubs: dict[str, Any], texts: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """Both passes, interleaved per question; the top-10 overlap of the second
    between each pair of stubs in order (the first and second, the third and fourth)."""
    found: dict[str, dict[str, Any]] = {}
    names = list(stubs)
    pairs = list(zip(names[::2], names[1::2], strict=True))
    overlaps: dict[str, list[float]] = {f"{a} vs {b}": [] for a, b in pairs}
    for label in ("with embedding", "cached vector"):
        times: dict[str, list[float]] = {name: [] for name in stubs}
        for i, text in enumerate(texts):
            order = names if i % 2 == 0 else list(reversed(names))
            answers = {}
            for name in order:
                ms, response = call(stubs[name], text)
                times[name].append(ms)
                answers[name] = set(ids(response))
            if label == "cached vector":
                for a, b in pairs:
                    shared = len(answers[a] & answers[b])
                    overlaps[f"{a} vs {b}"].append(
                        shared / max(len(answers[a]), len(answers[b]), 1)
                    )
        found[label] = {name: summary(values) for name, values in times.items()}
    return found, {
        f"mean_top10_overlap {pair}": statistics.fmean(values) if values else 0.0
        for pair, values in overlaps.items()
    }


async def closed_loop(
    addresses: list[str], texts: list[str], in_flight: int, seconds: float
) -> tuple[int, float, list[float]]:
    """`in_flight` callers spread round-robin over the replicas for `seconds`."""
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    stubs = [search_pb2_grpc.SearchServiceStub(c) for c in channels]
    latencies: list[float] = []
    done = 0
    stop_at = time.perf_counter() + seconds

    async def caller(k: int) -> None:
        nonlocal done
        stub = stubs[k % len(stubs)]
        i = k
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await stub.Recall(request(texts[i % len(texts)]), timeout=60)
            latencies.append((time.perf_counter() - t0) * 1000)
            done += 1
            i += in_flight

    started = time.perf_counter()
    try:
        await asyncio.gather(*(caller(k) for k in range(in_flight)))
    finally:
        for channel in channels:
            await channel.close()
    return done, time.perf_counter() - started, latencies


def throughput(
    configurations: dict[str, list[str]], texts: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Closed loop over each configuration (a name and its replicas' addresses)."""
    rounds: dict[str, list[float]] = {name: [] for name in configurations}
    latencies: dict[str, list[float]] = {name: [] for name in configurations}
    names = list(configurations)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            done, elapsed, ms = asyncio.run(
                closed_loop(configurations[name], texts, args.in_flight, args.round_seconds)
            )
            rounds[name].append(done / elapsed)
            latencies[name].extend(ms)
            print(f"  round {r + 1} {name}: {done / elapsed:.1f} Recalls/s", flush=True)
    return {
        name: {
            "recalls_per_s": statistics.median(rounds[name]),
            "rounds": rounds[name],
            **{f"latency_{k}": v for k, v in summary(latencies[name]).items()},
        }
        for name in configurations
    }


def time_channels(dsn: str, texts: list[str]) -> dict[str, Any]:
    """Where a Postgres Recall's time goes: the keyword channel's one query
    (pg_text.bm25_top) and the vector channel (pg_vectors.nearest), each timed
    alone on a read-only connection for the same questions, at the channel depth
    Recall uses; and EXPLAIN ANALYZE of the first question's keyword query."""
    from services.common.config import load_config
    from services.common.fts import keyword_terms
    from services.common.memory_filter import MemoryFilterSpec
    from services.common.providers.local_embedding import local_embedding
    from services.common.vectors import normalized_f32
    from services.storage.pg import open_read_only, translate
    from services.storage.search import pg_text, pg_vectors

    depth = load_config(environ={}).search.channel_depth
    spec = MemoryFilterSpec()
    provider = local_embedding(load_config(environ={}).providers.embedding.runtime)
    vectors = asyncio.run(provider.embed(texts))
    conn = open_read_only(dsn)
    keyword_ms, vector_ms, matched = [], [], []
    plan: list[str] = []
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        sql, params = pg_text.bm25_top(keyword_terms(text), NS, depth, spec)
        if i == 0:
            plan = [
                row[0]
                for row in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + translate(sql), params)
            ]
            conn.rollback()
        t0 = time.perf_counter()
        rows = conn.execute(translate(sql), params).fetchall()
        keyword_ms.append((time.perf_counter() - t0) * 1000)
        conn.rollback()
        matched.append(len(rows))
        t0 = time.perf_counter()
        query_f32 = normalized_f32(vector)
        assert query_f32 is not None
        pg_vectors.nearest(conn, query_f32, NS, spec, depth)
        vector_ms.append((time.perf_counter() - t0) * 1000)
        conn.rollback()
    conn.close()
    return {
        "depth": depth,
        "keyword bm25_top": summary(keyword_ms),
        "vector nearest": summary(vector_ms),
        "keyword plan (first question)": plan,
    }


def migrate_kept(dsn: str) -> dict[str, Any]:
    """Apply pending migrations to the kept database (a backfill over 1M rows
    takes minutes: run `--load-only` for it, outside the benchmark lock)."""
    from services.storage.pg import open_read_write
    from services.storage.pg_migrations import apply_pg_migrations

    conn = open_read_write(dsn)
    t0 = time.perf_counter()
    try:
        applied = apply_pg_migrations(conn)
        if applied:
            conn.execute("ANALYZE")
            conn.commit()
    finally:
        conn.close()
    seconds = time.perf_counter() - t0
    if applied:
        print(f"migrations applied to the kept database in {seconds:.0f} s: {applied}", flush=True)
    return {"applied": applied, "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--throughput-queries", type=int, default=30, help="the loop's questions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument("--shared-buffers", default=None, help="default 1GB, 4GB from 1M memories")
    parser.add_argument(
        "--parallel-workers",
        type=int,
        default=1,
        help="the HNSW build's max_parallel_maintenance_workers (2 cores here: leader + 1)",
    )
    parser.add_argument("--pg-cache", type=Path, default=None, help="kept data directory")
    parser.add_argument(
        "--load-only",
        action="store_true",
        help="load the kept database and stop (a run of its own)",
    )
    parser.add_argument(
        "--channels", action="store_true", help="only time the two channels' SQL on Postgres"
    )
    parser.add_argument(
        "--versus",
        default=None,
        metavar="DIR",
        help="replicas of the code checked out at DIR and of this code on each backend "
        "(sqlite-before, sqlite-after, postgres-before, postgres-after) instead of x1/x2",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a timeout still cleans up
    from pg_vectors import load_postgres, maintenance_work_mem  # after sys.path
    from psycopg.conninfo import conninfo_to_dict

    from services.storage.sqlite_migrations import MigrationMismatch

    real = min(data.REAL_VECTORS, args.size)
    sqlite_path = CACHE / f"recall-{args.size}-r{real}.db"
    if not sqlite_path.exists():
        raise SystemExit(f"{sqlite_path} is missing: bench/recall_latency.py --sizes {args.size}")
    data.migrate(sqlite_path)
    questions = [q["question"] for q in data.load_queries() if q["question"].strip()]
    random.Random(7).shuffle(questions)
    warm, texts = questions[:10], questions[10 : 10 + args.queries]
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_start": list(os.getloadavg()),
        "sqlite": str(sqlite_path),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.json_out or RESULTS / f"pg_recall-{time.strftime('%Y%m%dT%H%M%S')}.json"
    searches: list[Search] = []
    with tempfile.TemporaryDirectory(prefix="pg-recall-") as tmp_dir:
        tmp = Path(tmp_dir)
        try:
            cache = args.pg_cache or CACHE / f"pg-{args.size}"
            loaded = cache / "loaded.json"
            fresh = not loaded.exists()
            if fresh and cache.exists():  # a load that did not finish
                subprocess.run(["rm", "-rf", str(cache)], check=True)
            cache.mkdir(parents=True, exist_ok=True)
            shared_buffers = args.shared_buffers or ("4GB" if args.size >= 1_000_000 else "1GB")
            results["shared_buffers"] = shared_buffers
            with postgres_server(
                tmp, shared_buffers, pgdata=cache / "pgdata", settings=LOAD_SETTINGS
            ) as server:
                if not fresh:  # a kept database gets the migrations added since its load
                    kept = database_dsn(server, json.loads(loaded.read_text())["database"])
                    try:
                        results["migrated"] = migrate_kept(kept)
                    except MigrationMismatch as error:  # made by an earlier checkout: reload
                        print(f"the kept database is stale, reloading: {error}", flush=True)
                        drop_database(server, json.loads(loaded.read_text())["database"])
                        loaded.unlink()
                        fresh = True
                if fresh:
                    dsn = create_database(server, "engram_recall")
                    print("loading Postgres ...", flush=True)
                    t0 = time.perf_counter()
                    load = load_postgres(
                        sqlite_path,
                        dsn,
                        False,
                        maintenance_work_mem(args.size),
                        args.parallel_workers,
                        progress=True,
                    )
                    load["total s"] = time.perf_counter() - t0
                    load["database"] = conninfo_to_dict(dsn)["dbname"]
                    load["load_average_end"] = list(os.getloadavg())
                    loaded.write_text(json.dumps(load, indent=1))
                results["load"] = json.loads(loaded.read_text())
                results["load"]["reused"] = not fresh
                dsn = database_dsn(server, results["load"]["database"])
                print(json.dumps(results["load"], indent=1), flush=True)
                if args.load_only:
                    return 0
                if args.channels:
                    results["channels"] = time_channels(dsn, texts)
                    print(json.dumps(results["channels"], indent=1), flush=True)
                    out.write_text(
                        json.dumps(provenance.stamped(results), indent=2, default=str) + "\n"
                    )
                    return 0
                sqlite_storage = {"path": str(sqlite_path)}
                for backend, storage in (
                    ("sqlite", sqlite_storage),
                    ("postgres", storage_settings(dsn)),
                ):
                    if args.versus:
                        before = Path(args.versus).resolve()
                        searches.append(Search(f"{backend}-before", storage, tmp, before))
                        searches.append(Search(f"{backend}-after", storage, tmp))
                    else:
                        for n in (1, 2):
                            searches.append(Search(f"{backend}-{n}", storage, tmp))
                for search in searches:
                    search.wait()
                channels = {s.name: grpc.insecure_channel(s.address) for s in searches}
                stubs = {n: search_pb2_grpc.SearchServiceStub(c) for n, c in channels.items()}
                for name, stub in stubs.items():
                    until_hybrid(stub, warm[0], name)
                    for text in warm:
                        call(stub, text)
                print("latency ...", flush=True)
                timed = (
                    stubs
                    if args.versus
                    else {"sqlite": stubs["sqlite-1"], "postgres": stubs["postgres-1"]}
                )
                results["latency"], results["agreement"] = latency(timed, texts)
                report_latency(results)
                out.write_text(
                    json.dumps(provenance.stamped(results), indent=2, default=str) + "\n"
                )  # so far
                loop_texts = texts[: args.throughput_queries]
                for name in stubs:  # every vector cached everywhere
                    for text in loop_texts:
                        call(stubs[name], text)
                for channel in channels.values():
                    channel.close()
                print("throughput ...", flush=True)
                if args.versus:  # each code's replica alone
                    configurations = {s.name: [s.address] for s in searches}
                else:
                    replicas = {
                        backend: [s.address for s in searches if s.name.startswith(backend)]
                        for backend in ("sqlite", "postgres")
                    }
                    configurations = {
                        f"{backend} x{n}": addresses[:n]
                        for backend, addresses in replicas.items()
                        for n in (1, 2)
                    }
                results["throughput"] = throughput(configurations, loop_texts, args)
        finally:
            for search in searches:
                search.stop()
    results["load_average_end"] = list(os.getloadavg())
    report(results)
    out.write_text(json.dumps(provenance.stamped(results), indent=2, default=str) + "\n")
    print(f"results: {out}")
    return 0


def report_latency(results: dict[str, Any]) -> None:
    print(f"\nRecall through gRPC, {results['sqlite']} (ms)")
    print(f"{'pass':<16}{'backend':<10}{'n':>5}{'p50':>9}{'p95':>9}")
    for label, by_backend in results["latency"].items():
        for backend, s in by_backend.items():
            print(f"{label:<16}{backend:<10}{s['n']:>5}{s['p50']:>9.1f}{s['p95']:>9.1f}")
    for pair, overlap in results["agreement"].items():
        print(f"{pair.replace('mean_top10_overlap', 'top-10 overlap')}: {overlap:.3f}")


def report(results: dict[str, Any]) -> None:
    report_latency(results)
    print(f"\n{'throughput':<14}{'Recalls/s':>10}{'p50 ms':>9}{'p95 ms':>9}  rounds")
    for name, t in results["throughput"].items():
        rounds = " ".join(f"{x:.1f}" for x in t["rounds"])
        print(
            f"{name:<14}{t['recalls_per_s']:>10.1f}{t['latency_p50']:>9.1f}"
            f"{t['latency_p95']:>9.1f}  {rounds}"
        )
    print(f"load average {results['load_average_start']} -> {results['load_average_end']}")


if __name__ == "__main__":
    sys.exit(main())
