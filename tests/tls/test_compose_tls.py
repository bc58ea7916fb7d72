"""compose.tls.yaml turns TLS on for every service of compose.yaml: docker-compose
accepts the pair, the merge keeps each service's own settings, and the settings it
adds, read by Engram's own configuration loader against certificates made by
`engram certs dev`, give working server and client credentials."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.e2e_helpers import REPO_ROOT
from services.common.config import load_config
from services.common.tls import channel_credentials, server_credentials

SERVICES = ("store", "search", "pipeline", "maintenance")
# compose.yaml refuses to start without the service key (auth is on in compose)
SERVICE_KEY = "k" * 40
CERTS_MOUNT = "/certs"


@functools.cache
def merged() -> dict[str, Any]:
    compose = shutil.which("docker-compose")
    if compose is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose must be installed in CI (.ci/run installs it)")
        pytest.skip("docker-compose not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [compose, "-f", "compose.yaml", "-f", "compose.tls.yaml", "config"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "ENGRAM_SERVICE_KEY": SERVICE_KEY},
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    return document


def plain() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    return document


@pytest.mark.parametrize("service", SERVICES)
def test_the_override_keeps_each_service_and_adds_tls(service: str) -> None:
    spec = merged()["services"][service]
    before = plain()["services"][service]
    environment = spec["environment"]
    for key, value in before.get("environment", plain()["x-engram"]["environment"]).items():
        expected = SERVICE_KEY if value.startswith("${ENGRAM_SERVICE_KEY") else value
        assert environment[key] == expected  # nothing of compose.yaml's own is lost
    assert spec["command"] == before["command"]
    assert spec["healthcheck"]["test"] == before["healthcheck"]["test"]
    mounts = {volume.split(":")[1] for volume in spec["volumes"]}  # "source:target:mode"
    assert CERTS_MOUNT in mounts and "/config/engram.yaml" in mounts
    assert environment["ENGRAM_SERVER__TLS__CERT_FILE"].startswith(CERTS_MOUNT + "/")
    assert environment["ENGRAM_CLIENTS__TLS__CA_FILE"].startswith(CERTS_MOUNT + "/")


@pytest.mark.parametrize("service", SERVICES)
def test_the_settings_it_adds_make_working_credentials(service: str, certs: Path) -> None:
    """The container's environment, with /certs pointing at `engram certs dev` output:
    every key is a real setting, every file is one the command makes, and the service
    both serves TLS and presents a client certificate to the services it calls."""
    environment = {
        key: value.replace(CERTS_MOUNT, str(certs))
        for key, value in merged()["services"][service]["environment"].items()
        if key.startswith("ENGRAM_") and key != "ENGRAM_CONFIG"
    }
    config = load_config(environ=environment)
    assert server_credentials(config.server.tls) is not None
    assert channel_credentials(config.clients.tls) is not None
    assert config.clients.tls.cert_file and config.clients.tls.key_file
