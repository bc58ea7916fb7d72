from pathlib import Path

import pytest

from services.common.config import ConfigError, PipelineV2Settings, load_config


def test_defaults_follow_the_seed() -> None:
    config = load_config(environ={})
    assert config.memory.pipelineV2.workerPollMs == 2000
    assert config.memory.pipelineV2.leaseTimeoutMs == 300000
    assert config.memory.pipelineV2.minFactConfidenceForWrite == 0.7
    assert config.memory.pipelineV2.maintenanceMode == "observe"
    assert config.search.alpha == 0.7
    assert config.retention.tombstone_days == 30
    assert config.providers.embedding.kind == "local"


def test_yaml_file_sets_values(tmp_path: Path) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text(
        "memory:\n  pipelineV2:\n    workerPollMs: 500\n    shadowMode: true\nsearch:\n  alpha: 0.5\n"
    )
    config = load_config(path, environ={})
    assert config.memory.pipelineV2.workerPollMs == 500
    assert config.memory.pipelineV2.shadowMode is True
    assert config.search.alpha == 0.5


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
        ("search:\n  context:\n    tokenizer: gpt9\n", "search.context.tokenizer"),
        ("search:\n  context:\n    max_budget: 500\n", "search.context.simple_budget"),
        ("providers:\n  embedding:\n    kind: magic\n", "providers.embedding.kind"),
        ("memory:\n  pipelineV2:\n    workerPolMs: 500\n", "memory.pipelineV2.workerPolMs"),
        ("storage:\n  path: 5\n", "storage.path"),
        ("server:\n  ports: 50051\n", "server.ports"),
        ("telemetry:\n  enabled: true\n", "telemetry"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path, environ={})


def test_every_bad_key_is_named_at_once() -> None:
    overrides = {"search.alpha": 2, "storage.busy_timeout_ms": -1}
    with pytest.raises(ConfigError, match=r"search\.alpha.*storage\.busy_timeout_ms"):
        load_config(environ={}, overrides=overrides)


def test_an_unreadable_or_malformed_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", environ={})
    (tmp_path / "bad.yaml").write_text("memory: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml", environ={})
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml", environ={})


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
    assert config.memory.pipelineV2.mutationsFrozen is True
    assert config.storage.path == "/x/y.db"


def test_overrides_beat_the_environment() -> None:
    config = load_config(environ={"ENGRAM_SEARCH__ALPHA": "0.2"}, overrides={"search.alpha": 0.4})
    assert config.search.alpha == 0.4
    assert config.with_overrides({"search.rrf_k": 10}).search.alpha == 0.4


def test_environment_values_are_validated_too() -> None:
    with pytest.raises(ConfigError, match=r"search\.alpha"):
        load_config(environ={"ENGRAM_SEARCH__ALPHA": "2"})


def test_a_text_key_takes_the_environment_value_as_written() -> None:
    config = load_config(environ={"ENGRAM_PROVIDERS__LLM__API_KEY": "123456"})
    assert config.providers.llm.api_key == "123456"


def test_unknown_environment_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"ENGRAM_SEARCH__ALHPA"):
        load_config(environ={"ENGRAM_SEARCH__ALHPA": "0.2"})


def test_other_engram_variables_are_not_keys() -> None:
    load_config(environ={"ENGRAM_CONFIG": "/etc/engram.yaml"})


def test_chunk_overlap_must_stay_below_the_chunk_size() -> None:
    overrides = {
        "memory.pipelineV2.documentChunkSize": 500,
        "memory.pipelineV2.documentChunkOverlap": 500,
    }
    with pytest.raises(ConfigError, match=r"memory\.pipelineV2\.documentChunkOverlap"):
        load_config(environ={}, overrides=overrides)


def test_the_local_embedding_provider_takes_only_its_own_model() -> None:
    with pytest.raises(ConfigError, match=r"providers\.embedding\.model"):
        load_config(environ={}, overrides={"providers.embedding.model": "nomic-embed-text"})
    other = {"providers.embedding.kind": "ollama", "providers.embedding.model": "nomic-embed-text"}
    assert load_config(environ={}, overrides=other).providers.embedding.model == "nomic-embed-text"


def test_seed_002_reranking_switches_the_reranker(tmp_path: Path) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text("search:\n  reranking: true\n")
    assert load_config(path, environ={}).memory.pipelineV2.rerankerEnabled is True
    both = "search:\n  reranking: true\nmemory:\n  pipelineV2:\n    rerankerEnabled: true\n"
    path.write_text(both)
    assert load_config(path, environ={}).memory.pipelineV2.rerankerEnabled is True
    assert load_config(environ={}).memory.pipelineV2.rerankerEnabled is False


def test_seed_002_reranking_may_not_contradict_reranker_enabled(tmp_path: Path) -> None:
    path = tmp_path / "engram.yaml"
    path.write_text(
        "search:\n  reranking: true\nmemory:\n  pipelineV2:\n    rerankerEnabled: false\n"
    )
    with pytest.raises(ConfigError, match=r"search\.reranking"):
        load_config(path, environ={})
    with pytest.raises(ConfigError, match=r"search\.reranking"):
        load_config(environ={}, overrides={"search.reranking": "yes"})


def test_every_seed_pipeline_key_is_declared() -> None:
    keys = set(PipelineV2Settings.model_fields)
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


def test_a_short_service_key_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"auth\.service_key: must be at least 32 characters"):
        load_config(environ={}, overrides={"auth.service_key": "hunter2"})
    assert load_config(environ={}, overrides={"auth.service_key": "k" * 32}).auth.service_key


def test_the_document_fetch_allow_list_takes_networks_addresses_and_host_names() -> None:
    """Issue 34: empty by default (public addresses only); entries are normalised."""
    assert load_config(environ={}).documents.fetch_allow == []
    assert load_config(environ={}).documents.max_redirects == 5
    config = load_config(
        environ={
            "ENGRAM_DOCUMENTS__FETCH_ALLOW": '["127.0.0.1", "10.0.0.0/8", "::1", "Wiki.Corp.Example",'
            ' "*.corp.example"]'
        }
    )
    assert config.documents.fetch_allow == [
        "127.0.0.1/32",
        "10.0.0.0/8",
        "::1/128",
        "wiki.corp.example",
        "*.corp.example",
    ]


@pytest.mark.parametrize("entry", ["not a host", "http://wiki.corp.example/", "10.0.0.0/33", ""])
def test_a_bad_fetch_allow_entry_is_named(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"documents\.fetch_allow: entry 0"):
        load_config(environ={}, overrides={"documents.fetch_allow": [entry]})


def test_the_redirect_limit_is_bounded() -> None:
    with pytest.raises(ConfigError, match=r"documents\.max_redirects"):
        load_config(environ={}, overrides={"documents.max_redirects": 21})
