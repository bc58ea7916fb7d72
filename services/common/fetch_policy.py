"""Where a document URL may be fetched from (issue 34: server-side request forgery).

Any writer can name a URL for the pipeline to fetch, so by default documents
come from public addresses only: never loopback (the suite's own ports, the
LLM's), link-local (cloud metadata at 169.254.169.254), private, multicast,
unspecified or otherwise reserved ones. `documents.fetch_allow` lets an
operator open CIDR networks or host names (intranet documents).

The one rule for both doors: the store's CreateDocument refuses a URL whose
host is a refused IP address at once (INVALID_ARGUMENT), and the pipeline's
fetch client checks every address it connects to
(services/pipeline/fetch_guard.py), which is what stops host names.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from services.common.config import Config

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_KEY = "documents.fetch_allow"


class AddressRefused(Exception):
    """The URL's host is, or resolves to, an address documents may not be fetched from."""


def refused_kind(address: IpAddress) -> str | None:
    """Why documents may not be fetched from `address` ("a loopback address"), or
    None for a public one. An IPv4 address mapped into IPv6 counts as itself."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for kind, applies in (
        ("an unspecified address", address.is_unspecified),
        ("a loopback address", address.is_loopback),
        ("a link-local address (where cloud metadata lives)", address.is_link_local),
        ("a multicast address", address.is_multicast),
        ("a private address", address.is_private),
        ("a reserved address (not globally routable)", not address.is_global),
    ):
        if applies:
            return kind
    return None


@dataclass(frozen=True)
class FetchPolicy:
    """The allow-list (`documents.fetch_allow`): networks, exact host names and
    `*.domain` wildcards (any name under the domain)."""

    networks: tuple[IpNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()  # ".example.com" for "*.example.com"

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> FetchPolicy:
        """Entries as the configuration validated them (services/common/config.py)."""
        networks: list[IpNetwork] = []
        hosts: set[str] = set()
        domains: list[str] = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry.lower().rstrip(".")
            if name.startswith("*."):
                domains.append(name[1:])
            else:
                hosts.add(name)
        return cls(tuple(networks), frozenset(hosts), tuple(domains))

    @classmethod
    def from_config(cls, config: Config) -> FetchPolicy:
        return cls.from_entries(config.documents.fetch_allow)

    def host_allowed(self, host: str) -> bool:
        """The name itself is allow-listed: every address it resolves to may be used."""
        name = host.lower().rstrip(".")
        return name in self.hosts or any(name.endswith(domain) for domain in self.domains)

    def refusal(self, host: str, address: IpAddress) -> str | None:
        """Why connecting to `address` for `host` is refused, None when it may be."""
        if self.host_allowed(host) or any(address in net for net in self.networks):
            return None
        kind = refused_kind(address)
        if kind is None:
            return None
        what = f"{address} is" if host == str(address) else f"{host} resolves to {address},"
        return (
            f"{what} {kind}: documents are fetched from public addresses only "
            f"(an operator can allow it in {ALLOW_KEY})"
        )

    def literal_refusal(self, host: str) -> str | None:
        """For a URL whose host is an IP address: the refusal known before any
        fetch (CreateDocument answers INVALID_ARGUMENT with it). None for a name."""
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return None
        return self.refusal(str(address), address)
