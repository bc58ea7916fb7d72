"""The document fetch client's connect-time check (issue 34: server-side
request forgery; the rule is services/common/fetch_policy.py's).

Every TCP connect of the fetch client goes through `GuardedBackend`, which
resolves the host itself, refuses when any address it resolves to is refused,
and connects to an address it checked. A name that resolves to a public
address for a check and to 127.0.0.1 for the connect (DNS rebinding) cannot
pass, and every redirect hop is a new connect, checked the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from services.common.fetch_policy import AddressRefused, FetchPolicy, IpAddress


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the check at connect time."""

    def __init__(self, policy: FetchPolicy, inner: httpcore.AsyncNetworkBackend | None = None):
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, port, timeout)
        for address in addresses:
            reason = self._policy.refusal(host, address)
            if reason is not None:
                raise AddressRefused(reason)
        error: Exception | None = None
        for address in addresses:  # the checked addresses: the name is not looked up again
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None  # _resolve returns at least one address
        raise error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("documents are not fetched over Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(host: str, port: int, timeout: float | None) -> list[IpAddress]:
    """Every address `host` resolves to, in the resolver's order. A resolver
    failure is httpcore's ConnectError with the socket.gaierror as its cause (how
    documents.py tells a name that does not exist from a transient failure)."""
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
            timeout,
        )
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
    except OSError as exc:
        raise httpcore.ConnectError(f"resolving {host} failed: {exc}") from exc
    addresses: list[IpAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]))  # an IPv6 scope (%eth0) kept
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise httpcore.ConnectError(f"{host} resolves to no address")
    return addresses


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose every connect is GuardedBackend's.

    httpx has no parameter for the network backend, so the pool it builds is
    replaced by one with the same role and this backend. No proxy: a proxy
    would make the connect go to the proxy, not to the checked address."""

    def __init__(self, policy: FetchPolicy, *, limits: httpx.Limits | None = None) -> None:
        super().__init__()
        limits = limits or httpx.Limits(max_connections=10, max_keepalive_connections=5)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy),
        )
