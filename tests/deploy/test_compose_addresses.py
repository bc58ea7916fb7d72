"""Inside compose every service reaches the others by service name: each
`clients.*_address` a service's code reads must be set in that container's
environment and name the compose service that runs that service, on the port it
listens on. An unset one falls back to 127.0.0.1, the container's own loopback.

Which addresses a service reads is taken from the code itself (an AST scan of its
package for `<...>.clients.<name>_address`), so a new client in a service's code
fails this test until compose gives it the address.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.common.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
SERVICES_DIR = ROOT / "services"
SERVICES = ("store", "search", "pipeline", "maintenance")
# The service that opens each listener other than a service's own (server.ports.<name>).
LISTENER_SERVICE = {"store_internal": "store"}
# Where the compose services mount ./engram.yaml (their ENGRAM_CONFIG).
MOUNTED_CONFIG = "/config/engram.yaml"


def addresses_read(path: Path) -> set[str]:
    """The `clients.*_address` keys a module reads (`<anything>.clients.<key>`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.endswith("_address")
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "clients"
        ):
            found.add(node.attr)
    return found


def addresses_by_service() -> dict[str, set[str]]:
    return {
        service: set().union(*map(addresses_read, (SERVICES_DIR / service).rglob("*.py")))
        for service in SERVICES
    }


def compose_services() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services: dict[str, Any] = document["services"]
    return services


def container_config(spec: dict[str, Any]) -> Config:
    """The settings a compose service's process loads: the mounted engram.yaml and
    its environment (an ENGRAM_ name that names no key fails here)."""
    environment = {name: str(value) for name, value in spec.get("environment", {}).items()}
    assert environment.pop("ENGRAM_CONFIG") == MOUNTED_CONFIG
    assert f"./engram.yaml:{MOUNTED_CONFIG}:ro" in spec["volumes"]
    return load_config(ROOT / "engram.yaml", environ=environment)


def test_the_scan_sees_every_address_read_and_finds_the_known_ones() -> None:
    """Every read of a client address sits in one service's package (else the scan
    could not say whose it is), and the scan finds at least the known clients."""
    outside = {
        str(path.relative_to(ROOT)): keys
        for path in SERVICES_DIR.rglob("*.py")
        if path.relative_to(SERVICES_DIR).parts[0] not in SERVICES
        and (keys := addresses_read(path))
    }
    assert outside == {}, "attribute these reads to the services that run them in this test"
    found = addresses_by_service()
    assert found["search"] >= {"store_internal_address"}
    assert found["pipeline"] >= {"store_internal_address", "search_address"}
    assert found["maintenance"] >= {"store_internal_address", "pipeline_address"}


@pytest.mark.parametrize("service", SERVICES)
def test_each_address_a_service_reads_names_the_compose_service_on_its_port(
    service: str,
) -> None:
    services = compose_services()
    spec = services[service]
    assert spec["command"] == ["serve", service]
    config = container_config(spec)
    for key in sorted(addresses_by_service()[service]):
        address = getattr(config.clients, key)
        host, _, port = address.rpartition(":")
        listener = key.removesuffix("_address")  # clients.search_address: search's port
        target = LISTENER_SERVICE.get(listener, listener)
        assert host in services, f"{service}: clients.{key} is {address!r}: no such service"
        assert services[host]["command"] == ["serve", target], (
            f"{service}: clients.{key} is {address!r}, which does not run {target}"
        )
        listens_on = getattr(container_config(services[host]).server.ports, listener)
        assert port == str(listens_on), f"{service}: clients.{key} is {address!r}"


def test_the_pipeline_has_a_stable_lease_name() -> None:
    """Its host name changes when the container is recreated; its leases' holder must not."""
    config = container_config(compose_services()["pipeline"])
    assert config.workers.instance_name == "pipeline"


def test_the_stores_internal_listener_is_reachable_inside_compose_and_never_published() -> None:
    """The other containers reach it on the compose network (not on the store's
    loopback); the host does not (no published port)."""
    store = compose_services()["store"]
    config = container_config(store)
    assert config.server.internal_host == "0.0.0.0"
    internal = str(config.server.ports.store_internal)
    published = [str(mapping) for mapping in store.get("ports", [])]
    metrics = (
        config.server.metrics_ports.store
    )  # host loopback only (tests/deploy/test_monitoring.py)
    assert published == [
        f"{config.server.ports.store}:{config.server.ports.store}",
        f"127.0.0.1:{metrics}:{metrics}",
    ]
    assert not any(internal in mapping.split(":") for mapping in published)
