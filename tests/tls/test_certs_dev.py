"""`engram certs dev --out DIR`: a CA, a service certificate valid for every name a
client uses (localhost, 127.0.0.1, the compose service names) and for both ends of
mTLS, and a client certificate; keys private to their owner; nothing overwritten."""

from __future__ import annotations

import ipaddress
import stat
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from e2e.e2e_helpers import REPO_ROOT, clean_env, engram_command
from tls_helpers import make_certs

FILES = {"ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"}


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certificates_chain_to_the_ca_and_name_every_service(tmp_path: Path) -> None:
    out = make_certs(tmp_path / "certs", "--host", "engram.internal", "--host", "10.1.2.3")
    assert {path.name for path in out.iterdir()} == FILES
    ca, server, client = (load(out / f"{name}.pem") for name in ("ca", "server", "client"))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca)
        assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {
        "localhost", "store", "search", "pipeline", "maintenance", "engram.internal",
        "pg-store", "pg-search-1", "pg-search-2", "pg-pipeline-1", "pg-pipeline-2",
        "pg-maintenance",
    }  # fmt: skip
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
        ipaddress.ip_address("10.1.2.3"),
    }
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    client_usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(client_usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    for name in ("ca", "server", "client"):
        key = serialization.load_pem_private_key((out / f"{name}-key.pem").read_bytes(), None)
        assert key.public_key() == load(out / f"{name}.pem").public_key()
        assert stat.S_IMODE((out / f"{name}-key.pem").stat().st_mode) == 0o600


def test_existing_certificates_are_kept_unless_forced(tmp_path: Path) -> None:
    out = make_certs(tmp_path / "certs")
    before = (out / "ca.pem").read_bytes()
    again = subprocess.run(
        engram_command("certs", "dev", "--out", str(out)),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"engram certs dev: {out} already has ca.pem, ca-key.pem, server.pem, server-key.pem,"
        " client.pem, client-key.pem (--force replaces them)"
    ]
    assert (out / "ca.pem").read_bytes() == before
    make_certs(out, "--force")
    assert (out / "ca.pem").read_bytes() != before
    load(out / "server.pem").verify_directly_issued_by(load(out / "ca.pem"))
