from pathlib import Path

import pytest

from services.common.config import SETTINGS, ConfigError, load_config


def test_defaults_follow_the_seed() -> None:
    config = load_config(environ={})
    assert config["memory.pipelineV2.workerPollMs"] == 2000
    assert config["memory.pipelineV2.leaseTimeoutMs"] == 300000
    assert config["memory.pipelineV2.minFactConfidenceForWrite"] == 0.7
    assert config["memory.pipelineV2.maintenanceMode"] == "observe"
    assert config["search.alpha"] == 0.7
    assert config["retention.tombstone_days"] == 30
    assert config["providers.embedding.kind"] == "local"


def test_yaml_file_sets_values(tmp_path: Path) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text(
        "memory:\n  pipelineV2:\n    workerPollMs: 500\n    shadowMode: true\nsearch:\n  alpha: 0.5\n"
    )
    config = load_config(path, environ={})
    assert config["memory.pipelineV2.workerPollMs"] == 500
    assert config["memory.pipelineV2.shadowMode"] is True
    assert config["search.alpha"] == 0.5


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("memory:\n  pipelineV2:\n    workerPollMs: 50\n", "memory.pipelineV2.workerPollMs"),
        (
            "memory:\n  pipelineV2:\n    workerMaxRetries: 11\n",
            "memory.pipelineV2.workerMaxRetries",
        ),
        (
            "memory:\n  pipelineV2:\n    minFactConfidenceForWrite: 1.5\n",
            "memory.pipelineV2.minFactConfidenceForWrite",
        ),
        ("memory:\n  pipelineV2:\n    maintenanceMode: fix\n", "memory.pipelineV2.maintenanceMode"),
        ("memory:\n  pipelineV2:\n    enabled: 1\n", "memory.pipelineV2.enabled"),
        ("memory:\n  pipelineV2:\n    leaseTimeoutMs: 1.5\n", "memory.pipelineV2.leaseTimeoutMs"),
        ("search:\n  alpha: high\n", "search.alpha"),
        ("providers:\n  embedding:\n    kind: magic\n", "providers.embedding.kind"),
        ("memory:\n  pipelineV2:\n    workerPolMs: 500\n", "memory.pipelineV2.workerPolMs"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path, environ={})


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text("memory:\n  pipelineV2:\n    mutationsFrozen: false\n")
    config = load_config(
        path,
        environ={
            "ENGRAM_MEMORY__PIPELINEV2__MUTATIONSFROZEN": "true",
            "ENGRAM_STORAGE__PATH": "/x/y.db",
        },
    )
    assert config["memory.pipelineV2.mutationsFrozen"] is True
    assert config["storage.path"] == "/x/y.db"


def test_environment_values_are_validated_too() -> None:
    with pytest.raises(ConfigError, match=r"search\.alpha"):
        load_config(environ={"ENGRAM_SEARCH__ALPHA": "2"})


def test_unknown_environment_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"ENGRAM_SEARCH__ALHPA"):
        load_config(environ={"ENGRAM_SEARCH__ALHPA": "0.2"})


def test_every_seed_pipeline_key_is_declared() -> None:
    keys = {s.key.removeprefix("memory.pipelineV2.") for s in SETTINGS}
    seed_keys = {
        "enabled", "shadowMode", "allowUpdateDelete", "graphEnabled", "autonomousEnabled",
        "mutationsFrozen", "autonomousFrozen", "extractionModel", "extractionTimeout",
        "workerPollMs", "workerMaxRetries", "leaseTimeoutMs", "minFactConfidenceForWrite",
        "graphBoostWeight", "graphBoostTimeoutMs", "rerankerEnabled", "rerankerModel",
        "rerankerTopN", "rerankerTimeoutMs", "maintenanceIntervalMs", "maintenanceMode",
        "repairReembedCooldownMs", "repairReembedHourlyBudget", "repairRequeueCooldownMs",
        "repairRequeueHourlyBudget", "documentWorkerIntervalMs", "documentChunkSize",
        "documentChunkOverlap", "documentMaxContentBytes",
    }  # fmt: skip
    assert seed_keys <= keys
