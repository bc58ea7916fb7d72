"""Helpers for the TLS tests: configuration files that turn TLS on, channels with the
right (or wrong) credentials, and waiting for a TLS server to report SERVING."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e.e2e_helpers import REPO_ROOT, ProcessHandle, clean_env, engram_command

READY_TIMEOUT_S = 60.0


def make_certs(out: Path, *extra: str) -> Path:
    """`engram certs dev --out OUT EXTRA...`, which must succeed."""
    result = subprocess.run(
        engram_command("certs", "dev", "--out", str(out), *extra),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out


def server_tls(certs: Path, *, mutual: bool = False) -> dict[str, str]:
    """`server.tls` for the development certificates; `mutual` also requires client certs."""
    tls = {"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server-key.pem")}
    if mutual:
        tls["client_ca_file"] = str(certs / "ca.pem")
    return tls


def clients_tls(certs: Path, *, with_cert: bool = False) -> dict[str, str]:
    """`clients.tls`: trust the development CA; `with_cert` presents the service certificate
    (what a service does under mTLS)."""
    tls = {"ca_file": str(certs / "ca.pem")}
    if with_cert:
        tls |= {"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server-key.pem")}
    return tls


def write_config(path: Path, tree: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(tree)), encoding="utf-8")
    return path


def credentials(
    ca: Path, cert: Path | None = None, key: Path | None = None
) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )


def client_credentials(certs: Path) -> grpc.ChannelCredentials:
    """The CA and the client certificate `engram certs dev` made for users."""
    return credentials(certs / "ca.pem", certs / "client.pem", certs / "client-key.pem")


def check_health(address: str, creds: grpc.ChannelCredentials | None, timeout: float = 5.0) -> int:
    """The server's health status; raises grpc.RpcError when the call fails."""
    channel = (
        grpc.insecure_channel(address) if creds is None else grpc.secure_channel(address, creds)
    )
    with channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=timeout
        )
    return int(reply.status)


def wait_serving(
    handle: ProcessHandle,
    creds: grpc.ChannelCredentials,
    address: str | None = None,
    timeout: float = READY_TIMEOUT_S,
) -> None:
    """Until `address` (default: the handle's) answers SERVING over TLS."""
    address = address or handle.address
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            pytest.fail(f"exited with {handle.process.returncode}:\n{handle.log()}")
        try:
            if check_health(address, creds, timeout=1.0) == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError as exc:
            last = exc
        time.sleep(0.2)
    pytest.fail(f"{address} not SERVING over TLS within {timeout}s ({last}):\n{handle.log()}")
