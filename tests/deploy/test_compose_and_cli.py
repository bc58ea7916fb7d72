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
    result = subprocess.run(
        [compose, "-f", "compose.yaml", "config", "-q"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


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
