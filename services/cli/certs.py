"""`engram certs dev --out DIR`: a local certificate authority and the certificates a
development or compose cluster needs to run with TLS and mTLS.

Not for production: the CA's key lies beside the certificates it signs. What it makes:

- `ca.pem` (`ca-key.pem`): the CA every server and client trusts (`server.tls.client_ca_file`,
  `clients.tls.ca_file`, grpcurl's `-cacert`);
- `server.pem` (`server-key.pem`): one certificate for every service, valid for localhost,
  127.0.0.1 and the compose service names (a single file serves `engram up`, which gives all
  four services one configuration); it is also a client certificate, so the services present
  it to each other under mTLS (`clients.tls.cert_file`);
- `client.pem` (`client-key.pem`): a client-only certificate for the CLI, grpcurl and users.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The names a client may use to reach a service: on this machine, and inside compose
# (its default services and its `postgres` profile's).
SERVICE_HOSTS = (
    "localhost",
    "127.0.0.1",
    "::1",
    "store",
    "search",
    "pipeline",
    "maintenance",
    "pg-store",
    "pg-search-1",
    "pg-search-2",
    "pg-pipeline-1",
    "pg-pipeline-2",
    "pg-maintenance",
)
VALID_DAYS = 825  # the longest validity macOS and browsers accept for a server certificate
FILES = ("ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem")


class CertsError(Exception):
    """The certificates cannot be written (existing files, unwritable directory)."""


@dataclass(frozen=True)
class _Issued:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Engram development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _issue(
    common_name: str,
    issuer: _Issued | None,
    *,
    hosts: Sequence[str] = (),
    usages: Sequence[x509.ObjectIdentifier] = (),
) -> _Issued:
    """A certificate for a fresh P-256 key, signed by `issuer` (self-signed CA when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(common_name)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # small clock skew
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True
        ).add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
                critical=False,
            )
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(host) for host in hosts]), critical=False
            )
    signer = key if issuer is None else issuer.key
    return _Issued(key, builder.sign(signer, hashes.SHA256()))


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_certificate(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def dev_certificates(
    out: Path, *, extra_hosts: Sequence[str] = (), force: bool = False
) -> list[Path]:
    """Write the CA, the service certificate and the client certificate into `out`
    (created if missing); keys are readable by their owner only. Existing files are
    kept unless `force`: a new CA would silently untrust every certificate issued before."""
    paths = [out / name for name in FILES]
    existing = [path.name for path in paths if path.exists()]
    if existing and not force:
        raise CertsError(f"{out} already has {', '.join(existing)} (--force replaces them)")
    hosts = list(dict.fromkeys([*SERVICE_HOSTS, *extra_hosts]))
    ca = _issue("Engram development CA", None)
    server = _issue(
        "engram-service",
        ca,
        hosts=hosts,
        usages=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    client = _issue("engram-client", ca, usages=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    contents = {
        "ca": ca,
        "server": server,
        "client": client,
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stem, issued in contents.items():
            _write(out / f"{stem}.pem", _pem_certificate(issued.certificate), 0o644)
            _write(out / f"{stem}-key.pem", _pem_key(issued.key), 0o600)
    except OSError as exc:
        raise CertsError(f"cannot write {out}: {exc.strerror or exc}") from exc
    return paths


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data`, created with `mode` (a key is never world-readable,
    not even for a moment)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
