"""Configuration: one YAML file shared by every service, validated at start-up.

Keys and defaults follow seed 000's configuration reference (`memory.pipelineV2.*`)
plus Engram's own sections. Every key is declared once in SETTINGS with its type
and range; an unknown key or a bad value stops the process with a message naming
the key. Environment variables override the file: ENGRAM_ + the key path in upper
case with `__` between parts (e.g. ENGRAM_MEMORY__PIPELINEV2__MUTATIONSFROZEN=true).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENV_PREFIX = "ENGRAM_"


class ConfigError(Exception):
    """A configuration problem; the message names the key."""


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


def _p(name: str, default: Any, lo: float | None = None, hi: float | None = None) -> Setting:
    return Setting(f"memory.pipelineV2.{name}", default, lo, hi)


SETTINGS: tuple[Setting, ...] = (
    # seed 000 "Configuration Reference"
    _p("enabled", False),
    _p("shadowMode", False),
    _p("allowUpdateDelete", False),
    _p("graphEnabled", False),
    _p("autonomousEnabled", False),
    _p("mutationsFrozen", False),
    _p("autonomousFrozen", False),
    _p("extractionModel", "qwen3:4b"),
    _p("extractionTimeout", 45000, 5000, 300000),
    _p("workerPollMs", 2000, 100, 60000),
    _p("workerMaxRetries", 3, 1, 10),
    _p("leaseTimeoutMs", 300000, 10000, 600000),
    _p("minFactConfidenceForWrite", 0.7, 0.0, 1.0),
    _p("graphBoostWeight", 0.15, 0.0, 1.0),
    _p("graphBoostTimeoutMs", 500, 50, 5000),
    _p("rerankerEnabled", False),
    _p("rerankerModel", ""),
    _p("rerankerTopN", 20, 1, 100),
    _p("rerankerTimeoutMs", 2000, 100, 30000),
    _p("maintenanceIntervalMs", 1800000, 60000, 86400000),
    Setting("memory.pipelineV2.maintenanceMode", "observe", choices=("observe", "execute")),
    _p("repairReembedCooldownMs", 300000, 10000, 3600000),
    _p("repairReembedHourlyBudget", 10, 1, 1000),
    _p("repairRequeueCooldownMs", 60000, 5000, 3600000),
    _p("repairRequeueHourlyBudget", 50, 1, 1000),
    # the other maintenance actions' rate limits (services/maintenance/limits.py)
    _p("repairLeasesCooldownMs", 60000, 0, 3600000),
    _p("repairLeasesHourlyBudget", 50, 1, 1000),
    _p("repairFtsCooldownMs", 300000, 0, 3600000),
    _p("repairFtsHourlyBudget", 10, 1, 1000),
    _p("repairRetentionCooldownMs", 300000, 0, 3600000),
    _p("repairRetentionHourlyBudget", 10, 1, 1000),
    _p("documentWorkerIntervalMs", 10000, 1000, 300000),
    _p("documentChunkSize", 2000, 200, 50000),
    _p("documentChunkOverlap", 200, 0, 10000),
    _p("documentMaxContentBytes", 10485760, 1024, 104857600),
    # beyond the seed: UPDATE/DELETE really applied under allowUpdateDelete
    _p("destructiveMinConfidence", 0.8, 0.0, 1.0),
    _p("destructiveMaxPerJob", 3, 0, 50),
    # seed 002 "Importance Decay"
    Setting("memory.decay_rate", 0.95, 0.0, 1.0),
    # seed 002 "Alpha Blending"
    Setting("search.alpha", 0.7, 0.0, 1.0),
    Setting("search.min_score", 0.1, 0.0, 1.0),
    # recall scoring (services/search/scoring.py explains each step)
    Setting("search.fusion", "alpha", choices=("alpha", "rrf")),
    Setting("search.rrf_k", 60, 1, 1000),
    Setting("search.channel_depth", 100, 10, 1000),
    Setting("search.vector_candidates", 400, 0, 10000),
    Setting("search.time_boost", 0.2, 0.0, 1.0),
    Setting("search.episode_weight", 0.2, 0.0, 1.0),
    Setting("search.neighbor_weight", 0.1, 0.0, 1.0),
    Setting("search.diversity_penalty", 0.03, 0.0, 1.0),
    Setting("search.query_embedding_timeout_ms", 2000, 50, 60000),
    Setting("search.access_flush_ms", 1000, 10, 60000),
    # seed 002 "Importance Decay" as a ranking factor (services/search/decay.py)
    Setting("search.decay_ranking", False),
    # storage (store only opens it read-write)
    Setting("storage.path", "./data/engram.db"),
    Setting("storage.synchronous", "FULL", choices=("FULL", "NORMAL")),
    Setting("storage.busy_timeout_ms", 5000, 0, 600000),
    Setting("storage.max_group_commit", 512, 1, 10000),
    # seed 002 "Retention Worker" windows
    Setting("retention.tombstone_days", 30, 0, 3650),
    Setting("retention.history_days", 180, 0, 3650),
    Setting("retention.completed_job_days", 14, 0, 3650),
    Setting("retention.dead_job_days", 30, 0, 3650),
    Setting("retention.batch_limit", 500, 1, 100000),
    Setting("retention.interval_ms", 21600000, 60000, 604800000),
    # providers
    Setting("providers.llm.kind", "ollama", choices=("ollama", "openai")),
    Setting("providers.llm.base_url", "http://localhost:11434"),
    Setting("providers.llm.model", "qwen3:4b"),
    Setting("providers.llm.timeout_ms", 45000, 1000, 600000),
    Setting("providers.llm.api_key", ""),
    Setting("providers.llm.concurrency", 2, 1, 64),
    Setting("providers.embedding.kind", "local", choices=("local", "ollama", "openai", "none")),
    Setting("providers.embedding.base_url", "http://localhost:11434"),
    Setting("providers.embedding.model", "all-MiniLM-L6-v2"),
    Setting("providers.embedding.timeout_ms", 30000, 100, 600000),
    Setting("providers.embedding.batch_size", 64, 1, 500),
    # torch intra-op threads of the local model, in each process that loads it
    Setting("providers.embedding.threads", 1, 1, 64),
    Setting("providers.reranker.base_url", "http://localhost:8080"),
    # processes
    Setting("server.host", "127.0.0.1"),
    Setting("server.ports.store", 50051, 0, 65535),
    Setting("server.ports.search", 50052, 0, 65535),
    Setting("server.ports.pipeline", 50053, 0, 65535),
    Setting("server.ports.maintenance", 50054, 0, 65535),
    Setting("server.shutdown_grace_ms", 10000, 0, 600000),
    # where each service reaches the others (compose uses service names)
    Setting("clients.store_address", "127.0.0.1:50051"),
    Setting("clients.search_address", "127.0.0.1:50052"),
    Setting("clients.pipeline_address", "127.0.0.1:50053"),
    # the embedding worker (pipeline)
    Setting("workers.embed.poll_ms", 250, 10, 60000),
    # the extraction worker pool (pipeline); polling is memory.pipelineV2.workerPollMs
    Setting("workers.extract.concurrency", 4, 1, 64),
    Setting("logging.level", "INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
)

_BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class Config:
    """Validated settings, looked up by dotted key."""

    values: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        merged = dict(self.values)
        for key, raw in overrides.items():
            merged[key] = _coerce(_setting(key), raw)
        return Config(merged)


def _setting(key: str) -> Setting:
    if key not in _BY_KEY:
        raise ConfigError(f"{key}: unknown configuration key")
    return _BY_KEY[key]


def _coerce(setting: Setting, raw: Any) -> Any:
    """Check `raw` against the setting's type and range; return the typed value."""
    key, default = setting.key, setting.default
    if isinstance(default, bool):
        if not isinstance(raw, bool):
            raise ConfigError(f"{key}: expected true or false, got {raw!r}")
        return raw
    if isinstance(default, int | float):
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ConfigError(f"{key}: expected a number, got {raw!r}")
        if isinstance(default, int) and not float(raw).is_integer():
            raise ConfigError(f"{key}: expected a whole number, got {raw!r}")
        value = int(raw) if isinstance(default, int) else float(raw)
        lo, hi = setting.minimum, setting.maximum
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{key}: {value} is outside the allowed range {lo}..{hi}")
        return value
    if not isinstance(raw, str):
        raise ConfigError(f"{key}: expected a string, got {raw!r}")
    if setting.choices is not None and raw not in setting.choices:
        raise ConfigError(f"{key}: {raw!r} is not one of {', '.join(setting.choices)}")
    return raw


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    by_env_name = {ENV_PREFIX + s.key.upper().replace(".", "__"): s.key for s in SETTINGS}
    overrides: dict[str, Any] = {}
    for name, text in environ.items():
        if name in by_env_name:
            overrides[by_env_name[name]] = yaml.safe_load(text) if text != "" else ""
        elif name.startswith(ENV_PREFIX) and "__" in name:
            raise ConfigError(f"{name}: environment variable names no configuration key")
    return overrides


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the YAML file (if any), then environment, then `overrides`."""
    values = {s.key: s.default for s in SETTINGS}
    if path is not None:
        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(document, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping")
        for key, raw in _flatten(document).items():
            values[key] = _coerce(_setting(key), raw)
    config = Config(values).with_overrides(
        _env_overrides(os.environ if environ is None else environ)
    )
    return config.with_overrides(overrides or {})
