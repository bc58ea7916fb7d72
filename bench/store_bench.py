"""Store benchmarks: Remember and ImportMemories against their baselines.

    .venv/bin/python bench/store_bench.py [--quick]

One run measures, on the same machine:

1. a bare grpc.aio echo server (separate process, unary bytes-in/bytes-out, no
   interceptor, payload = a serialized RememberRequest, ~150 bytes) and
2. Remember against a real store (`engram serve store`, separate process, fresh
   data dir), every request with distinct content,
   both at 1 and 32 callers in flight, closed loop, in alternating rounds
   (echo, store, echo, ...) so outside load hits both sides alike;
3. ImportMemories of N memories streamed in messages of 500 items to a fresh
   store, against raw batched SQLite inserts of the same rows into a fresh
   database with the store's schema;
4. `engram import FILE.jsonl` (the CLI, through engram.client, progress lines on)
   of the same N memories into another fresh store, timed from the command's start
   to its exit, against 3.

Prints a table, writes bench/results/store-<timestamp>.json.

    .venv/bin/python bench/store_bench.py --security [--auth] [--quick]

measures instead what TLS (and API-key authentication) cost: Remember against three
stores in one run, in alternating rounds at 1 and 32 in flight: plain (the baseline),
TLS on the listener (certificates from `engram certs dev`), and with `--auth` TLS plus
`auth.enabled` with a writer key (made by `engram keys create`) on every call.
Writes bench/results/store-security-<timestamp>.json.

    .venv/bin/python bench/store_bench.py --pii [--quick]

measures what the PII gate (issue 18) costs: Remember against three stores in one
run, in alternating rounds at 1 and 32 in flight: `pii.default_policy: allow` (no
detection; the baseline), the default policy (secrets redacted: every detector runs
on every memory) and `redact` for every kind. Writes
bench/results/store-pii-<timestamp>.json.

    .venv/bin/python bench/store_bench.py --timeline --before-root DIR [--quick]

measures what the temporal next-in-session link (issue 17) costs Remember: three
stores in one run, in alternating rounds at 1 and 32 in flight, every request with
a session id: the code checked out at DIR (the commit before the link; the
baseline), this code with each caller's requests in one of 32 sessions, and this
code with every request in one session. Writes
bench/results/store-timeline-<timestamp>.json.

    flock /tmp/engram-bench.lock .venv/bin/python bench/store_bench.py --postgres [--quick]

measures the PostgreSQL backend (issue 21) next to SQLite in one run: Remember
against a SQLite store (the baseline) and a store with `storage.kind: postgres`
(a fresh database on a server bench/pg_server.py starts), both up at once, in
alternating rounds at 1 and 32 in flight; then ImportMemories of N memories into
a fresh store of each kind, alternating which goes first, `--import-runs` times.
"cpu ms" is the store process's CPU only: on Postgres the server's backends do
part of the work, so the run also reports the Postgres processes' CPU per
Remember. Writes bench/results/store-postgres-<timestamp>.json.

    flock /tmp/engram-bench.lock .venv/bin/python bench/store_bench.py --versus DIR [--quick]

measures this code against the code checked out at DIR (a commit before a change
that should cost nothing, such as the storage redesign of issue 36) on both
backends in one run: Remember against four stores up at once (DIR on SQLite, the
baseline; this code on SQLite; DIR and this code on PostgreSQL, each its own fresh
database on one server), in alternating rounds at 1 and 32 in flight; then
ImportMemories of N memories into a fresh store of each code on each backend,
alternating which code goes first, `--import-runs` times. Writes
bench/results/store-versus-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import provenance
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common import clock
from services.storage.db import open_read_write
from services.storage.sqlite_migrations import apply_migrations
from services.storage.store import repository as repo
from services.store.memories import MAX_IMPORT_STREAM_ITEMS, prepare_drafts
from services.store.mutations import NewMemory
from services.store.rules import MemoryFields, draft_memory

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
ECHO_METHOD = "/bench.Echo/Echo"
STORE_SERVICE = "engram.store.v1.MemoryStoreService"
CONCURRENCY = (1, 32)
IMPORT_MESSAGE_ITEMS = 500
RAW_TRANSACTION_MEMORIES = 100
REMEMBER_RATIO_TARGET = 0.60
SECURITY_RATIO_TARGET = 0.85  # issue 14: Remember with auth+TLS / without, at 32 in flight
PII_RATIO_TARGET = 0.90  # issue 18: Remember with PII detection / without, at 32 in flight
IMPORT_RATIO_TARGET = 0.50
# `engram import` against ImportMemories streamed by hand (issue 15)
CLI_IMPORT_RATIO_TARGET = 0.80
JOB_MAX_ATTEMPTS = 3  # memory.pipelineV2.workerMaxRetries default, as the store uses

# ---- realistic, distinct content ----------------------------------------------------

_TEMPLATES = (
    "User {n} prefers dark mode in the editor and decided to use PostgreSQL for project {p}",
    "Team {p} agreed to ship release 2.{n} on Friday once the staging smoke tests pass",
    "Customer {n} reported that the export button is broken on Safari for workspace {p}",
    "We learned that batch size {p} keeps the nightly job {n} under its memory limit",
    "Always run the migration dry-run before deploying service {p} to region eu-{n}",
    "Ticket {n}: the on-call rotation for project {p} moves to Tuesdays starting next month",
)


def content_for(n: int) -> str:
    """Distinct for every n (the number is in the text), ~80-90 characters."""
    return _TEMPLATES[n % len(_TEMPLATES)].format(n=n, p=n % 97 + 1)


def remember_request(n: int, namespace: str = "bench") -> store_pb2.RememberRequest:
    return store_pb2.RememberRequest(
        namespace=namespace,
        content=content_for(n),
        tags=["bench", "load"],
        who="bench-agent",
        why="noted during a session",
        source_type="benchmark",
    )


def import_item(n: int) -> store_pb2.ImportItem:
    return store_pb2.ImportItem(
        content=content_for(n), tags=["bench", "import"], who="bench-agent", source_type="benchmark"
    )


# ---- helpers ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return float("nan")
    position = (len(sorted_values) - 1) * q
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def mount_of(path: Path) -> str:
    """'device fstype' of the mount holding `path` (from /proc/mounts)."""
    best, best_len = "unknown", -1
    resolved = str(path.resolve())
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            parts = line.split()
            if len(parts) < 3:
                continue
            mount_point = parts[1]
            inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) > best_len:
                best, best_len = f"{parts[0]} {parts[2]}", len(mount_point)
    return best


def cpu_busy_percent(interval: float = 1.0) -> float:
    """Share of all CPUs busy over `interval` seconds (from /proc/stat); nan elsewhere."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    try:
        busy0, total0 = sample()
        time.sleep(interval)
        busy1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return float("nan")
    return 100.0 * (busy1 - busy0) / max(total1 - total0, 1)


def machine_info(tmp_root: Path) -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    from services.storage.db import sqlite3

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "grpcio": grpc.__version__,
        "sqlite": sqlite3.sqlite_version,
        "data_filesystem": mount_of(tmp_root),
        "engram_env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith("ENGRAM_") and not any(w in k for w in ("KEY", "TOKEN", "SECRET"))
        },
    }


class ServerProcess:
    """A server in its own process; stopped with SIGTERM, then SIGKILL."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            self._log.close()


async def wait_ready(
    server: ServerProcess, channel: grpc.aio.Channel, health_service: str | None
) -> None:
    """channel_ready for the echo server; a SERVING health check for the store."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        server.check_alive()
        try:
            if health_service is None:
                await asyncio.wait_for(channel.channel_ready(), timeout=0.5)
                return
            stub = health_pb2_grpc.HealthStub(channel)
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=health_service), timeout=0.5
            )
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except (TimeoutError, grpc.aio.AioRpcError):
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{server.name} not ready after 30 s:\n{server.log_tail()}")


# ---- closed-loop load ---------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all threads (Linux /proc); nan elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


@dataclass
class Window:
    """One measured stretch of closed-loop load against one server."""

    requests: int
    seconds: float
    server_cpu_s: float
    client_cpu_s: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


@dataclass
class LoadResult:
    concurrency: int
    requests: int
    seconds: float
    rps: float  # median over rounds
    rounds_rps: list[float]
    p50_ms: float  # percentiles over every request of every round
    p99_ms: float
    mean_ms: float
    max_ms: float
    server_cpu_ms_per_request: float
    client_cpu_ms_per_request: float


@dataclass
class Target:
    """A server under load: how to call it (with a request number) and its pid."""

    name: str
    call: Callable[[int], Awaitable[Any]]
    pid: int
    counter: Iterator[int] = field(default_factory=itertools.count)


async def closed_loop(target: Target, concurrency: int, seconds: float) -> Window:
    """`concurrency` callers, each issuing its next call as soon as the last returns,
    until `seconds` have passed; calls in flight at the deadline are still counted."""
    latencies: list[float] = []
    server_cpu = process_cpu_seconds(target.pid)
    client_cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds

    async def caller() -> None:
        perf = time.perf_counter
        record = latencies.append
        while perf() < deadline:
            n = next(target.counter)
            t0 = perf()
            await target.call(n)
            record(perf() - t0)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return Window(
        requests=len(latencies),
        seconds=time.perf_counter() - started,
        server_cpu_s=process_cpu_seconds(target.pid) - server_cpu,
        client_cpu_s=time.process_time() - client_cpu,
        latencies=latencies,
    )


def summarize(concurrency: int, windows: list[Window]) -> LoadResult:
    latencies = sorted(x for w in windows for x in w.latencies)
    requests = len(latencies)
    return LoadResult(
        concurrency=concurrency,
        requests=requests,
        seconds=sum(w.seconds for w in windows),
        rps=statistics.median(w.rps for w in windows),
        rounds_rps=[round(w.rps, 1) for w in windows],
        p50_ms=percentile(latencies, 0.50) * 1e3,
        p99_ms=percentile(latencies, 0.99) * 1e3,
        mean_ms=statistics.fmean(latencies) * 1e3,
        max_ms=latencies[-1] * 1e3,
        server_cpu_ms_per_request=sum(w.server_cpu_s for w in windows) / requests * 1e3,
        client_cpu_ms_per_request=sum(w.client_cpu_s for w in windows) / requests * 1e3,
    )


@dataclass
class Comparison:
    results: dict[str, list[LoadResult]]  # target name -> one result per concurrency
    ratios: list[float]  # per concurrency: median over rounds of second / first RPS
    rounds_ratios: list[list[float]]


async def compare(
    first: Target, second: Target, warmup: float, rounds: int, round_seconds: float
) -> Comparison:
    """`second` against `first` (the baseline); see `compare_all`."""
    return (await compare_all([first, second], warmup, rounds, round_seconds))[second.name]


async def compare_all(
    targets: list[Target], warmup: float, rounds: int, round_seconds: float
) -> dict[str, Comparison]:
    """Every target after the first against the first (the baseline). For each
    concurrency: warm all up, then alternate rounds (first, second, ..., first, ...),
    so a burst of outside load hits every side instead of skewing one; each ratio
    pairs a target's round with the baseline round just before it."""
    baseline = targets[0]
    results: dict[str, list[LoadResult]] = {target.name: [] for target in targets}
    ratios: dict[str, list[float]] = {target.name: [] for target in targets[1:]}
    rounds_ratios: dict[str, list[list[float]]] = {target.name: [] for target in targets[1:]}
    for concurrency in CONCURRENCY:
        windows: dict[str, list[Window]] = {target.name: [] for target in targets}
        for target in targets:
            await closed_loop(target, concurrency, warmup)
        for _ in range(rounds):
            for target in targets:
                windows[target.name].append(await closed_loop(target, concurrency, round_seconds))
        for target in targets:
            results[target.name].append(summarize(concurrency, windows[target.name]))
        for target in targets[1:]:
            paired = [
                b.rps / a.rps
                for a, b in zip(windows[baseline.name], windows[target.name], strict=True)
            ]
            ratios[target.name].append(statistics.median(paired))
            rounds_ratios[target.name].append([round(r, 3) for r in paired])
    return {
        target.name: Comparison(
            {baseline.name: results[baseline.name], target.name: results[target.name]},
            ratios[target.name],
            rounds_ratios[target.name],
        )
        for target in targets[1:]
    }


# ---- echo baseline ------------------------------------------------------------------


async def serve_echo(port: int) -> None:
    """The bare baseline: one generic unary method returning its request bytes."""

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
            ),
        )
    )
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


# ---- store --------------------------------------------------------------------------


def engram_argv(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "engram"), *args]


def start_store(
    tmp: Path, name: str, config: Path | None = None, code_root: Path | None = None
) -> tuple[ServerProcess, int]:
    port = free_port()
    data_dir = tmp / name
    data_dir.mkdir(exist_ok=True)
    argv = engram_argv("serve", "store", "--port", str(port), "--data-dir", str(data_dir))
    if config is not None:
        argv += ["--config", str(config)]
    # its own internal listener and metrics ports: stores run side by side (and
    # beside other suites)
    env = {
        "ENGRAM_SERVER__PORTS__STORE_INTERNAL": str(free_port()),
        "ENGRAM_SERVER__METRICS_PORTS__STORE": str(free_port()),
    }
    if code_root is not None:
        env["PYTHONPATH"] = f"{code_root}{os.pathsep}{code_root / 'gen'}"
    return ServerProcess(f"store ({name})", argv, tmp / f"{name}.log", env), port


def pin_client(cpus: set[int] | None) -> None:
    """Pin every thread of this (client) process to `cpus`; servers, started
    before, keep every CPU. None: no pinning (the default)."""
    if cpus is None:
        return
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cpus)


async def bench_unary(
    tmp: Path, warmup: float, rounds: int, round_seconds: float, client_cpus: set[int] | None
) -> Comparison:
    """Echo baseline and store Remember, both servers up, measured in alternating rounds."""
    echo_port = free_port()
    echo_argv = [sys.executable, str(Path(__file__).resolve()), "--serve-echo", str(echo_port)]
    servers = [ServerProcess("echo server", echo_argv, tmp / "echo.log")]
    try:
        store, store_port = start_store(tmp, "remember")
        servers.append(store)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}") as echo_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{store_port}") as store_channel,
        ):
            await wait_ready(servers[0], echo_channel, None)
            await wait_ready(store, store_channel, STORE_SERVICE)
            pin_client(client_cpus)
            method = echo_channel.unary_unary(
                ECHO_METHOD, request_serializer=None, response_deserializer=None
            )
            stub = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
            deduplicated = 0

            async def echo(n: int) -> None:
                payload = remember_request(n).SerializeToString()
                reply = await method(payload)
                if len(reply) != len(payload):
                    raise RuntimeError("echo returned a different payload")

            async def remember(n: int) -> None:
                nonlocal deduplicated
                reply = await stub.Remember(remember_request(n))
                deduplicated += reply.deduplicated

            comparison = await compare(
                Target("echo", echo, servers[0].proc.pid),
                Target("remember", remember, store.proc.pid),
                warmup,
                rounds,
                round_seconds,
            )
        if deduplicated:
            raise RuntimeError(f"{deduplicated} Remember calls were deduplicated: content repeated")
        return comparison
    finally:
        for server in servers:
            server.stop()


# ---- security: plain vs TLS vs auth+TLS --------------------------------------------


@dataclass
class SecuredStore:
    """A store variant: its config file, the channel credentials and call metadata a
    client needs for it."""

    name: str
    config: Path
    credentials: grpc.ChannelCredentials | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    code_root: Path | None = None  # run the store from this checkout (None: this one)
    sessions: int = 0  # requests carry session ids, n % sessions (0: none)


def api_key(config: Path, data_dir: Path) -> str:
    """A writer key for namespace `bench`, from the real `engram keys create` (the
    store need not be running); the key is the last line of its stdout."""
    result = subprocess.run(
        engram_argv(
            "keys",
            "create",
            "--config",
            str(config),
            "--data-dir",
            str(data_dir),
            "--role",
            "writer",
            "--namespace",
            "bench",
            "--name",
            "bench",
        ),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            "--auth needs `engram keys create` (API keys, issue 14), which failed:\n"
            + (result.stderr or result.stdout)
        )
    return result.stdout.strip().splitlines()[-1]


def _config_file(tmp: Path, name: str, tree: dict[str, Any]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(json.dumps(tree))  # JSON is YAML
    return path


def pii_variants(tmp: Path) -> list[SecuredStore]:
    """PII detection off (the baseline), the default policy, redact everything."""
    return [
        SecuredStore("pii-off", _config_file(tmp, "pii-off", {"pii": {"default_policy": "allow"}})),
        SecuredStore("pii-default", _config_file(tmp, "pii-default", {})),
        SecuredStore(
            "pii-redact-all",
            _config_file(tmp, "pii-redact-all", {"pii": {"default_policy": "redact"}}),
        ),
    ]


def timeline_variants(tmp: Path, before_root: Path) -> list[SecuredStore]:
    """The same Remembers, each with a session id, against the code before the
    temporal link (the baseline) and this code (32 sessions; one session)."""
    config = _config_file(tmp, "timeline", {})
    return [
        SecuredStore("before", config, code_root=before_root, sessions=32),
        SecuredStore("after-32-sessions", config, sessions=32),
        SecuredStore("after-1-session", config, sessions=1),
    ]


def security_variants(tmp: Path, auth: bool) -> list[SecuredStore]:
    """plain, tls and (with `auth`) auth+tls, each with its own config file. TLS uses
    the certificates `engram certs dev` makes; the client verifies the server with the
    CA (server authentication, as for a public listener; no client certificate)."""
    from services.cli.certs import dev_certificates

    certs = tmp / "certs"
    dev_certificates(certs)
    tls = {"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server-key.pem")}
    credentials = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.pem").read_bytes())

    def config(name: str, tree: dict[str, Any]) -> Path:
        return _config_file(tmp, name, tree)

    variants = [
        SecuredStore("plain", config("plain", {})),
        SecuredStore("tls", config("tls", {"server": {"tls": tls}}), credentials),
    ]
    if auth:
        # the key's token bucket set out of reach: this measures what checking a key
        # costs, not the rate limit (writer default 100/s would refuse most calls)
        unlimited = {"writer": {"rate": 1_000_000.0, "burst": 1_000_000}}
        path = config(
            "auth-tls",
            {"server": {"tls": tls}, "auth": {"enabled": True, "rate_limits": unlimited}},
        )
        key = api_key(path, tmp / "auth+tls")
        variants.append(
            SecuredStore("auth+tls", path, credentials, (("authorization", f"Bearer {key}"),))
        )
    return variants


async def bench_security(
    variants: list[SecuredStore],
    tmp: Path,
    warmup: float,
    rounds: int,
    round_seconds: float,
    client_cpus: set[int] | None,
) -> dict[str, Comparison]:
    """Remember against each variant's store, all up at once, in alternating rounds
    (the first variant is the baseline)."""
    servers: list[ServerProcess] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            targets = []
            for variant in variants:
                server, port = start_store(tmp, variant.name, variant.config, variant.code_root)
                servers.append(server)
                address = f"127.0.0.1:{port}"
                channel = await stack.enter_async_context(
                    grpc.aio.insecure_channel(address)
                    if variant.credentials is None
                    else grpc.aio.secure_channel(address, variant.credentials)
                )
                await wait_ready(server, channel, STORE_SERVICE)
                targets.append(
                    Target(
                        variant.name,
                        remember_call(channel, variant.metadata, variant.sessions),
                        server.proc.pid,
                    )
                )
            pin_client(client_cpus)
            return await compare_all(targets, warmup, rounds, round_seconds)
    finally:
        for server in servers:
            server.stop()


def remember_call(
    channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...], sessions: int = 0
) -> Callable[[int], Awaitable[None]]:
    """Remember of distinct content (in session n % `sessions` when given); a
    deduplicated reply means repeated content: fail."""
    stub = store_pb2_grpc.MemoryStoreServiceStub(channel)

    async def remember(n: int) -> None:
        request = remember_request(n)
        if sessions:
            request.session_id = f"session-{n % sessions}"
        reply = await stub.Remember(request, metadata=metadata or None)
        if reply.deduplicated:
            raise RuntimeError(f"Remember {n} was deduplicated: content repeated")

    return remember


def security_table(comparisons: dict[str, Comparison], baseline: str) -> str:
    head = f"{'RPS':>7}{'p50 ms':>8}{'p99 ms':>8}{'cpu ms':>8}"
    names = [baseline, *comparisons]
    first = next(iter(comparisons.values()))
    results = {baseline: first.results[baseline]}
    results |= {name: c.results[name] for name, c in comparisons.items()}
    lines = [
        "Remember, closed loop   "
        + " | ".join(f"{name:^31}" for name in names)
        + " | "
        + " ".join(f"{name + '/' + baseline:>14}" for name in comparisons),
        f"{'callers in flight':<23} " + " | ".join(head for _ in names) + " |",
    ]
    for level, concurrency in enumerate(CONCURRENCY):
        cells = []
        for name in names:
            r = results[name][level]
            cells.append(
                f"{r.rps:>7.0f}{r.p50_ms:>8.2f}{r.p99_ms:>8.2f}{r.server_cpu_ms_per_request:>8.3f}"
            )
        ratios = " ".join(f"{c.ratios[level]:>14.2f}" for c in comparisons.values())
        lines.append(f"{concurrency:<23} " + " | ".join(cells) + " | " + ratios)
    lines += [
        f"RPS = median over rounds; ratio = median of per-round RPS / the {baseline} round "
        "before it;",
        "cpu ms = store process CPU time (all threads) per request.",
    ]
    return "\n".join(lines)


async def run_security(
    args: argparse.Namespace, warmup: float, rounds: int, round_seconds: float
) -> int:
    client_cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None
    stamp = datetime.now(UTC)
    tmp_root = Path(args.tmp_dir) if args.tmp_dir else Path(tempfile.gettempdir())
    mode = "pii" if args.pii else "timeline" if args.timeline else "security"
    tmp = Path(tempfile.mkdtemp(prefix=f"engram-bench-{mode}-", dir=tmp_root))
    info = machine_info(tmp)
    load_start = os.getloadavg()
    busy_start = cpu_busy_percent()
    if args.timeline:
        stores = timeline_variants(tmp, Path(args.before_root).resolve())
    else:
        stores = pii_variants(tmp) if args.pii else security_variants(tmp, args.auth)
    baseline = stores[0].name
    target = PII_RATIO_TARGET if args.pii or args.timeline else SECURITY_RATIO_TARGET
    variants = ", ".join(store.name for store in stores)
    print(
        f"engram store {mode} bench  {stamp.isoformat(timespec='seconds')}  "
        f"nproc={info['nproc']}  python {info['python']}  grpcio {info['grpcio']}\n"
        f"stores: {variants}; per level: warm-up {warmup:g} s, {rounds} rounds x "
        f"{round_seconds:g} s each store\n"
        f"before start: CPU busy {busy_start:.0f}% over 1 s, load average {load_text(load_start)}",
        flush=True,
    )
    if busy_start > 10:
        print("warning: something else is using the CPU; results will be noisy", flush=True)
    try:
        comparisons = await bench_security(stores, tmp, warmup, rounds, round_seconds, client_cpus)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    print()
    print(security_table(comparisons, baseline))
    print()
    at_32 = CONCURRENCY.index(32)
    for name, comparison in comparisons.items():
        ratio = comparison.ratios[at_32]
        status = "MET" if ratio >= target else "NOT MET"
        print(
            f"Remember {name} / {baseline} at 32 in flight: {ratio:.2f} "
            f"(target >= {target:.2f}) {status}"
        )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"store-{mode}-{stamp.strftime('%Y%m%dT%H%M%SZ')}.json"
    first = next(iter(comparisons.values()))
    report = {
        "timestamp": stamp.isoformat(),
        "mode": mode + (" quick" if args.quick else ""),
        "machine": info,
        "load_average": {"start": list(load_start), "end": list(load_end)},
        "cpu_busy_percent_before_start": busy_start,
        "settings": {
            "warmup_s": warmup,
            "rounds": rounds,
            "round_seconds": round_seconds,
            "concurrency": list(CONCURRENCY),
            "auth": args.auth,
            "client_cpus": sorted(client_cpus) if client_cpus else None,
        },
        baseline: [asdict(r) for r in first.results[baseline]],
        **{name: [asdict(r) for r in c.results[name]] for name, c in comparisons.items()},
        "rounds_ratios": {name: c.rounds_ratios for name, c in comparisons.items()},
        "ratios_at_32": {name: c.ratios[at_32] for name, c in comparisons.items()},
        "target_at_32": target,
    }
    out.write_text(json.dumps(provenance.stamped(report), indent=2) + "\n")
    print(f"load average at end: {load_text(load_end)}")
    print(f"results: {out.relative_to(ROOT)}")
    return 0


# ---- PostgreSQL next to SQLite (issue 21) ------------------------------------------


def postgres_cpu_seconds(server_dsn: str) -> float:
    """CPU time of the Postgres server: its postmaster's, its live children's (the
    backends, the background writer...) and that of the children it has reaped
    (cutime/cstime: a store's backends end when the store stops), from /proc. The
    postmaster's pid is in postmaster.pid in its socket directory (pgserver keeps
    the socket in the data directory). nan for a server not started here."""
    from psycopg.conninfo import conninfo_to_dict

    host = str(conninfo_to_dict(server_dsn).get("host") or "")
    try:
        postmaster = int((Path(host) / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return float("nan")
    total = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                status = (proc / "status").read_text()
                parent = int(status.split("\nPPid:\t", 1)[1].split("\n", 1)[0])
                if parent == postmaster:
                    total += process_cpu_seconds(int(proc.name))
    return total


async def run_postgres(
    args: argparse.Namespace, warmup: float, rounds: int, round_seconds: float
) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pg_server import create_database, postgres_server, storage_settings

    client_cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None
    count = args.import_count if args.import_count is not None else (4000 if args.quick else 20000)
    stamp = datetime.now(UTC)
    tmp_root = Path(args.tmp_dir) if args.tmp_dir else Path(tempfile.gettempdir())
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-postgres-", dir=tmp_root))
    info = machine_info(tmp)
    load_start = os.getloadavg()
    busy_start = cpu_busy_percent()
    print(
        f"engram store postgres bench  {stamp.isoformat(timespec='seconds')}  "
        f"nproc={info['nproc']}  python {info['python']}  grpcio {info['grpcio']}\n"
        f"per level: warm-up {warmup:g} s, {rounds} rounds x {round_seconds:g} s each store; "
        f"import {count} memories x {args.import_runs} per backend\n"
        f"before start: CPU busy {busy_start:.0f}% over 1 s, load average {load_text(load_start)}",
        flush=True,
    )
    imports: dict[str, list[ImportResult]] = {"sqlite": [], "postgres": []}
    try:
        with postgres_server(tmp) as server:

            def postgres_config(name: str) -> Path:
                tree = {"storage": storage_settings(create_database(server))}
                return _config_file(tmp, name, tree)

            stores = [
                SecuredStore("sqlite", _config_file(tmp, "sqlite", {})),
                SecuredStore("postgres", postgres_config("postgres")),
            ]
            pg_cpu_start = postgres_cpu_seconds(server)
            comparisons = await bench_security(
                stores, tmp, warmup, rounds, round_seconds, client_cpus
            )
            pg_cpu = postgres_cpu_seconds(server) - pg_cpu_start
            for run in range(args.import_runs):
                order = ["sqlite", "postgres"] if run % 2 == 0 else ["postgres", "sqlite"]
                for backend in order:
                    name = f"import-{backend}-{run}"
                    config = (
                        postgres_config(name)
                        if backend == "postgres"
                        else _config_file(tmp, name, {})
                    )
                    print(f"ImportMemories {count} into {backend} ...", flush=True)
                    imports[backend].append(await bench_import(tmp, count, config, name))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    pg = comparisons["postgres"].results["postgres"]
    requests = sum(r.requests for r in pg) if all(hasattr(r, "requests") for r in pg) else 0
    print()
    print(security_table(comparisons, "sqlite"))
    if requests:
        print(
            f"Postgres server CPU during the Remember rounds: {pg_cpu:.1f} s "
            f"({1000 * pg_cpu / requests:.3f} ms per measured Postgres Remember; the warm-up's"
            " and the start-up's CPU included, so an upper bound)"
        )
    print()
    print(f"{'ImportMemories':<22}{'memories':>10}{'seconds':>9}{'memories/s':>12}")
    for backend, results in imports.items():
        for result in results:
            print(
                f"{backend:<22}{result.memories:>10}{result.seconds:>9.2f}"
                f"{result.memories_per_s:>12.0f}"
            )
    best = {b: max(r.memories_per_s for r in rs) for b, rs in imports.items()}
    print(f"import postgres / sqlite (best of each): {best['postgres'] / best['sqlite']:.2f}")
    at_32 = CONCURRENCY.index(32)
    print(
        f"Remember postgres / sqlite at 32 in flight: {comparisons['postgres'].ratios[at_32]:.2f}"
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"store-postgres-{stamp.strftime('%Y%m%dT%H%M%SZ')}.json"
    report = {
        "timestamp": stamp.isoformat(),
        "command": " ".join(sys.argv),
        "mode": "postgres" + (" quick" if args.quick else ""),
        "machine": info,
        "load_average": {"start": list(load_start), "end": list(load_end)},
        "cpu_busy_percent_before_start": busy_start,
        "settings": {
            "warmup_s": warmup,
            "rounds": rounds,
            "round_seconds": round_seconds,
            "concurrency": list(CONCURRENCY),
            "import_count": count,
            "client_cpus": sorted(client_cpus) if client_cpus else None,
        },
        "sqlite": [asdict(r) for r in comparisons["postgres"].results["sqlite"]],
        "postgres": [asdict(r) for r in pg],
        "rounds_ratios": comparisons["postgres"].rounds_ratios,
        "ratio_at_32": comparisons["postgres"].ratios[at_32],
        "postgres_server_cpu_s_remember": pg_cpu,
        "imports": {b: [asdict(r) for r in rs] for b, rs in imports.items()},
    }
    out.write_text(json.dumps(provenance.stamped(report), indent=2) + "\n")
    print(f"load average at end: {load_text(load_end)}")
    print(f"results: {out.relative_to(ROOT)}")
    return 0


# ---- this code against an earlier checkout, both backends ----------------------------


async def run_versus(
    args: argparse.Namespace, warmup: float, rounds: int, round_seconds: float
) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pg_server import create_database, postgres_server, storage_settings

    before_root = Path(args.versus).resolve()
    client_cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None
    count = args.import_count if args.import_count is not None else (4000 if args.quick else 20000)
    stamp = datetime.now(UTC)
    tmp_root = Path(args.tmp_dir) if args.tmp_dir else Path(tempfile.gettempdir())
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-versus-", dir=tmp_root))
    info = machine_info(tmp)
    load_start = os.getloadavg()
    busy_start = cpu_busy_percent()
    print(
        f"engram store versus bench  {stamp.isoformat(timespec='seconds')}  "
        f"nproc={info['nproc']}  python {info['python']}  grpcio {info['grpcio']}\n"
        f"before: {before_root}; per level: warm-up {warmup:g} s, {rounds} rounds x "
        f"{round_seconds:g} s each store; import {count} memories x {args.import_runs} per "
        f"code and backend\n"
        f"before start: CPU busy {busy_start:.0f}% over 1 s, load average {load_text(load_start)}",
        flush=True,
    )
    codes = {"before": before_root, "after": None}
    imports: dict[str, list[ImportResult]] = {
        f"{code}-{backend}": [] for backend in ("sqlite", "postgres") for code in codes
    }
    try:
        with postgres_server(tmp) as server:

            def config(name: str, backend: str) -> Path:
                if backend == "sqlite":
                    return _config_file(tmp, name, {})
                return _config_file(
                    tmp, name, {"storage": storage_settings(create_database(server))}
                )

            stores = [
                SecuredStore(
                    f"{code}-{backend}", config(f"{code}-{backend}", backend), code_root=root
                )
                for backend in ("sqlite", "postgres")
                for code, root in codes.items()
            ]
            remember = await bench_security(stores, tmp, warmup, rounds, round_seconds, client_cpus)
            for run in range(args.import_runs):
                order = list(codes) if run % 2 == 0 else list(reversed(codes))
                for backend in ("sqlite", "postgres"):
                    for code in order:
                        name = f"import-{code}-{backend}-{run}"
                        print(f"ImportMemories {count}, {code} code, {backend} ...", flush=True)
                        imports[f"{code}-{backend}"].append(
                            await bench_import(tmp, count, config(name, backend), name, codes[code])
                        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    print()
    print(security_table(remember, "before-sqlite"))
    print()
    print(f"{'ImportMemories':<22}{'memories':>10}{'seconds':>9}{'memories/s':>12}")
    for name, results in imports.items():
        for result in results:
            print(
                f"{name:<22}{result.memories:>10}{result.seconds:>9.2f}"
                f"{result.memories_per_s:>12.0f}"
            )
    # each store's rounds against the SQLite baseline's, so on PostgreSQL after/before
    # is the ratio of the two stores' ratios, round by round (their rounds are adjacent)
    vs_base = {name: comparison.rounds_ratios for name, comparison in remember.items()}
    remember_rounds = {
        "sqlite": vs_base["after-sqlite"],
        "postgres": [
            [a / b for a, b in zip(after, before, strict=True)]
            for after, before in zip(
                vs_base["after-postgres"], vs_base["before-postgres"], strict=True
            )
        ],
    }
    ratios: dict[str, Any] = {}
    for backend in ("sqlite", "postgres"):
        before, after = imports[f"before-{backend}"], imports[f"after-{backend}"]
        paired = [b.memories_per_s / a.memories_per_s for a, b in zip(before, after, strict=True)]
        ratios[backend] = {
            "remember_after_over_before_rounds": remember_rounds[backend],
            "remember_after_over_before": {
                str(c): statistics.median(r)
                for c, r in zip(CONCURRENCY, remember_rounds[backend], strict=True)
            },
            "import_after_over_before": paired,
        }
        print(
            f"{backend}: Remember after/before at 1 and 32 in flight "
            + " and ".join(
                f"{v:.2f}" for v in ratios[backend]["remember_after_over_before"].values()
            )
            + "; ImportMemories after/before per run "
            + ", ".join(f"{r:.2f}" for r in paired)
        )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"store-versus-{stamp.strftime('%Y%m%dT%H%M%SZ')}.json"
    report = {
        "timestamp": stamp.isoformat(),
        "command": " ".join(sys.argv),
        "before_root": str(before_root),
        "before_commit": subprocess.run(
            ["git", "-C", str(before_root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": info,
        "load_average": {"start": list(load_start), "end": list(load_end)},
        "cpu_busy_percent_before_start": busy_start,
        "settings": {
            "warmup_s": warmup,
            "rounds": rounds,
            "round_seconds": round_seconds,
            "concurrency": list(CONCURRENCY),
            "import_count": count,
            "client_cpus": sorted(client_cpus) if client_cpus else None,
        },
        "remember": {name: [asdict(r) for r in c.results[name]] for name, c in remember.items()}
        | {"before-sqlite": [asdict(r) for r in remember["after-sqlite"].results["before-sqlite"]]},
        "remember_rounds_vs_before_sqlite": {n: c.rounds_ratios for n, c in remember.items()},
        "imports": {n: [asdict(r) for r in rs] for n, rs in imports.items()},
        "after_over_before": ratios,
    }
    out.write_text(json.dumps(provenance.stamped(report), indent=2) + "\n")
    print(f"load average at end: {load_text(load_end)}")
    print(f"results: {out.relative_to(ROOT)}")
    return 0


@dataclass
class ImportResult:
    memories: int
    seconds: float
    memories_per_s: float
    created: int


async def bench_import(
    tmp: Path,
    count: int,
    config: Path | None = None,
    name: str = "import",
    code_root: Path | None = None,
) -> ImportResult:
    server, port = start_store(tmp, name, config, code_root)
    # Build every message up front so the timed window is the RPC alone.
    messages = [
        store_pb2.ImportMemoriesRequest(
            namespace="bench",
            items=[import_item(n) for n in range(start, min(start + IMPORT_MESSAGE_ITEMS, count))],
        )
        for start in range(0, count, IMPORT_MESSAGE_ITEMS)
    ]
    try:
        options = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            await wait_ready(server, channel, STORE_SERVICE)
            stub = store_pb2_grpc.MemoryStoreServiceStub(channel)

            # one stream per MAX_IMPORT_STREAM_ITEMS items, one after another, as a client must
            per_stream = MAX_IMPORT_STREAM_ITEMS // IMPORT_MESSAGE_ITEMS
            streams = [messages[i : i + per_stream] for i in range(0, len(messages), per_stream)]

            async def stream(
                batch: list[store_pb2.ImportMemoriesRequest],
            ) -> AsyncIterator[store_pb2.ImportMemoriesRequest]:
                for message in batch:
                    yield message

            created = deduplicated = failed = 0
            started = time.perf_counter()
            for batch in streams:
                reply = await stub.ImportMemories(stream(batch))
                created += reply.created_count
                deduplicated += reply.deduplicated_count
                failed += reply.failed_count
            elapsed = time.perf_counter() - started
        if created != count or failed:
            raise RuntimeError(
                f"import created {created} of {count} "
                f"({deduplicated} deduplicated, {failed} failed)"
            )
        return ImportResult(count, elapsed, count / elapsed, created)
    finally:
        server.stop()


def bench_cli_import(tmp: Path, count: int) -> ImportResult:
    """`engram import` of the same items from a JSON-lines file into a fresh store:
    the whole command (start-up, parsing, streaming, the report) is timed."""
    server, port = start_store(tmp, "cli-import")
    source = tmp / "cli-import.jsonl"
    with source.open("w", encoding="utf-8") as file:
        for n in range(count):
            item = import_item(n)
            record = {"content": item.content, "tags": list(item.tags), "who": item.who}
            file.write(json.dumps({**record, "source_type": item.source_type}) + "\n")
    # this checkout's CLI and client, whatever the virtualenv's editable install points at
    path = os.pathsep.join(str(ROOT / p) for p in (".", "gen", "clients/python"))
    env = {**os.environ, "PYTHONPATH": path}
    argv = [sys.executable, "-m", "services.cli.main", "import", str(source), "-n", "bench"]
    argv += ["--address", f"127.0.0.1:{port}", "--json"]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            deadline = time.monotonic() + 30
            while True:
                try:
                    health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=1
                    )
                    break
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"engram import failed: {done.stdout}{done.stderr}")
        created = int(json.loads(done.stdout)["created"])
        if created != count:
            raise RuntimeError(f"engram import created {created} of {count}: {done.stdout}")
        return ImportResult(count, elapsed, count / elapsed, created)
    finally:
        server.stop()


def raw_rows(count: int) -> list[NewMemory]:
    """The rows the store would write for the same import items (memory, history,
    embed job; no extract job: the benchmark's store runs the default
    configuration, pipeline off), built by the store's own `prepare_drafts`."""
    drafts = []
    for n in range(count):
        item = import_item(n)
        drafts.append(
            draft_memory(
                MemoryFields(
                    namespace="bench",
                    content=item.content,
                    tags=tuple(item.tags),
                    who=item.who,
                    source_type=item.source_type,
                )
            )
        )
    return prepare_drafts(drafts, clock.now_text(), JOB_MAX_ATTEMPTS, extract=False)


def bench_raw_sqlite(tmp: Path, count: int) -> ImportResult:
    """Batched executemany inserts, 100 memories per BEGIN IMMEDIATE/COMMIT,
    synchronous FULL, same schema and triggers. Rows are built before timing."""
    rows = raw_rows(count)
    path = tmp / "raw" / "engram.db"
    conn = open_read_write(path, synchronous="FULL")
    try:
        apply_migrations(conn)
        started = time.perf_counter()
        for start in range(0, count, RAW_TRANSACTION_MEMORIES):
            chunk = rows[start : start + RAW_TRANSACTION_MEMORIES]
            conn.execute("BEGIN IMMEDIATE")
            repo.insert_memory_rows(conn, [p.row for p in chunk])
            repo.insert_history(conn, [p.history for p in chunk])
            repo.enqueue_jobs(
                conn,
                [job for p in chunk for job in (p.target.embed_job, p.extract_job) if job],
            )
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        created = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
        # external-content FTS: count what the trigger indexed, not the content table
        fts = conn.execute("SELECT count(*) FROM memories_fts_docsize").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0]
    finally:
        conn.close()
    if created != count or fts != count or jobs != count:  # one embed job each
        raise RuntimeError(f"raw insert wrote {created} memories, {fts} fts rows, {jobs} jobs")
    return ImportResult(count, elapsed, count / elapsed, created)


# ---- report -------------------------------------------------------------------------


def table(unary: Comparison, imported: ImportResult, raw: ImportResult) -> str:
    head = f"{'RPS':>7}{'p50 ms':>8}{'p99 ms':>8}{'cpu ms':>8}"
    lines = [
        f"{'Unary, closed loop':<19}| {'echo baseline':^31} | {'store Remember':^31} | ratio",
        f"{'callers in flight':<19}| {head} | {head} | RPS",
    ]

    def cells(r: LoadResult) -> str:
        return f"{r.rps:>7.0f}{r.p50_ms:>8.2f}{r.p99_ms:>8.2f}{r.server_cpu_ms_per_request:>8.3f}"

    for e, r, ratio in zip(
        unary.results["echo"], unary.results["remember"], unary.ratios, strict=True
    ):
        lines.append(f"{e.concurrency:<19}| {cells(e)} | {cells(r)} | {ratio:.2f}")
    lines += [
        "RPS = median over rounds; ratio = median of per-round Remember/echo RPS;",
        "cpu ms = server process CPU time (all threads) per request.",
        "",
        f"{'ImportMemories':<26}{'memories':>10}{'seconds':>9}{'memories/s':>12}",
        f"{'raw SQLite (100/txn)':<26}{raw.memories:>10}{raw.seconds:>9.2f}{raw.memories_per_s:>12.0f}",
        f"{'store ImportMemories':<26}{imported.memories:>10}{imported.seconds:>9.2f}"
        f"{imported.memories_per_s:>12.0f}",
        f"{'ratio store / raw':<26}{'':>10}{'':>9}{imported.memories_per_s / raw.memories_per_s:>12.2f}",
    ]
    return "\n".join(lines)


def load_text(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


async def run(args: argparse.Namespace) -> int:
    quick = args.quick
    warmup = args.warmup if args.warmup is not None else (0.5 if quick else 2.0)
    rounds = args.rounds if args.rounds is not None else (3 if quick else 5)
    round_seconds = (
        args.round_seconds if args.round_seconds is not None else (1.0 if quick else 2.0)
    )
    if args.versus:
        return await run_versus(args, warmup, rounds, round_seconds)
    if args.postgres:
        return await run_postgres(args, warmup, rounds, round_seconds)
    if args.security or args.pii or args.timeline:
        return await run_security(args, warmup, rounds, round_seconds)
    count = args.import_count if args.import_count is not None else (4000 if quick else 20000)
    all_cpus = os.sched_getaffinity(0)
    client_cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None
    stamp = datetime.now(UTC)
    tmp_root = Path(args.tmp_dir) if args.tmp_dir else Path(tempfile.gettempdir())
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-", dir=tmp_root))
    info = machine_info(tmp)
    load_start = os.getloadavg()
    busy_start = cpu_busy_percent()
    print(
        f"engram store bench  {stamp.isoformat(timespec='seconds')}  nproc={info['nproc']}  "
        f"python {info['python']}  grpcio {info['grpcio']}  sqlite {info['sqlite']}\n"
        f"cpu: {info['cpu_model']}  data: {tmp} ({info['data_filesystem']})\n"
        f"mode: {'quick' if quick else 'normal'}  per level: warm-up {warmup:g} s, "
        f"{rounds} rounds x {round_seconds:g} s each side; import {count} memories\n"
        f"load generator pinned to CPUs: {sorted(client_cpus) if client_cpus else 'no'}\n"
        f"before start: CPU busy {busy_start:.0f}% over 1 s, load average {load_text(load_start)}",
        flush=True,
    )
    if busy_start > 10:
        print("warning: something else is using the CPU; results will be noisy", flush=True)
    try:
        print("echo baseline vs Remember ...", flush=True)
        unary = await bench_unary(tmp, warmup, rounds, round_seconds, client_cpus)
        pin_client(all_cpus)
        print("raw SQLite inserts ...", flush=True)
        raw = bench_raw_sqlite(tmp, count)
        print("ImportMemories ...", flush=True)
        imported = await bench_import(tmp, count)
        print("engram import (CLI) ...", flush=True)
        cli_imported = bench_cli_import(tmp, count)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()

    remember_ratio = unary.ratios[CONCURRENCY.index(32)]
    import_ratio = imported.memories_per_s / raw.memories_per_s
    cli_ratio = cli_imported.memories_per_s / imported.memories_per_s
    print()
    print(table(unary, imported, raw))
    print(
        f"{'engram import (CLI)':<26}{cli_imported.memories:>10}{cli_imported.seconds:>9.2f}"
        f"{cli_imported.memories_per_s:>12.0f}"
    )
    print()
    verdict = [
        ("Remember RPS / echo RPS at 32 in flight", remember_ratio, REMEMBER_RATIO_TARGET),
        ("ImportMemories / raw SQLite memories/s", import_ratio, IMPORT_RATIO_TARGET),
        ("engram import / ImportMemories memories/s", cli_ratio, CLI_IMPORT_RATIO_TARGET),
    ]
    for label, value, target in verdict:
        status = "MET" if value >= target else "NOT MET"
        print(f"{label}: {value:.2f} (target >= {target:.2f}) {status}")

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"store-{stamp.strftime('%Y%m%dT%H%M%SZ')}.json"
    report = {
        "timestamp": stamp.isoformat(),
        "mode": "quick" if quick else "normal",
        "machine": info,
        "load_average": {"start": list(load_start), "end": list(load_end)},
        "cpu_busy_percent_before_start": busy_start,
        "settings": {
            "warmup_s": warmup,
            "rounds": rounds,
            "round_seconds": round_seconds,
            "concurrency": list(CONCURRENCY),
            "import_count": count,
            "import_message_items": IMPORT_MESSAGE_ITEMS,
            "raw_transaction_memories": RAW_TRANSACTION_MEMORIES,
            "payload_bytes": len(remember_request(0).SerializeToString()),
            "client_cpus": sorted(client_cpus) if client_cpus else None,
        },
        "echo": [asdict(r) for r in unary.results["echo"]],
        "remember": [asdict(r) for r in unary.results["remember"]],
        "remember_vs_echo_rounds": unary.rounds_ratios,
        "import": {
            "store": asdict(imported),
            "raw_sqlite": asdict(raw),
            "cli": asdict(cli_imported),
        },
        "ratios": {
            "remember_vs_echo_at_32": remember_ratio,
            "import_vs_raw": import_ratio,
            "cli_import_vs_import": cli_ratio,
        },
        "targets": {
            "remember_vs_echo_at_32": REMEMBER_RATIO_TARGET,
            "import_vs_raw": IMPORT_RATIO_TARGET,
            "cli_import_vs_import": CLI_IMPORT_RATIO_TARGET,
        },
    }
    out.write_text(json.dumps(provenance.stamped(report), indent=2) + "\n")
    print(f"load average at end: {load_text(load_end)}")
    print(f"results: {out.relative_to(ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="Engram store benchmarks")
    parser.add_argument("--quick", action="store_true", help="short run (~30 s)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per level")
    parser.add_argument("--round-seconds", type=float, default=None, help="seconds per round")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per level")
    parser.add_argument("--import-count", type=int, default=None, help="memories to import")
    parser.add_argument("--tmp-dir", default=None, help="where the databases go (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and server logs")
    parser.add_argument(
        "--client-cpus",
        default=None,
        help="pin the load generator (this process) to these CPUs, e.g. 1; servers keep all",
    )
    parser.add_argument(
        "--security",
        action="store_true",
        help="Remember on plain vs TLS (vs auth+TLS with --auth) stores, instead of the rest",
    )
    parser.add_argument(
        "--auth", action="store_true", help="with --security: also auth.enabled plus a writer key"
    )
    parser.add_argument(
        "--pii",
        action="store_true",
        help="Remember with PII detection off vs the default policy vs redact-all",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="Remember with session ids: the code at --before-root vs this code",
    )
    parser.add_argument(
        "--before-root", default=None, help="with --timeline: a checkout of the code before"
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="Remember and ImportMemories on a Postgres store next to a SQLite one",
    )
    parser.add_argument(
        "--versus",
        default=None,
        metavar="DIR",
        help="Remember and ImportMemories, the code checked out at DIR vs this code, "
        "SQLite and PostgreSQL",
    )
    parser.add_argument(
        "--import-runs",
        type=int,
        default=2,
        help="with --postgres: imports per backend; with --versus: per code and backend",
    )
    parser.add_argument(
        "--serve-echo", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.timeline and not args.before_root:
        parser.error("--timeline needs --before-root")
    if args.serve_echo is not None:
        asyncio.run(serve_echo(args.serve_echo))
        return 0
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
