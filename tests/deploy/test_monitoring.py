"""compose's `monitoring` profile: Prometheus scrapes every Engram service on the
metrics port its container serves (server.metrics_ports.*), each service publishes
that port on the host's loopback only, and the Grafana dashboard charts the
metrics services/common/metrics.py defines (and no others)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from test_compose_addresses import SERVICES, compose_services, container_config

import services.common.metrics  # noqa: F401  (registers Engram's metrics)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "engram.json"


def compose_config(*args: str) -> dict[str, Any]:
    compose = shutil.which("docker-compose")
    if compose is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose must be installed in CI (.ci/run installs it)")
        pytest.skip("docker-compose not installed")
    result = subprocess.run(
        [compose, "-f", "compose.yaml", *args, "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        # auth is on in compose: the services' credential must be set
        env={**os.environ, "ENGRAM_SERVICE_KEY": "k" * 64},
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    return document


def _binds(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of a service's bind mounts, in either form
    docker-compose prints (v1 "src:dst:mode" strings, v2 mappings)."""
    found = []
    for volume in spec.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                found.append((volume["source"], volume["target"]))
        elif volume.startswith("/"):
            source, target = volume.split(":")[:2]
            found.append((source, target))
    return found


def test_the_monitoring_profile_adds_prometheus_and_grafana_with_their_files() -> None:
    services = compose_config("--profile", "monitoring")["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], f"{name} must stay optional"
    prometheus, grafana = _binds(services["prometheus"]), _binds(services["grafana"])
    assert (str(ROOT / "deploy" / "prometheus.yml"), "/etc/prometheus/prometheus.yml") in prometheus
    assert (str(DASHBOARD.parent), "/var/lib/grafana/dashboards") in grafana
    for source, _ in (*prometheus, *grafana):
        assert Path(source).exists(), source


def test_prometheus_scrapes_every_service_on_its_containers_metrics_port() -> None:
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text(encoding="utf-8"))
    targets = {
        target
        for job in scrape["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    services = compose_services()
    expected = set()
    for name in SERVICES:
        port = getattr(container_config(services[name]).server.metrics_ports, name)
        assert port, f"{name}: metrics are off in its container"
        assert f"127.0.0.1:{port}:{port}" in services[name]["ports"], name
        expected.add(f"{name}:{port}")
    assert targets == expected


def _defined() -> set[str]:
    return {
        family.name.removesuffix("_total")
        for collector in list(REGISTRY._collector_to_names)
        for family in collector.collect()
        if family.name.startswith("engram_")
    }


def test_the_dashboard_charts_every_engram_metric_and_only_those() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    used = {
        re.sub(r"_(bucket|sum|count|total)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"engram_[a-z_]+", target["expr"])
    }
    assert used == _defined()
