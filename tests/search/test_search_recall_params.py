"""Recall's and AssembleContext's parameters come from the configuration in one
place (issue 36, item 5): RecallParams.from_config and ContextParams.from_settings,
with every default written once, in services/common/config.py. Every configuration key Recall reads reaches its
parameter, and a parameter left at its default is the key's default."""

from __future__ import annotations

import operator
from dataclasses import fields
from typing import Any

import pytest

from services.common.config import load_config
from services.search.context import ContextParams
from services.search.decay import DecayRanking
from services.search.recall import RecallParams
from services.search.scoring import ScoringParams

# (configuration key, RecallParams attribute, a value that is not the default, what
# the attribute then holds)
KEYS: list[tuple[str, str, Any, Any]] = [
    ("search.fusion", "scoring.fusion", "rrf", "rrf"),
    ("search.alpha", "scoring.alpha", 0.5, 0.5),
    ("search.rrf_k", "scoring.rrf_k", 30, 30),
    ("search.min_score", "scoring.min_score", 0.25, 0.25),
    ("search.time_boost", "scoring.time_boost", 0.3, 0.3),
    ("search.episode_weight", "scoring.episode_weight", 0.25, 0.25),
    ("search.neighbor_weight", "scoring.neighbor_weight", 0.05, 0.05),
    ("search.diversity_penalty", "scoring.diversity_penalty", 0.04, 0.04),
    ("search.rrf_weight_fts", "scoring.rrf_weight_fts", 2.0, 2.0),
    ("search.rrf_weight_vector", "scoring.rrf_weight_vector", 3.0, 3.0),
    ("search.rrf_weight_graph", "scoring.rrf_weight_graph", 4.0, 4.0),
    ("search.importance_weight", "scoring.importance_weight", 0.2, 0.2),
    ("search.channel_depth", "channel_depth", 50, 50),
    ("search.vector_candidates", "vector_candidates", 200, 200),
    ("search.sentence_weight", "sentence_weight", 0.5, 0.5),
    ("memory.pipelineV2.rerankerTopN", "reranker_top_n", 10, 10),
    ("memory.pipelineV2.rerankerTimeoutMs", "reranker_timeout_s", 1500, 1.5),
    ("memory.pipelineV2.graphEnabled", "graph_enabled", True, True),
    ("memory.pipelineV2.graphBoostWeight", "graph_boost_weight", 0.2, 0.2),
    ("memory.pipelineV2.graphBoostTimeoutMs", "graph_boost_timeout_s", 700, 0.7),
    ("search.intent_routing", "intent_routing", False, False),
    ("search.intent_similarity_threshold", "intent_similarity_threshold", 0.5, 0.5),
    ("search.intent_entity_weight", "intent_entity_weight", 0.2, 0.2),
    ("search.intent_speaker_weight", "intent_speaker_weight", 0.25, 0.25),
    ("search.intent_speaker_any_intent", "intent_speaker_any_intent", False, False),
    ("search.intent_time_statement_weight", "intent_time_statement_weight", 0.1, 0.1),
    ("search.intent_causal_weight", "intent_causal_weight", 0.12, 0.12),
    ("search.intent_temporal_link_weight", "intent_temporal_link_weight", 0.13, 0.13),
    ("search.intent_causal_depth", "intent_causal_depth", 3, 3),
    ("search.decompose_weight", "decompose_weight", 0.5, 0.5),
    ("search.decompose_depth", "decompose_depth", 10, 10),
    ("search.decompose_rules", "decompose_rules", "alternatives", "alternatives"),
]
DECAY = {
    "search.decay_ranking": True,
    "search.decay_model": "importance",
    "memory.decay_rate": 0.9,
    "memory.decay_rate_default": 0.2,
}
NOT_CONFIGURED = {"vector_cache", "keyword_postings_budget"}  # set by tests and benchmarks


def test_the_default_configuration_gives_the_default_parameters() -> None:
    assert RecallParams.from_config(load_config(environ={})) == RecallParams()


def test_every_configuration_key_reaches_its_parameter() -> None:
    params = RecallParams.from_config(
        load_config(environ={}, overrides={**{k: v for k, _, v, _ in KEYS}, **DECAY})
    )
    default = RecallParams()
    for key, attribute, _, expected in KEYS:
        read = operator.attrgetter(attribute)
        assert read(default) != expected, f"{key}: the test's value is the default"
        assert read(params) == pytest.approx(expected), key
    assert default.decay is None
    assert params.decay == DecayRanking("importance", 0.9, 0.2)


def test_the_keys_cover_every_parameter() -> None:
    """A parameter added to RecallParams or ScoringParams comes with its key here."""
    every = {f"scoring.{f.name}" for f in fields(ScoringParams)} | {
        f.name for f in fields(RecallParams) if f.name not in {"scoring", "decay"}
    }
    assert {attribute for _, attribute, _, _ in KEYS} == every - NOT_CONFIGURED


CONTEXT = {
    "simple_budget": 900,
    "complex_budget": 2500,
    "max_budget": 30000,
    "pinned_limit": 40,
    "session_limit": 90,
    "entity_limit": 15,
    "relations_per_entity": 4,
}


def test_every_context_key_reaches_its_parameter() -> None:
    default = ContextParams()
    assert ContextParams.from_settings(load_config(environ={}).search.context) == default
    config = load_config(
        environ={}, overrides={f"search.context.{k}": v for k, v in CONTEXT.items()}
    )
    assert ContextParams.from_settings(config.search.context) == ContextParams(**CONTEXT)
    assert {k for k, v in CONTEXT.items() if getattr(default, k) != v} == {
        f.name for f in fields(ContextParams)
    }
