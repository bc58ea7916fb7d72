"""`engram up` starts all four services; maintenance answers GetDiagnostics
through the store's admin RPCs and the pipeline's status (real processes)."""

from __future__ import annotations

import signal
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
STARTUP_S = 60.0


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def test_engram_up_serves_all_four_services_and_maintenance_reports(tmp_path: Path) -> None:
    listeners = ("store", "store_internal", "search", "pipeline", "maintenance")
    ports = {name: free_port() for name in listeners}
    config = tmp_path / "engram.yaml"
    config.write_text(
        "server:\n  ports:\n"
        + "".join(f"    {name}: {port}\n" for name, port in ports.items())
        # metrics off: their fixed default ports would be shared with other suites
        + "  metrics_ports: {store: 0, search: 0, pipeline: 0, maintenance: 0}\n"
        + f"clients:\n  store_address: 127.0.0.1:{ports['store']}\n"
        f"  pipeline_address: 127.0.0.1:{ports['pipeline']}\n"
        "providers:\n  embedding:\n    kind: none\n",
        encoding="utf-8",
    )
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "up",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_S
        addresses = [f"127.0.0.1:{port}" for port in ports.values()]
        while not all(serving(a) for a in addresses):
            assert up.poll() is None, "engram up exited early"
            assert time.monotonic() < deadline, "services did not all become SERVING"
            time.sleep(0.2)
        with grpc.insecure_channel(f"127.0.0.1:{ports['maintenance']}") as channel:
            stub = maintenance_pb2_grpc.MaintenanceServiceStub(channel)
            report = stub.GetDiagnostics(mpb.GetDiagnosticsRequest(), timeout=10)
        assert report.providers.pipeline_reachable
        assert 0.0 <= report.score <= 1.0
        assert report.health == mpb.HEALTH_CLASS_HEALTHY
        assert report.storage.db_size_bytes > 0
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert f"maintenance on 127.0.0.1:{ports['maintenance']}" in output
