"""engram.client over TLS against a real `engram serve store` with mutual TLS: the
client presents its certificate and checks the server's against the CA
(`Tls(ca_file, cert_file, key_file)`); without a client certificate, or in
plaintext, the store cannot be reached (Unavailable)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from e2e_helpers import Launcher
from engram.client import Engram, NotFound, RetryPolicy, Tls, Unavailable
from services.cli.certs import dev_certificates

READY_S = 30.0


def test_mutual_tls(launcher: Launcher, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    dev_certificates(certs)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    handle = launcher.start_store(
        data_dir,
        wait=False,
        env={
            "ENGRAM_SERVER__TLS__CERT_FILE": str(certs / "server.pem"),
            "ENGRAM_SERVER__TLS__KEY_FILE": str(certs / "server-key.pem"),
            "ENGRAM_SERVER__TLS__CLIENT_CA_FILE": str(certs / "ca.pem"),
        },
    )
    tls = Tls(
        ca_file=str(certs / "ca.pem"),
        cert_file=str(certs / "client.pem"),
        key_file=str(certs / "client-key.pem"),
    )
    with Engram(handle.address, tls=tls) as engram:
        deadline = time.monotonic() + READY_S
        while True:  # until the store listens (its health check needs TLS too)
            try:
                stored = engram.remember("sent over mutual TLS", namespace="tls")
                break
            except Unavailable:
                assert handle.process.poll() is None, handle.log()
                assert time.monotonic() < deadline, handle.log()
                time.sleep(0.2)
        assert (
            engram.get_memory(stored.memory.id, namespace="tls").content == "sent over mutual TLS"
        )
        with pytest.raises(NotFound):
            engram.get_memory("missing", namespace="tls")
    once = RetryPolicy(max_attempts=1)
    no_client_cert = Tls(ca_file=str(certs / "ca.pem"))
    for refused in (
        Engram(handle.address, tls=no_client_cert, retry=once),
        Engram(handle.address, retry=once),  # plaintext
    ):
        with refused, pytest.raises(Unavailable):
            refused.get_memory(stored.memory.id, namespace="tls")
