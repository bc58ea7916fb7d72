import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_is_valid() -> None:
    compose = shutil.which("docker-compose")
    if compose is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose must be installed in CI (.ci/run installs it)")
        pytest.skip("docker-compose not installed")

    def config(service_key: str | None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "ENGRAM_SERVICE_KEY"}
        if service_key is not None:
            env["ENGRAM_SERVICE_KEY"] = service_key
        return subprocess.run(
            [compose, "-f", "compose.yaml", "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
        )

    result = config("k" * 64)
    assert result.returncode == 0, result.stderr
    # auth is on in compose: without the services' credential it does not start
    refused = config(None)
    assert refused.returncode != 0
    assert "ENGRAM_SERVICE_KEY" in refused.stderr


def test_compose_runs_with_auth_and_every_service_sees_the_keys() -> None:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text())
    from services.common.config import load_config

    environment = {
        k: str(v)
        for k, v in document["x-engram"]["environment"].items()
        if k.startswith("ENGRAM_AUTH__")
    }
    assert environment.pop("ENGRAM_AUTH__SERVICE_KEY").startswith("${ENGRAM_SERVICE_KEY:?")
    config = load_config(environ={**environment, "ENGRAM_AUTH__SERVICE_KEY": "k" * 64})
    assert config.auth.enabled
    for name, spec in document["services"].items():
        if spec.get("profiles"):  # optional helpers (ollama, monitoring): no Engram code
            continue
        keys = [v for v in spec["volumes"] if v.startswith("engram-keys:/keys")]
        assert keys == (["engram-keys:/keys"] if name == "store" else ["engram-keys:/keys:ro"])
        assert config.auth.keys_file.startswith("/keys/")


@pytest.mark.parametrize(
    ("service", "port", "mounts_data"),
    [
        ("store", 50051, True),
        ("search", 50052, True),
        ("pipeline", 50053, False),
        ("maintenance", 50054, False),
    ],
)
def test_compose_runs_each_service_with_a_health_check(
    service: str, port: int, mounts_data: bool
) -> None:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text())
    spec = document["services"][service]
    assert spec["command"] == ["serve", service]
    assert any(v.startswith("engram-data:/data") for v in spec["volumes"]) == mounts_data
    assert spec["healthcheck"]["test"][1:4] == ["engram", "health", f"127.0.0.1:{port}"]
    assert f"{port}:{port}" in spec["ports"]
    if service != "store":
        assert spec["depends_on"]["store"]["condition"] == "service_healthy"
        assert spec["environment"]["ENGRAM_CLIENTS__STORE_ADDRESS"] == "store:50051"


def test_maintenance_reaches_the_pipeline_by_service_name() -> None:
    document = yaml.safe_load((ROOT / "compose.yaml").read_text())
    environment = document["services"]["maintenance"]["environment"]
    assert environment["ENGRAM_CLIENTS__PIPELINE_ADDRESS"] == "pipeline:50053"


def test_example_configuration_is_valid() -> None:
    from services.common.config import load_config

    config = load_config(ROOT / "engram.yaml", environ={})
    assert config.server.ports.store == 50051


def test_health_command_fails_when_nothing_listens() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "health", "127.0.0.1:1", "--timeout", "0.5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
