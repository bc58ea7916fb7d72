"""Process lifecycle: graceful shutdown, `engram up`, configuration errors and
the mutationsFrozen switch, each observed from outside the process."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3 as stdlib_sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e_helpers import (
    REPO_ROOT,
    Launcher,
    ProcessHandle,
    engram_command,
    free_port,
    listed_ids,
    port_is_free,
    rpc_error_details,
)
from engram.store.v1 import store_pb2, store_pb2_grpc

SERVICE = "engram.store.v1.MemoryStoreService"
# How long a process that cannot start may take to exit. Generous: a healthy
# failure takes about a second; only a hang gets anywhere near it.
STARTUP_FAILURE_TIMEOUT_S = 20.0


def engram_up_command(*args: str) -> list[str]:
    """The installed console script when there is one, else `python -m`."""
    script = Path(sys.executable).parent / "engram"
    if script.exists():
        return [str(script), "up", *args]
    return engram_command("up", *args)


# ---- (a) SIGTERM: graceful shutdown under load --------------------------------


@dataclass
class Burst:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)
    failures: list[grpc.StatusCode] = field(default_factory=list)
    unacknowledged: set[str] = field(default_factory=set)  # contents of the calls that failed
    enough: threading.Event = field(default_factory=threading.Event)
    target: int = 150


def burst_writer(stub: store_pb2_grpc.MemoryStoreServiceStub, burst: Burst, thread: int) -> None:
    seq = 0
    while True:
        content = f"graceful shutdown memory t{thread}s{seq}"
        seq += 1
        try:
            response = stub.Remember(store_pb2.RememberRequest(content=content), timeout=30)
        except grpc.RpcError as exc:
            with burst.lock:
                burst.failures.append(exc.code())
                burst.unacknowledged.add(content)
            return
        with burst.lock:
            burst.acked[response.memory.id] = content
            if len(burst.acked) >= burst.target:
                burst.enough.set()


# A call that reaches a server which has begun shutting down is refused by gRPC
# itself: UNAVAILABLE once the listener is gone, CANCELLED while the server is
# draining. Either way the store never ran it (the test checks that).
REFUSED_DURING_SHUTDOWN = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


def poll_health_until_not_serving(store: ProcessHandle) -> str:
    """After the signal: poll Check until the store stops saying SERVING.

    Returns NOT_SERVING (health flipped while the process was still up) or the
    status code of the refused call; bounded by a generous deadline.
    """
    channel = grpc.insecure_channel(store.address)
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            try:
                status = stub.Check(
                    health_pb2.HealthCheckRequest(service=SERVICE), timeout=5
                ).status
            except grpc.RpcError as exc:
                assert exc.code() in REFUSED_DURING_SHUTDOWN, exc
                return str(exc.code().name)
            if status != health_pb2.HealthCheckResponse.SERVING:
                assert status == health_pb2.HealthCheckResponse.NOT_SERVING, status
                return "NOT_SERVING"
            time.sleep(0.01)
    finally:
        channel.close()
    pytest.fail("the store kept reporting SERVING after SIGTERM:\n" + store.log())


def test_sigterm_during_remember_burst_exits_zero_and_keeps_every_acknowledged_write(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(data_dir)
    stub = store.stub()
    burst = Burst()
    threads = [
        threading.Thread(target=burst_writer, args=(stub, burst, n), daemon=True) for n in range(16)
    ]
    for thread in threads:
        thread.start()
    assert burst.enough.wait(timeout=120), store.log()

    store.signal(signal.SIGTERM)
    assert poll_health_until_not_serving(store) in {"NOT_SERVING", "UNAVAILABLE", "CANCELLED"}

    assert store.wait_exit(timeout=60) == 0, store.log()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    # Calls that did not make it in are refused by the transport, never failed
    # half-way by the store (no INTERNAL from a closed writer, for instance).
    assert burst.failures, "the writers must have been cut off by the shutdown"
    assert set(burst.failures) <= REFUSED_DURING_SHUTDOWN, burst.failures
    assert '"shutdown signal received"' in store.log()
    assert '"rpc crashed"' not in store.log()

    # After the exit, nobody answers on that port.
    probe = grpc.insecure_channel(store.address)
    try:
        with pytest.raises(grpc.RpcError) as excinfo:
            health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert excinfo.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        probe.close()
    store.close_channels()

    restarted = launcher.start_store(data_dir)
    stub = restarted.stub()
    for memory_id, content in burst.acked.items():
        got = stub.GetMemory(store_pb2.GetMemoryRequest(id=memory_id), timeout=10)
        assert got.memory.content == content
    # ...and nothing else was written, except possibly a call whose commit
    # raced the shutdown and whose answer the client never received.
    stored = listed_ids(stub, "")
    assert set(burst.acked) <= stored
    for memory_id in stored - set(burst.acked):
        got = stub.GetMemory(store_pb2.GetMemoryRequest(id=memory_id), timeout=10)
        assert got.memory.content in burst.unacknowledged
    assert restarted.stop() == 0


def test_health_watch_streams_serving_then_not_serving_on_sigterm(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(data_dir)
    watch = health_pb2_grpc.HealthStub(store.channel()).Watch(
        health_pb2.HealthCheckRequest(service=SERVICE), timeout=60
    )
    try:
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        store.signal(signal.SIGTERM)
        # Graceful shutdown flips health before it stops taking calls.
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        watch.cancel()  # an open stream would hold the server for its whole grace period
    assert store.wait_exit(timeout=60) == 0, store.log()


def test_sigint_stops_serve_gracefully_with_exit_code_zero(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(data_dir)
    memory = store.stub().Remember(store_pb2.RememberRequest(content="sigint check"), timeout=10)
    store.close_channels()
    store.signal(signal.SIGINT)
    assert store.wait_exit() == 0, store.log()

    restarted = launcher.start_store(data_dir)
    got = restarted.stub().GetMemory(store_pb2.GetMemoryRequest(id=memory.memory.id), timeout=10)
    assert got.memory.content == "sigint check"


# ---- (b) engram up ------------------------------------------------------------


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def suite_config(path: Path, store_port: int) -> Path:
    """`engram up` starts every service: give each a free port so runs never collide."""
    return write_config(
        path,
        f"server:\n  ports:\n    store: {store_port}\n    search: {free_port()}\n"
        f"    pipeline: {free_port()}\n    maintenance: {free_port()}\n"
        f"    store_internal: {free_port()}\n"
        f"clients:\n  store_address: 127.0.0.1:{store_port}\n",
    )


@pytest.mark.parametrize("ctrl_c", ["signal-up-only", "signal-process-group"])
def test_engram_up_with_config_file_serves_on_configured_port_and_exits_zero_on_sigint(
    launcher: Launcher, data_dir: Path, tmp_path: Path, ctrl_c: str
) -> None:
    port = free_port()
    config = suite_config(tmp_path / "engram.yaml", port)
    up = launcher.spawn(
        engram_up_command("--config", str(config), "--data-dir", str(data_dir)), port=port
    )
    up.wait_ready()
    stub = up.stub()
    created = stub.Remember(store_pb2.RememberRequest(content=f"up {ctrl_c}"), timeout=10)
    assert (data_dir / "engram.db").exists()
    up.close_channels()

    if ctrl_c == "signal-process-group":  # what a terminal's Ctrl-C does
        os.killpg(up.pid, signal.SIGINT)
    else:
        up.signal(signal.SIGINT)
    assert up.wait_exit() == 0, up.log()
    assert f"store on 127.0.0.1:{port}" in up.log()
    # `up` waits for its children, so the store's port is free again.
    assert port_is_free(port)

    restarted = launcher.start_store(data_dir)
    got = restarted.stub().GetMemory(store_pb2.GetMemoryRequest(id=created.memory.id), timeout=10)
    assert got.memory.content == f"up {ctrl_c}"


def test_engram_up_without_config_serves_on_default_port_50051(
    launcher: Launcher, data_dir: Path
) -> None:
    if not all(port_is_free(p) for p in (50051, 50052, 50053, 50054)):
        pytest.skip("a default port (50051-50054) is in use on this machine")
    up = launcher.spawn(engram_up_command("--data-dir", str(data_dir)), port=50051)
    up.wait_ready()
    response = up.stub().Remember(store_pb2.RememberRequest(content="default port"), timeout=10)
    assert response.memory.content == "default port"
    up.close_channels()
    up.signal(signal.SIGINT)
    assert up.wait_exit() == 0, up.log()


def test_serve_exits_nonzero_when_its_port_is_taken(launcher: Launcher, data_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        store = launcher.start_store(data_dir, port=port, wait=False)
        code = store.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    assert code != 0, store.log()
    assert str(port) in store.log()


def test_engram_up_exits_nonzero_when_the_store_cannot_bind_its_port(
    launcher: Launcher, data_dir: Path, tmp_path: Path
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        config = suite_config(tmp_path / "engram.yaml", port)
        up = launcher.spawn(engram_up_command("--config", str(config), "--data-dir", str(data_dir)))
        code = up.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    assert code == 1, up.log()
    # stopped before anything starts, in one line (tests/deploy/test_up_lifecycle.py)
    assert f"engram up: store port {port} is in use by" in up.log()


def child_pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if not children.exists():
        pytest.skip("needs Linux /proc to find the store started by `engram up`")
    return [int(p) for p in children.read_text().split()]


def test_engram_up_exits_nonzero_when_its_store_dies(
    launcher: Launcher, data_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    config = suite_config(tmp_path / "engram.yaml", port)
    up = launcher.spawn(
        engram_up_command("--config", str(config), "--data-dir", str(data_dir)), port=port
    )
    up.wait_ready()
    [store_pid] = [
        pid
        for pid in child_pids(up.pid)
        if b"serve\x00store" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    os.kill(store_pid, signal.SIGKILL)
    assert up.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S) == 1, up.log()
    assert "store exited with -9" in up.log()


def served_children(pid: int) -> list[str]:
    """The service names of the `serve` processes `engram up` has started."""
    names = []
    for child in child_pids(pid):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\x00")
            if b"serve" in argv:
                names.append(argv[argv.index(b"serve") + 1].decode())
    return sorted(names)


def test_engram_up_starts_the_other_services_once_the_store_serves(
    launcher: Launcher, data_dir: Path, tmp_path: Path
) -> None:
    """While the store cannot open its database (another process holds an exclusive
    lock), `up` has started the store alone; once it serves, the other three follow."""
    port = free_port()
    config = suite_config(tmp_path / "engram.yaml", port)
    data_dir.mkdir(parents=True, exist_ok=True)
    holder = stdlib_sqlite3.connect(data_dir / "engram.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    up = launcher.spawn(
        engram_up_command("--config", str(config), "--data-dir", str(data_dir)), port=port
    )
    try:
        time.sleep(2.0)  # well inside the store's 5 s busy timeout
        assert served_children(up.pid) == ["store"], up.log()
    finally:
        holder.execute("COMMIT")
        holder.close()
    up.wait_ready()
    deadline = time.monotonic() + STARTUP_FAILURE_TIMEOUT_S
    while served_children(up.pid) != ["maintenance", "pipeline", "search", "store"]:
        assert time.monotonic() < deadline, up.log()
        time.sleep(0.1)
    up.signal(signal.SIGINT)
    assert up.wait_exit() == 0, up.log()


def test_engram_health_command_reports_serving_for_a_running_store(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(data_dir)
    healthy = subprocess.run(
        engram_command("health", store.address, "--service", SERVICE),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert healthy.returncode == 0, healthy.stderr
    assert "SERVING" in healthy.stdout
    assert store.stop() == 0
    gone = subprocess.run(
        engram_command("health", store.address, "--timeout", "2"),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode == 1
    assert "UNAVAILABLE" in gone.stderr


# ---- (c) configuration errors -------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "env", "key"),
    [
        pytest.param(
            "memory:\n  pipelineV2:\n    workerPollMs: 5\n",
            {},
            "memory.pipelineV2.workerPollMs",
            id="value-out-of-range",
        ),
        pytest.param(
            "memory:\n  pipelineV2:\n    noSuchSetting: true\n",
            {},
            "memory.pipelineV2.noSuchSetting",
            id="unknown-key",
        ),
        pytest.param(
            "storage:\n  synchronous: SOMETIMES\n", {}, "storage.synchronous", id="bad-choice"
        ),
        pytest.param(
            "",
            {"ENGRAM_MEMORY__PIPELINEV2__WORKERPOLLMS": "5"},
            "memory.pipelineV2.workerPollMs",
            id="env-value-out-of-range",
        ),
    ],
)
@pytest.mark.parametrize("command", ["serve", "up"])
def test_bad_configuration_stops_startup_with_message_naming_the_key(
    launcher: Launcher,
    data_dir: Path,
    tmp_path: Path,
    yaml_text: str,
    env: dict[str, str],
    key: str,
    command: str,
) -> None:
    config = write_config(tmp_path / "bad.yaml", yaml_text)
    common = ["--config", str(config), "--data-dir", str(data_dir)]
    if command == "serve":
        args = engram_command("serve", "store", "--port", "0", *common)
    else:
        args = engram_up_command(*common)
    process = launcher.spawn(args, env=env, split_stderr=True)
    code = process.wait_exit(timeout=STARTUP_FAILURE_TIMEOUT_S)
    stderr = process.stderr()
    assert code == 2, process.log()
    assert "configuration error" in stderr
    assert key in stderr
    assert "Traceback" not in stderr
    assert process.stdout() == ""
    # Nothing was opened or created.
    assert not (data_dir / "engram.db").exists()


# ---- (d) mutationsFrozen ------------------------------------------------------


def assert_frozen(call: Callable[[], Any]) -> None:
    with pytest.raises(grpc.RpcError) as excinfo:
        call()
    error = excinfo.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    details = rpc_error_details(error)
    assert details["status"] is not None, "no google.rpc.Status details"
    info = details["error_info"]
    assert info.reason == "MUTATIONS_FROZEN"
    assert info.domain == "engram.dev"


def test_mutations_frozen_env_var_rejects_every_write_but_serves_reads(
    launcher: Launcher, data_dir: Path
) -> None:
    ns = "frozen"
    store = launcher.start_store(data_dir)
    stub = store.stub()
    kept = stub.Remember(
        store_pb2.RememberRequest(namespace=ns, content="kept memory alpha"), timeout=10
    ).memory
    tomb = stub.Remember(
        store_pb2.RememberRequest(namespace=ns, content="deleted memory beta"), timeout=10
    ).memory
    tomb = stub.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace=ns, id=tomb.id, reason="setup"), timeout=10
    ).memory
    assert store.stop() == 0

    frozen = launcher.start_store(
        data_dir, env={"ENGRAM_MEMORY__PIPELINEV2__MUTATIONSFROZEN": "true"}
    )
    stub = frozen.stub()

    assert_frozen(
        lambda: stub.Remember(
            store_pb2.RememberRequest(namespace=ns, content="new memory gamma"), timeout=10
        )
    )
    assert_frozen(
        lambda: stub.Remember(
            store_pb2.RememberRequest(namespace=ns, content="kept memory alpha"), timeout=10
        )
    )
    assert_frozen(
        lambda: stub.ImportMemories(
            iter(
                [
                    store_pb2.ImportMemoriesRequest(
                        namespace=ns, items=[store_pb2.ImportItem(content="imported delta")]
                    )
                ]
            ),
            timeout=10,
        )
    )
    assert_frozen(
        lambda: stub.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                namespace=ns,
                reason="r",
                patches=[store_pb2.MemoryPatch(id=kept.id, content="changed alpha")],
            ),
            timeout=10,
        )
    )
    assert_frozen(
        lambda: stub.DeleteMemory(
            store_pb2.DeleteMemoryRequest(namespace=ns, id=kept.id, reason="r"), timeout=10
        )
    )
    assert_frozen(
        lambda: stub.RecoverMemory(
            store_pb2.RecoverMemoryRequest(namespace=ns, id=tomb.id, reason="r"), timeout=10
        )
    )
    assert_frozen(
        lambda: stub.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(
                namespace=ns, mode=store_pb2.FORGET_MODE_EXECUTE, ids=[kept.id], reason="r"
            ),
            timeout=10,
        )
    )

    # Reads still work, and show that nothing was written.
    got = stub.GetMemory(store_pb2.GetMemoryRequest(namespace=ns, id=kept.id), timeout=10).memory
    assert got.content == "kept memory alpha"
    assert got.version == 1
    got_tomb = stub.GetMemory(store_pb2.GetMemoryRequest(namespace=ns, id=tomb.id), timeout=10)
    assert got_tomb.memory.deleted
    assert got_tomb.memory.version == tomb.version
    listed = stub.ListMemories(store_pb2.ListMemoriesRequest(namespace=ns), timeout=10)
    assert [m.id for m in listed.memories] == [kept.id]
    history = stub.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(namespace=ns, memory_id=kept.id), timeout=10
    )
    assert [e.event_type for e in history.events] == [store_pb2.HISTORY_EVENT_TYPE_CREATED]
    preview = stub.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            namespace=ns, mode=store_pb2.FORGET_MODE_PREVIEW, query="alpha"
        ),
        timeout=10,
    )
    assert [c.id for c in preview.candidates] == [kept.id]
    assert preview.deleted_count == 0
    assert frozen.stop() == 0
