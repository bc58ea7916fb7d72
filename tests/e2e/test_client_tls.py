"""engram.client over TLS against a real `engram serve store` with mutual TLS: the
client presents its certificate and checks the server's against the CA
(`Tls(ca_file, cert_file, key_file)`); without a client certificate, or in
plaintext, the store cannot be reached (Unavailable)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from e2e_helpers import REPO_ROOT, Launcher, clean_env, engram_command
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


def test_cli_client_commands_over_mutual_tls(launcher: Launcher, tmp_path: Path) -> None:
    """`engram remember|get --cacert --cert --key` against the mTLS store; plaintext and a
    missing client certificate fail with exit 1, and --cert without --key is a usage error."""
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
    ca = ("--cacert", str(certs / "ca.pem"))
    mutual = (*ca, "--cert", str(certs / "client.pem"), "--key", str(certs / "client-key.pem"))
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )

    def engram(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            engram_command(*args, "--address", handle.address, "--json"),
            cwd=REPO_ROOT,
            env=clean_env({"PYTHONPATH": path}),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    deadline = time.monotonic() + READY_S
    while True:  # until the store listens
        stored = engram("remember", "sent by the CLI over mutual TLS", "-n", "tls", *mutual)
        if stored.returncode == 0:
            break
        assert handle.process.poll() is None, handle.log()
        assert time.monotonic() < deadline, stored.stderr + handle.log()
        time.sleep(0.5)
    memory_id = json.loads(stored.stdout.splitlines()[-1])["memory"]["id"]
    got = engram("get", memory_id, "-n", "tls", *mutual)
    assert got.returncode == 0, got.stderr
    assert "sent by the CLI over mutual TLS" in got.stdout
    for refused in (("get", memory_id, "-n", "tls", *ca), ("get", memory_id, "-n", "tls")):
        done = engram(*refused, "--timeout", "3")
        assert done.returncode == 1, done.stdout + done.stderr
    half = engram("get", memory_id, "-n", "tls", *ca, "--cert", str(certs / "client.pem"))
    assert half.returncode == 2 and "--cert and --key go together" in half.stderr
