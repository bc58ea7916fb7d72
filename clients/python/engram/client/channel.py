"""How the client's channels are made: the retry policy, keep-alive, message size,
TLS. `service_config` is the one home of Engram's gRPC retry policy (services may
import it from here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

DEFAULT_PORTS = {"store": 50051, "search": 50052, "pipeline": 50053, "maintenance": 50054}
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A server that has not answered a ping in this long is gone; a long-lived agent then
# reconnects on its next call instead of waiting on a dead TCP connection. Five
# minutes is gRPC servers' default minimum ping interval, so no server calls it abuse.
KEEPALIVE_TIME_MS = 300_000
KEEPALIVE_TIMEOUT_MS = 20_000
MAX_RECONNECT_BACKOFF_MS = 5_000


@dataclass(frozen=True)
class RetryPolicy:
    """gRPC's own retry of UNAVAILABLE (within the call's deadline), exponential backoff."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    backoff_multiplier: float = 2.0


DEFAULT_RETRY = RetryPolicy()


def service_config(retry: RetryPolicy) -> str:
    """The channel's `grpc.service_config`: every method retries UNAVAILABLE."""
    return json.dumps(
        {
            "methodConfig": [
                {
                    "name": [{}],
                    "retryPolicy": {
                        "maxAttempts": retry.max_attempts,
                        "initialBackoff": f"{retry.initial_backoff_s}s",
                        "maxBackoff": f"{retry.max_backoff_s}s",
                        "backoffMultiplier": retry.backoff_multiplier,
                        "retryableStatusCodes": ["UNAVAILABLE"],
                    },
                }
            ]
        }
    )


def channel_options(retry: RetryPolicy | None) -> list[tuple[str, Any]]:
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ]
    if retry is not None and retry.max_attempts > 1:
        options.append(("grpc.service_config", service_config(retry)))
    else:
        options.append(("grpc.enable_retries", 0))
    return options


@dataclass(frozen=True)
class Tls:
    """Server verification (`ca_file`; None means the system roots) and an optional
    client certificate for mutual TLS."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            return Path(path).read_bytes() if path else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )


TlsArg = Tls | grpc.ChannelCredentials | bool | None


def credentials_of(tls: TlsArg) -> grpc.ChannelCredentials | None:
    """None: plaintext. True: TLS with the system roots."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    if isinstance(tls, Tls):
        return tls.credentials()
    return tls


def store_target(address: str) -> tuple[str, str]:
    """(host, host:port) of the store's `address` (`host:port`, or a bare host for
    the default port 50051; an IPv6 host in brackets)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or (":" in host and not host.startswith("[")):
        host, port = address, str(DEFAULT_PORTS["store"])
    return host, f"{host}:{port}"


def metadata_for(api_key: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()
