"""A TLS setting that cannot work stops every service at start-up with one line that
names the key (and the file), exit code 1, no traceback, and nothing opened."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from e2e.e2e_helpers import Launcher, engram_command, free_port
from tls_helpers import write_config

SERVICES = ("store", "search", "pipeline", "maintenance")
EXIT_TIMEOUT_S = 60.0


def _case(name: str, certs: Path, tmp_path: Path) -> tuple[dict[str, str], str]:
    """(server.tls, the one line expected after "engram: cannot start SERVICE: ")."""
    cert, key, ca = certs / "server.pem", certs / "server-key.pem", certs / "ca.pem"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n", encoding="utf-8")
    missing = tmp_path / "missing.pem"
    cases = {
        "cert-without-key": (
            {"cert_file": str(cert)},
            "server.tls: set both cert_file and key_file, or neither",
        ),
        "client-ca-without-cert": (
            {"client_ca_file": str(ca)},
            "server.tls.client_ca_file needs server.tls.cert_file and key_file",
        ),
        "missing-cert": (
            {"cert_file": str(missing), "key_file": str(key)},
            f"cannot read server.tls.cert_file {missing}: No such file or directory",
        ),
        "not-a-certificate": (
            {"cert_file": str(garbage), "key_file": str(key)},
            f"server.tls.cert_file {garbage}: not a PEM certificate",
        ),
        "key-of-another-certificate": (
            {"cert_file": str(certs / "client.pem"), "key_file": str(key)},
            f"server.tls.key_file {key}: not the key of server.tls.cert_file {certs / 'client.pem'}",
        ),
        "certificate-as-key": (
            {"cert_file": str(cert), "key_file": str(cert)},
            f"server.tls.key_file {cert}: not an unencrypted PEM private key",
        ),
        "client-ca-not-a-certificate": (
            {"cert_file": str(cert), "key_file": str(key), "client_ca_file": str(garbage)},
            f"server.tls.client_ca_file {garbage}: not a PEM certificate",
        ),
    }
    return cases[name]


CASES = (
    "cert-without-key",
    "client-ca-without-cert",
    "missing-cert",
    "not-a-certificate",
    "key-of-another-certificate",
    "certificate-as-key",
    "client-ca-not-a-certificate",
)


def _refuses(launcher: Launcher, service: str, tls: dict[str, str], tmp_path: Path) -> list[str]:
    # a free internal port: the store checks the default one (50061) is free first
    ports = {"store_internal": free_port()}
    config = write_config(tmp_path / "engram.yaml", {"server": {"tls": tls, "ports": ports}})
    data = tmp_path / "data"
    handle = launcher.spawn(
        engram_command(
            "serve",
            service,
            "--port",
            str(free_port()),
            "--config",
            str(config),
            "--data-dir",
            str(data),
        )
    )
    code = handle.wait_exit(timeout=EXIT_TIMEOUT_S)
    output = handle.log()
    assert code == 1, output
    assert "Traceback" not in output
    assert not data.exists(), "a refused start opened the database"
    return [line for line in output.splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_tls_setting_stops_the_store_with_one_line(
    launcher: Launcher, certs: Path, tmp_path: Path, case: str
) -> None:
    tls, expected = _case(case, certs, tmp_path)
    assert _refuses(launcher, "store", tls, tmp_path) == [f"engram: cannot start store: {expected}"]


@pytest.mark.parametrize("service", SERVICES[1:])
def test_every_service_checks_its_tls_setting_before_anything_else(
    launcher: Launcher, certs: Path, tmp_path: Path, service: str
) -> None:
    """No store is running: the TLS check comes first, so the error is about TLS."""
    tls, expected = _case("not-a-certificate", certs, tmp_path)
    assert _refuses(launcher, service, tls, tmp_path) == [
        f"engram: cannot start {service}: {expected}"
    ]


def test_an_expired_certificate_is_named(launcher: Launcher, certs: Path, tmp_path: Path) -> None:
    """A certificate past its date is refused with the date, not as a handshake failure
    every client sees later."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    key = serialization.load_pem_private_key((certs / "server-key.pem").read_bytes(), None)
    ca_key = serialization.load_pem_private_key((certs / "ca-key.pem").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    ended = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    expired = (
        x509.CertificateBuilder()
        .subject_name(ca.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(ended - datetime.timedelta(days=30))
        .not_valid_after(ended)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    path = tmp_path / "expired.pem"
    path.write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    shutil.copy(certs / "server-key.pem", tmp_path / "key.pem")
    tls = {"cert_file": str(path), "key_file": str(tmp_path / "key.pem")}
    assert _refuses(launcher, "store", tls, tmp_path) == [
        f"engram: cannot start store: server.tls.cert_file {path}:"
        " the certificate expired on 2024-01-02T00:00:00+00:00"
    ]
