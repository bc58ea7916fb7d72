"""TLS credentials from the settings, for every listener and every channel.

A server serves TLS when `server.tls.cert_file` and `key_file` are set, and also
requires a client certificate signed by `client_ca_file` when that is set (mTLS).
A client (a service reaching another, or the CLI) uses TLS when
`clients.tls.ca_file` is set, and presents `cert_file`/`key_file` when set.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from services.common.config import ClientsTlsSettings, ServerTlsSettings
from services.common.startup import StartupError


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise StartupError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def _certificates(data: bytes, key: str, path: str) -> list[x509.Certificate]:
    """The PEM certificates in a file, checked here because gRPC reports a bad one
    only as "failed to bind" (server) or a failed handshake (client)."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise StartupError(f"{key} {path}: not a PEM certificate") from None
    now = datetime.datetime.now(datetime.UTC)
    for certificate in certificates:
        if certificate.not_valid_after_utc < now:
            expired = certificate.not_valid_after_utc.isoformat(timespec="seconds")
            raise StartupError(f"{key} {path}: the certificate expired on {expired}")
    return certificates


def _pair(cert_key: str, cert_path: str, key_key: str, key_path: str) -> tuple[bytes, bytes]:
    """(private key, certificate chain) as PEM, read and checked to belong together."""
    chain = _read(cert_path, cert_key)
    private = _read(key_path, key_key)
    leaf = _certificates(chain, cert_key, cert_path)[0]
    try:
        key = serialization.load_pem_private_key(private, password=None)
    except (ValueError, TypeError):
        raise StartupError(f"{key_key} {key_path}: not an unencrypted PEM private key") from None
    if key.public_key() != leaf.public_key():
        raise StartupError(f"{key_key} {key_path}: not the key of {cert_key} {cert_path}")
    return private, chain


def _roots(key: str, path: str) -> bytes:
    data = _read(path, key)
    _certificates(data, key, path)
    return data


def server_credentials(tls: ServerTlsSettings) -> grpc.ServerCredentials | None:
    """None: plaintext. A half-set pair (cert without key or the reverse) is an error."""
    if not tls.cert_file and not tls.key_file:
        if tls.client_ca_file:
            raise StartupError("server.tls.client_ca_file needs server.tls.cert_file and key_file")
        return None
    if not (tls.cert_file and tls.key_file):
        raise StartupError("server.tls: set both cert_file and key_file, or neither")
    pair = _pair("server.tls.cert_file", tls.cert_file, "server.tls.key_file", tls.key_file)
    if tls.client_ca_file:
        return grpc.ssl_server_credentials(
            [pair],
            root_certificates=_roots("server.tls.client_ca_file", tls.client_ca_file),
            require_client_auth=True,
        )
    return grpc.ssl_server_credentials([pair])


def channel_credentials(tls: ClientsTlsSettings) -> grpc.ChannelCredentials | None:
    """None: plaintext. With ca_file, the server must present a certificate it signed."""
    if not tls.ca_file:
        if tls.cert_file or tls.key_file:
            raise StartupError("clients.tls.cert_file/key_file need clients.tls.ca_file")
        return None
    if bool(tls.cert_file) != bool(tls.key_file):
        raise StartupError("clients.tls: set both cert_file and key_file, or neither")
    roots = _roots("clients.tls.ca_file", tls.ca_file)
    if not tls.cert_file:
        return grpc.ssl_channel_credentials(root_certificates=roots)
    private, chain = _pair(
        "clients.tls.cert_file", tls.cert_file, "clients.tls.key_file", tls.key_file
    )
    return grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=private, certificate_chain=chain
    )
