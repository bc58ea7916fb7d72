"""TLS credentials from the settings, for every listener and every channel.

A server serves TLS when `server.tls.cert_file` and `key_file` are set, and also
requires a client certificate signed by `client_ca_file` when that is set (mTLS).
A client (a service reaching another, or the CLI) uses TLS when
`clients.tls.ca_file` is set, and presents `cert_file`/`key_file` when set.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from services.common.config import ClientsTlsSettings, ServerTlsSettings
from services.common.server import StartupError


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise StartupError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def server_credentials(tls: ServerTlsSettings) -> grpc.ServerCredentials | None:
    """None: plaintext. A half-set pair (cert without key or the reverse) is an error."""
    if not tls.cert_file and not tls.key_file:
        if tls.client_ca_file:
            raise StartupError("server.tls.client_ca_file needs server.tls.cert_file and key_file")
        return None
    if not (tls.cert_file and tls.key_file):
        raise StartupError("server.tls: set both cert_file and key_file, or neither")
    pair = (
        _read(tls.key_file, "server.tls.key_file"),
        _read(tls.cert_file, "server.tls.cert_file"),
    )
    if tls.client_ca_file:
        return grpc.ssl_server_credentials(
            [pair],
            root_certificates=_read(tls.client_ca_file, "server.tls.client_ca_file"),
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
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file, "clients.tls.ca_file"),
        private_key=_read(tls.key_file, "clients.tls.key_file") if tls.key_file else None,
        certificate_chain=_read(tls.cert_file, "clients.tls.cert_file") if tls.cert_file else None,
    )
