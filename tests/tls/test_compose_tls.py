"""compose.tls.yaml turns TLS on for every Engram service of compose.yaml, its
`postgres` profile's included: docker-compose accepts the pair, the merge keeps each
service's own settings, and the settings it adds, read by Engram's own configuration
loader against certificates made by `engram certs dev`, give working server and client
credentials, for every name a service calls another by."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from e2e.e2e_helpers import REPO_ROOT
from services.common.config import load_config
from services.common.tls import channel_credentials, server_credentials

# compose.yaml refuses to start without the service key (auth is on in compose); the
# `postgres` profile's passwords, set so that their interpolation shows
ENVIRONMENT = {
    "ENGRAM_SERVICE_KEY": "k" * 40,
    "ENGRAM_POSTGRES_PASSWORD": "store-password",
    "ENGRAM_POSTGRES_READER_PASSWORD": "reader-password",
}
CERTS_MOUNT = "/certs"
INTERPOLATED = re.compile(r"\$\{(\w+)")


def plain() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO_ROOT / "compose.yaml").read_text())
    return document


# Every Engram service of compose.yaml (the image it builds), whatever its profile: one
# the overlay misses fails every test below.
SERVICES = tuple(
    name for name, spec in plain()["services"].items() if spec.get("image") == "engram:latest"
)


@functools.cache
def merged() -> dict[str, Any]:
    compose = shutil.which("docker-compose")
    if compose is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose must be installed in CI (.ci/run installs it)")
        pytest.skip("docker-compose not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [
            compose,
            "-f",
            "compose.yaml",
            "-f",
            "compose.tls.yaml",
            "--profile",
            "postgres",
            "config",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **ENVIRONMENT},
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    return document


def test_the_services_include_the_postgres_profiles() -> None:
    assert {"store", "search", "pg-store", "pg-search-2", "pg-maintenance"} <= set(SERVICES)


@pytest.mark.parametrize("service", SERVICES)
def test_the_override_keeps_each_service_and_adds_tls(service: str) -> None:
    spec = merged()["services"][service]
    before = plain()["services"][service]
    environment = spec["environment"]
    for key, value in before.get("environment", plain()["x-engram"]["environment"]).items():
        interpolated = INTERPOLATED.match(value)
        expected = ENVIRONMENT[interpolated[1]] if interpolated else value
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


def test_every_name_a_service_calls_is_in_the_server_certificate(certs: Path) -> None:
    """Each service verifies the one it calls by the host name of its address."""
    server = x509.load_pem_x509_certificate((certs / "server.pem").read_bytes())
    names = set(
        server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        .get_values_for_type(x509.DNSName)
    )  # fmt: skip
    called = {
        value.rsplit(":", 1)[0]
        for service in SERVICES
        for key, value in merged()["services"][service]["environment"].items()
        if key.startswith("ENGRAM_CLIENTS__") and key.endswith("_ADDRESS")
    }
    assert {"store", "pg-store", "pg-search-1", "pg-search-2"} <= called
    assert called <= names
