"""TLS on both store listeners (server.tls.*) and in the channel helper
(clients.tls.ca_file): a service reaches the store's internal listener over
TLS, and a plaintext client gets nowhere. Real servers; certificates made here."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common.channels import channel


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, key: Any, cert: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".crt")
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(key_path), str(cert_path)


def make_certs(directory: Path) -> dict[str, str]:
    """A CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("engram test CA"))
        .issuer_name(_name("engram test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("store"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _, ca_file = _write(directory / "ca", ca_key, ca)
    key_file, cert_file = _write(directory / "store", key, cert)
    return {"ca_file": ca_file, "key_file": key_file, "cert_file": cert_file}


def test_a_service_channel_reaches_the_internal_listener_over_tls(
    tmp_path: Path, make_config: Callable[..., Any], start_store_server: Callable[..., Any]
) -> None:
    certs = make_certs(tmp_path)
    config = make_config(
        **{
            "server.tls.cert_file": certs["cert_file"],
            "server.tls.key_file": certs["key_file"],
            "clients.tls.ca_file": certs["ca_file"],
        }
    )
    server, _ = start_store_server(config)
    address = f"127.0.0.1:{server.app.internal_port}"

    async def over_tls() -> jq.GetQueueStatsResponse:
        ch = channel(config, address)
        try:
            return await job_queue_pb2_grpc.JobQueueServiceStub(ch).GetQueueStats(
                jq.GetQueueStatsRequest()
            )
        finally:
            await ch.close()

    assert asyncio.run(over_tls()).indexed_memory_count == 0

    with grpc.insecure_channel(address) as plain, pytest.raises(grpc.RpcError) as caught:
        job_queue_pb2_grpc.JobQueueServiceStub(plain).GetQueueStats(
            jq.GetQueueStatsRequest(), timeout=5
        )
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
