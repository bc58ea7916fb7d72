"""Shared helpers for the multi-process end-to-end tests (fixtures are re-exported
by conftest.py; tests import the helpers as `from e2e_helpers import ...`).

Every test here runs the store as a real subprocess (`python -m services.cli.main
serve store ...`) on a free port and talks to it over the network, exactly as a
client would. Every process a test starts is killed by a fixture finalizer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from free_ports import free_port  # re-exported: e2e tests import it from here
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.cli.main import SERVICES

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
EXIT_TIMEOUT_S = 30.0


def lost_memories(
    stub: store_pb2_grpc.MemoryStoreServiceStub, namespace: str, expected: dict[str, str]
) -> list[str]:
    """The ids of `expected` (id -> content) GetMemory does not find, each with
    its status code; every one it finds must hold its content, live, at version 1."""
    missing: list[str] = []
    for memory_id, content in expected.items():
        try:
            got = stub.GetMemory(
                store_pb2.GetMemoryRequest(namespace=namespace, id=memory_id), timeout=10
            )
        except grpc.RpcError as exc:
            missing.append(f"{memory_id}: {exc.code()}")
            continue
        assert got.memory.content == content
        assert got.memory.deleted is False
        assert got.memory.version == 1
    return missing


def listed_ids(stub: store_pb2_grpc.MemoryStoreServiceStub, namespace: str) -> set[str]:
    """Every live memory id ListMemories pages through in `namespace`."""
    ids: set[str] = set()
    token = ""
    while True:
        page = stub.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=namespace, page_size=500, page_token=token),
            timeout=10,
        )
        ids.update(memory.id for memory in page.memories)
        token = page.next_page_token
        if not token:
            return ids


def find_grpcurl() -> str | None:
    """The grpcurl binary `make setup` installs beside the interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "grpcurl"
    return str(beside) if beside.exists() else shutil.which("grpcurl")


GRPCURL = find_grpcurl()
# Set by `make test`: a test that would skip for want of a tool the dev install
# provides fails instead, so a broken setup cannot pass as green.
STRICT_ENV = "ENGRAM_STRICT_TESTS"


def needs_grpcurl() -> pytest.MarkDecorator:
    """The mark of a test that runs the grpcurl binary: skipped without it, but
    under ENGRAM_STRICT_TESTS=1 its module fails to collect instead (grpcurl
    comes with `make setup`, so missing it means the README examples never ran)."""
    if GRPCURL is None and os.environ.get(STRICT_ENV) == "1":
        pytest.fail(
            f"grpcurl binary not installed ({STRICT_ENV}=1: not skipped); run make setup",
            pytrace=False,
        )
    return pytest.mark.skipif(GRPCURL is None, reason="grpcurl binary not installed")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# Metrics endpoints off (server.metrics_ports.* = 0): their default ports are fixed,
# and tests (and suites) running side by side would take them from one another.
# tests/deploy/test_metrics_endpoints.py turns them on, on free ports.
METRICS_OFF = {f"ENGRAM_SERVER__METRICS_PORTS__{name.upper()}": "0" for name in SERVICES}


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any ENGRAM_* setting (metrics off), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(METRICS_OFF)
    env.update(extra or {})
    return env


def engram_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli.main", *args]


def health_status(channel: grpc.Channel, service: str = "", timeout: float = 2.0) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return int(response.status)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass
class ProcessHandle:
    """A started engram process, its log file and (once known) its port."""

    process: subprocess.Popen[bytes]
    log_path: Path
    port: int | None = None
    err_path: Path | None = None  # stderr, when kept apart from the log
    internal_port: int | None = None  # a store's internal listener
    channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def address(self) -> str:
        assert self.port is not None
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        """Everything the process wrote (stdout, plus stderr unless split)."""
        return _read(self.log_path) + ("" if self.err_path is None else _read(self.err_path))

    def stdout(self) -> str:
        return _read(self.log_path)

    def stderr(self) -> str:
        assert self.err_path is not None, "spawn(..., split_stderr=True) keeps stderr apart"
        return _read(self.err_path)

    def channel(self) -> grpc.Channel:
        channel = grpc.insecure_channel(self.address)
        self.channels.append(channel)
        return channel

    def internal_channel(self) -> grpc.Channel:
        """A channel to a store's internal listener (job queue, admin, documents)."""
        assert self.internal_port is not None
        channel = grpc.insecure_channel(f"127.0.0.1:{self.internal_port}")
        self.channels.append(channel)
        return channel

    def stub(self) -> store_pb2_grpc.MemoryStoreServiceStub:
        return store_pb2_grpc.MemoryStoreServiceStub(self.channel())

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until the health service answers SERVING; fails if the process dies first."""
        deadline = time.monotonic() + timeout
        channel = grpc.insecure_channel(self.address)
        try:
            last_error: Exception | None = None
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    pytest.fail(
                        f"process exited with {self.process.returncode} before becoming ready:\n"
                        + self.log()
                    )
                try:
                    if (
                        health_status(channel, timeout=1.0)
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        return
                except grpc.RpcError as exc:
                    last_error = exc
                time.sleep(0.1)
            pytest.fail(f"not ready within {timeout}s (last error: {last_error}):\n" + self.log())
        finally:
            channel.close()

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def wait_exit(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"process {self.pid} did not exit within {timeout}s:\n" + self.log())

    def stop(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        """Graceful stop (SIGTERM) and the exit code."""
        self.close_channels()
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def close_channels(self) -> None:
        for channel in self.channels:
            channel.close()
        self.channels.clear()

    def kill(self) -> None:
        """Hard kill of the process (and its process group, for `engram up`)."""
        self.close_channels()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        # Children of `engram up` live in the same (new) process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


class Launcher:
    """Starts engram processes for one test and kills them all at the end."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._handles: list[ProcessHandle] = []
        self._count = 0

    def spawn(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        internal_port: int | None = None,
        split_stderr: bool = False,
    ) -> ProcessHandle:
        """Start `args`; stdout and stderr go to one log file unless `split_stderr`."""
        self._count += 1
        log_path = self._log_dir / f"process-{self._count}.log"
        err_path = log_path.with_suffix(".stderr") if split_stderr else None
        with contextlib.ExitStack() as files:
            log_file = files.enter_context(log_path.open("wb"))
            err_target: Any = subprocess.STDOUT
            if err_path is not None:
                err_target = files.enter_context(err_path.open("wb"))
            process = subprocess.Popen(
                list(args),
                cwd=REPO_ROOT,
                env=clean_env(env),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=err_target,
                start_new_session=True,  # own process group: killpg reaches children too
            )
        handle = ProcessHandle(
            process, log_path, port, err_path=err_path, internal_port=internal_port
        )
        self._handles.append(handle)
        return handle

    def start_store(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        config: Path | None = None,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> ProcessHandle:
        port = free_port() if port is None else port
        # its own internal port too: never the default one another store may hold
        internal_port = free_port()
        args = ["serve", "store", "--port", str(port), "--data-dir", str(data_dir)]
        if config is not None:
            args += ["--config", str(config)]
        handle = self.spawn(
            engram_command(*args),
            env={"ENGRAM_SERVER__PORTS__STORE_INTERNAL": str(internal_port), **(env or {})},
            port=port,
            internal_port=internal_port,
        )
        if wait:
            handle.wait_ready()
        return handle

    def kill_all(self) -> None:
        for handle in self._handles:
            handle.kill()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    launcher = Launcher(log_dir)
    try:
        yield launcher
    finally:
        launcher.kill_all()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("logs"))
    try:
        yield launcher
    finally:
        launcher.kill_all()


def rpc_error_details(error: grpc.RpcError) -> dict[str, Any]:
    """ErrorInfo and BadRequest from a failed call's google.rpc.Status."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    found: dict[str, Any] = {"status": status}
    if status is None:
        return found
    for detail in status.details:
        for name, cls in (
            ("error_info", error_details_pb2.ErrorInfo),
            ("bad_request", error_details_pb2.BadRequest),
        ):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                found[name] = message
    return found


SUITE_SERVICES = ("store", "search", "pipeline", "maintenance")


@dataclass
class RunningSuite:
    """An `engram up` suite on free ports (embedding off: recall by keywords)."""

    up: ProcessHandle
    ports: dict[str, int]
    root: Path

    def address(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"

    def client_addresses(self) -> dict[str, str]:
        """Keyword arguments for engram.client.Engram / AsyncEngram."""
        return {
            "address": self.address("store"),
            "search_address": self.address("search"),
            "pipeline_address": self.address("pipeline"),
            "maintenance_address": self.address("maintenance"),
        }


def start_suite(
    launcher: Launcher, root: Path, settings: Mapping[str, Any] | None = None
) -> RunningSuite:
    """`engram up` with every service on a free port; returns once all four serve.
    `settings`: more of engram.yaml, merged over the ports and `embedding: none`."""
    # the store's internal listener too: a fixed 50061 collides with any other suite
    ports = {name: free_port() for name in (*SUITE_SERVICES, "store_internal")}
    config = root / "engram.yaml"
    base: dict[str, Any] = {
        "server": {"ports": ports},
        "providers": {"embedding": {"kind": "none"}},
    }
    config.write_text(yaml.safe_dump(_merged(base, settings or {})), encoding="utf-8")
    up = launcher.spawn(
        engram_command("up", "--config", str(config), "--data-dir", str(root / "data")),
        port=ports["store"],
    )
    for name in SUITE_SERVICES:
        ProcessHandle(up.process, up.log_path, ports[name]).wait_ready(timeout=90)
    return RunningSuite(up, ports, root)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
