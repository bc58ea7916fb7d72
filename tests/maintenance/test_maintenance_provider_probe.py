"""Diagnostics' providers component reflects a real probe: a pipeline whose LLM
server is not running reports it degraded, so the component is not 1.0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engram.common.v1 import provider_pb2
from engram.maintenance.v1 import maintenance_pb2 as pb
from http_fakes import ScriptedHttpServer
from services.maintenance import diagnostics as dx


def test_a_missing_llm_server_lowers_the_providers_score(
    maintained: Callable[..., Any], http_servers: Callable[[Any], Any]
) -> None:
    nobody = http_servers(ScriptedHttpServer())
    nobody.stop()  # a loopback port nobody listens on
    m = maintained(
        pipeline=True,
        **{"providers.llm.base_url": nobody.url, "providers.embedding.kind": "none"},
    )
    report = m.maintenance.GetDiagnostics(pb.GetDiagnosticsRequest())
    states = {p.role: p.state for p in report.providers.providers}
    assert states == {
        "llm": provider_pb2.PROVIDER_STATE_DEGRADED,
        "embedding": provider_pb2.PROVIDER_STATE_DISABLED,
    }
    [llm] = [p for p in report.providers.providers if p.role == "llm"]
    assert "unreachable" in llm.last_error
    score = {c.name: c.score for c in report.components}["providers"]
    assert score == pytest.approx((dx.DEGRADED_PROVIDER_SCORE + 1.0) / 2)


def test_a_default_install_without_an_llm_is_fully_healthy(maintained: Callable[..., Any]) -> None:
    """No `providers.llm` key and no feature that calls an LLM: the LLM is not
    configured (DISABLED), which costs the health score nothing."""
    m = maintained(pipeline=True, **{"providers.embedding.kind": "none"})
    report = m.maintenance.GetDiagnostics(pb.GetDiagnosticsRequest())
    [llm] = [p for p in report.providers.providers if p.role == "llm"]
    assert llm.state == provider_pb2.PROVIDER_STATE_DISABLED
    assert "not configured" in llm.last_error
    assert {c.name: c.score for c in report.components}["providers"] == 1.0
    assert report.score == 1.0 and report.health == pb.HEALTH_CLASS_HEALTHY, "full health"


def test_diagnostics_list_each_provider_of_the_llm_chain(
    maintained: Callable[..., Any], http_servers: Callable[[Any], Any]
) -> None:
    nobody = http_servers(ScriptedHttpServer())
    nobody.stop()
    spare = http_servers(ScriptedHttpServer())
    spare.stop()
    m = maintained(
        pipeline=True,
        **{
            "providers.llm.base_url": nobody.url,
            "providers.llm_fallbacks": [{"kind": "gemini", "base_url": spare.url}],
            "providers.embedding.kind": "none",
        },
    )
    report = m.maintenance.GetDiagnostics(pb.GetDiagnosticsRequest())
    chain = [
        (p.chain_position, p.kind, p.state) for p in report.providers.providers if p.role == "llm"
    ]
    assert chain == [
        (0, "ollama", provider_pb2.PROVIDER_STATE_DEGRADED),
        (1, "gemini", provider_pb2.PROVIDER_STATE_DEGRADED),
    ]
