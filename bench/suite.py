"""Start a private Engram suite (store, search, pipeline) for a benchmark run."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Suite:
    store: str
    search: str
    pipeline: str
    data_dir: Path
    store_internal: str = ""  # the job queue's listener
    metrics: dict[str, str] | None = None  # each service's Prometheus address


def wait_serving(address: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{address} did not become SERVING")


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`b` deep-merged into `a` (nested engram.yaml mappings)."""
    for key, value in b.items():
        a[key] = merge(a.get(key, {}), value) if isinstance(value, dict) else value
    return a


@contextmanager
def running_suite(
    settings: dict[str, Any] | None = None, data_dir: Path | None = None, code: Path = ROOT
) -> Iterator[Suite]:
    """`settings` are extra engram.yaml keys (nested mapping); `code` is the
    checkout the services run from (an export of an older commit, for before/after)."""
    with (
        tempfile.TemporaryDirectory(prefix="engram-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        directory = data_dir or Path(tmp)
        storage = (settings or {}).get("storage", {})
        if storage.get("kind") == "postgres" and not storage.get("postgres", {}).get("dsn"):
            # `--set storage.kind=postgres` alone: a server of our own (bench/pg_server.py)
            from pg_server import create_database, postgres_server

            server = stack.enter_context(postgres_server(Path(tmp)))
            settings = merge(
                settings or {}, {"storage": {"postgres": {"dsn": create_database(server)}}}
            )
        ports = {name: free_port() for name in ("store", "store_internal", "search", "pipeline")}
        # free metrics ports too: the defaults (9091-9094) clash between suites
        metrics = {name: free_port() for name in ("store", "search", "pipeline", "maintenance")}
        config = merge(
            {
                "server": {"ports": ports, "metrics_ports": metrics},
                "clients": {
                    "store_address": f"127.0.0.1:{ports['store']}",
                    "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                    # the pipeline's near-duplicate checks call Recall
                    "search_address": f"127.0.0.1:{ports['search']}",
                },
                "storage": {"path": str(directory / "engram.db")},
            },
            settings or {},
        )
        config_path = Path(tmp) / "engram.yaml"
        config_path.write_text(yaml.safe_dump(config))
        # engram.client from this checkout too (an installed one may be another checkout's)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [str(code), str(code / "gen"), str(code / "clients" / "python")]
            ),
        )
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "services.cli.main",
                    "serve",
                    name,
                    "--config",
                    str(config_path),
                ],
                cwd=code,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(Path(tmp) / f"{name}.log", "w"),  # noqa: SIM115
            )
            for name in ("store", "search", "pipeline")
        ]
        try:
            addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
            for address in addresses.values():
                wait_serving(address)
            yield Suite(
                addresses["store"],
                addresses["search"],
                addresses["pipeline"],
                directory,
                addresses["store_internal"],
                {name: f"127.0.0.1:{port}" for name, port in metrics.items()},
            )
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()


def shared_dataset(relative: str) -> Path:
    """A file or folder under ../shared/datasets, from a checkout or a worktree of one
    (/work/wt/<branch>); the checkout's path when neither has it (the error names it)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "datasets" / relative).exists():
            return base / "shared" / "datasets" / relative
    return ROOT.parent / "shared" / "datasets" / relative
