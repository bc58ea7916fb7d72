"""`engram up` and `engram serve` start and stop cleanly (real processes): children go
with their parent even when it is SIGKILLed, a busy port is one line naming the holder,
two listeners configured on one port is one line naming both, the configuration file defaults to ./engram.yaml, and a suite moved to other ports
talks only to itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from free_ports import free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.maintenance.v1 import maintenance_pb2 as mpb
from engram.maintenance.v1 import maintenance_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("store", "search", "pipeline", "maintenance")
# every listener `engram up` opens: the four services and the store's internal one
LISTENERS = (*SERVICES, "store_internal")
STARTUP_S = 60.0
GONE_S = 30.0  # SIGTERM from the kernel, then the services' graceful stop


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def engram(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen")])
    # metrics off: their fixed default ports would be shared with other suites
    environment.update({f"ENGRAM_SERVER__METRICS_PORTS__{n.upper()}": "0" for n in SERVICES})
    environment.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def port_config(tmp_path: Path, ports: dict[str, int], name: str = "engram.yaml") -> Path:
    config = tmp_path / name
    config.write_text(
        "server:\n  ports:\n"
        + "".join(f"    {service}: {port}\n" for service, port in ports.items())
        + "providers:\n  embedding:\n    kind: none\n",
        encoding="utf-8",
    )
    return config


def wait_serving(process: subprocess.Popen[str], ports: dict[str, int]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while not all(serving(f"127.0.0.1:{p}") for p in ports.values()):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "services did not all become SERVING"
        time.sleep(0.2)


def children_of(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


def test_sigkill_of_up_takes_every_service_with_it(tmp_path: Path) -> None:
    ports = {name: free_port() for name in LISTENERS}
    up = engram("up", "--config", str(port_config(tmp_path, ports)), "--data-dir", str(tmp_path))
    children: list[int] = []
    try:
        wait_serving(up, ports)
        children = children_of(up.pid)
        assert len(children) == 4
        up.kill()
        up.wait(timeout=10)
        deadline = time.monotonic() + GONE_S
        while any(alive(pid) for pid in children) or not all(map(bindable, ports.values())):
            assert time.monotonic() < deadline, "services outlived engram up"
            time.sleep(0.2)
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        stop(up)


def test_a_busy_port_is_one_line_naming_the_port_and_its_holder(tmp_path: Path) -> None:
    ports = {name: free_port() for name in LISTENERS}
    config = port_config(tmp_path, ports)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", ports["pipeline"]))
        holder.listen()
        for command in (["up"], ["serve", "pipeline"]):
            process = engram(*command, "--config", str(config), "--data-dir", str(tmp_path))
            _, err = process.communicate(timeout=60)
            assert process.returncode == 1, err
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith(
                f"engram {command[0]}: pipeline port {ports['pipeline']} is in use by "
                f"pid {os.getpid()} ("
            ), err
            assert "Traceback" not in err
    # nothing was started: the store's port stayed free
    assert bindable(ports["store"])


def test_two_listeners_on_one_port_is_one_line_naming_both(tmp_path: Path) -> None:
    ports = {name: free_port() for name in LISTENERS}
    ports["store_internal"] = ports["maintenance"]
    up = engram("up", "--config", str(port_config(tmp_path, ports)), "--data-dir", str(tmp_path))
    _, err = up.communicate(timeout=60)
    assert up.returncode == 1, err
    assert err.strip().splitlines() == [
        f"engram up: maintenance and store internal are both configured on port "
        f"{ports['maintenance']}"
    ], err
    ports["store_internal"] = ports["store"]
    config = port_config(tmp_path, ports, name="serve.yaml")
    store = engram("serve", "store", "--config", str(config), "--data-dir", str(tmp_path))
    _, err = store.communicate(timeout=60)
    assert store.returncode == 1, err
    assert err.strip().splitlines() == [
        f"engram serve: store and store internal are both configured on port {ports['store']}"
    ], err
    # nothing was started
    assert all(map(bindable, ports.values()))


def test_up_and_serve_read_engram_yaml_in_the_working_directory(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "engram.yaml").write_text(
        f"server:\n  ports:\n    store: {port}\n    store_internal: {free_port()}\n"
    )
    store = engram("serve", "store", "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not serving(f"127.0.0.1:{port}"):
            assert store.poll() is None, store.communicate()
            assert time.monotonic() < deadline, "store did not listen on the port from engram.yaml"
            time.sleep(0.2)
    finally:
        _, err = stop(store)
    assert store.returncode == 0, err


def diagnostics(port: int) -> mpb.GetDiagnosticsResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = maintenance_pb2_grpc.MaintenanceServiceStub(channel)
        return stub.GetDiagnostics(mpb.GetDiagnosticsRequest(), timeout=10)


def test_a_suite_on_moved_ports_reaches_its_own_services(tmp_path: Path) -> None:
    """No clients.* settings: each client address follows the port `up` gave."""
    ports = {name: free_port() for name in LISTENERS}
    up = engram("up", "--config", str(port_config(tmp_path, ports)), "--data-dir", str(tmp_path))
    try:
        wait_serving(up, ports)
        report = diagnostics(ports["maintenance"])
        assert report.providers.pipeline_reachable
        assert report.storage.db_size_bytes > 0
    finally:
        _, err = stop(up)
    assert up.returncode == 0, err


def test_services_refuse_another_suites_store(tmp_path: Path) -> None:
    first_ports = {name: free_port() for name in LISTENERS}
    first = engram(
        "up",
        "--config",
        str(port_config(tmp_path, first_ports, "first.yaml")),
        "--data-dir",
        str(tmp_path / "first"),
    )
    second: subprocess.Popen[str] | None = None
    try:
        wait_serving(first, first_ports)
        second_ports = {name: free_port() for name in LISTENERS}
        config = port_config(tmp_path, second_ports, "second.yaml")
        # the second suite's clients point at the first suite's store
        config.write_text(
            config.read_text()
            + f"clients:\n  store_address: 127.0.0.1:{first_ports['store']}\n"
            + f"  store_internal_address: 127.0.0.1:{first_ports['store_internal']}\n"
        )
        second = engram("up", "--config", str(config), "--data-dir", str(tmp_path / "second"))
        try:
            _, err = second.communicate(timeout=STARTUP_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "the second suite kept running against the first's store"
            ) from None
        assert second.returncode == 1, err
        assert "belongs to another suite" in err, err
        assert "Traceback" not in err, err
        # the first suite is untouched and still serving
        assert all(serving(f"127.0.0.1:{p}") for p in first_ports.values())
    finally:
        if second is not None:
            stop(second)
        _, err = stop(first)
    assert first.returncode == 0, err
