"""What the default configuration (no LLM, Pipeline V2 off) answers where a new
user looks, through the public gRPC API: work that only the pipeline's LLM
would do is refused with FAILED_PRECONDITION naming the setting to turn on
(nothing is queued that no worker takes); an empty entity graph says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import admin_pb2, admin_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of


@pytest.fixture
def default_store(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> Any:
    """A store on the default configuration (only the database path is this test's)."""

    def start(**overrides: Any) -> tuple[Any, Any, Any]:
        server, store = start_store_server(make_config(**overrides))
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
        return server, store, admin_pb2_grpc.StoreAdminServiceStub(channel)

    return start


def extract_jobs(admin: Any) -> int:
    counts = admin.GetStoreDiagnostics(admin_pb2.GetStoreDiagnosticsRequest()).jobs
    return sum(c.count for c in counts if c.job_type == job_pb2.JOB_TYPE_EXTRACT)


def test_backfill_with_the_pipeline_off_is_refused_and_queues_nothing(default_store: Any) -> None:
    _, store, admin = default_store()
    for n in range(6):
        store.Remember(store_pb2.RememberRequest(content=f"memory {n} of a new user"))
    code, reason, _ = error_of(
        lambda: admin.BackfillExtraction(admin_pb2.BackfillExtractionRequest())
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PIPELINE_DISABLED")
    with pytest.raises(grpc.RpcError) as caught:
        admin.BackfillExtraction(admin_pb2.BackfillExtractionRequest())
    assert "memory.pipelineV2.enabled" in caught.value.details()
    assert "providers.llm" in caught.value.details()
    assert extract_jobs(admin) == 0, "nothing queued that no worker would take"


def test_backfill_with_the_pipeline_on_queues(default_store: Any) -> None:
    _, store, admin = default_store(**{"memory.pipelineV2.enabled": True})
    store.Remember(store_pb2.RememberRequest(content="a memory"))
    response = admin.BackfillExtraction(admin_pb2.BackfillExtractionRequest())
    assert (response.queued, response.remaining) == (0, 0), "Remember queued it already"
    assert extract_jobs(admin) == 1


def test_get_session_with_consolidation_off_names_the_setting(default_store: Any) -> None:
    _, store, _ = default_store()
    store.Remember(store_pb2.RememberRequest(content="said in a session", session_id="s-1"))
    request = store_pb2.GetSessionRequest(session_id="s-1")
    code, reason, _ = error_of(lambda: store.GetSession(request))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONSOLIDATION_DISABLED")
    with pytest.raises(grpc.RpcError) as caught:
        store.GetSession(request)
    assert "sessions.consolidate" in caught.value.details()
    assert "memory.pipelineV2.enabled" in caught.value.details()


def test_get_session_with_consolidation_on_is_still_not_found_for_an_unknown_one(
    default_store: Any,
) -> None:
    _, store, _ = default_store(**{"sessions.consolidate": "on"})
    code, _, _ = error_of(lambda: store.GetSession(store_pb2.GetSessionRequest(session_id="s-9")))
    assert code == grpc.StatusCode.NOT_FOUND


def test_an_empty_entity_graph_says_why_it_is_empty(default_store: Any) -> None:
    _, store, _ = default_store()
    store.Remember(store_pb2.RememberRequest(content="Alice works with Bob at Acme"))
    listing = store.ListEntities(store_pb2.ListEntitiesRequest())
    assert list(listing.entities) == [], "an empty listing, not an error"
    assert "memory.pipelineV2.graphEnabled" in listing.graph_off_reason
    assert "providers.llm" in listing.graph_off_reason
    with pytest.raises(grpc.RpcError) as caught:
        store.GetEntity(store_pb2.GetEntityRequest(name="Alice"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "memory.pipelineV2.graphEnabled" in caught.value.details()


def test_a_store_building_the_graph_gives_no_reason(default_store: Any) -> None:
    _, store, _ = default_store(
        **{"memory.pipelineV2.enabled": True, "memory.pipelineV2.graphEnabled": True}
    )
    assert store.ListEntities(store_pb2.ListEntitiesRequest()).graph_off_reason == ""
    with pytest.raises(grpc.RpcError) as caught:
        store.GetEntity(store_pb2.GetEntityRequest(name="Alice"))
    assert "graphEnabled" not in caught.value.details()
