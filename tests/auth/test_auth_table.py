"""Every public RPC × {no key, bad key, malformed key, revoked key, wrong namespace,
too-low role, right key}, against a real auth-on suite (store, search, pipeline,
maintenance on real ports): the expected code and reason, and nothing written
(row counts of every table a write touches, before and after each refused call)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from auth_suite import AuthSuite, bearer, start_auth_suite

from engram.common.v1.document_pb2 import DOCUMENT_STATUS_DONE
from engram.maintenance.v1 import maintenance_pb2 as mpb
from engram.maintenance.v1 import maintenance_pb2_grpc
from engram.pipeline.v1 import pipeline_pb2 as ppb
from engram.pipeline.v1 import pipeline_pb2_grpc
from engram.search.v1 import search_pb2 as spb
from engram.search.v1 import search_pb2_grpc
from engram.store.v1 import store_pb2 as pb
from engram.store.v1 import store_pb2_grpc
from grpc_helpers import error_of
from llm_fakes import LlmServer
from services.common import auth
from store_helpers import scalar

NS = "team-a1"  # the namespace the keys under test cover (pattern team-a*)
OTHER = "team-b"  # a namespace no key under test covers
TABLES = ("memories", "memories_fts", "memory_history", "memory_jobs", "documents")
UNAUTHENTICATED = (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
DENIED = (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
TIMEOUT = 15


@dataclass
class World:
    """The running suite, its stubs, keys and the ids the calls use."""

    suite: AuthSuite
    store: store_pb2_grpc.MemoryStoreServiceStub
    search: search_pb2_grpc.SearchServiceStub
    pipeline: pipeline_pb2_grpc.PipelineServiceStub
    maintenance: maintenance_pb2_grpc.MaintenanceServiceStub
    keys: dict[str, str]
    ids: dict[str, str]

    def counts(self) -> dict[str, int]:
        return {t: scalar(self.suite.db_path, f"SELECT count(*) FROM {t}") for t in TABLES}


Call = Callable[[World, str, Any], Any]


def _stream_first(stream: Any) -> Any:
    """The first message of a server stream (then the stream is cancelled)."""
    try:
        return next(iter(stream))
    finally:
        stream.cancel()


def _created_and_done(w: World, document: Any, md: Any) -> Any:
    """A created document, once the worker has written its chunks (so no write of
    it lands during a later refused call)."""
    updates = list(
        w.pipeline.WatchDocument(
            ppb.WatchDocumentRequest(namespace=document.namespace, id=document.id),
            metadata=md,
            timeout=60,
        )
    )
    assert updates[-1].document.status == DOCUMENT_STATUS_DONE
    return document


# Each public RPC: how to call it in a namespace with some metadata. Suite-wide
# RPCs ignore the namespace.
CALLS: dict[str, Call] = {
    "/engram.store.v1.MemoryStoreService/Remember": lambda w, ns, md: w.store.Remember(
        pb.RememberRequest(namespace=ns, content="a table test memory"),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/ImportMemories": lambda w, ns, md: w.store.ImportMemories(
        iter([pb.ImportMemoriesRequest(namespace=ns, items=[pb.ImportItem(content="imported")])]),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/GetMemory": lambda w, ns, md: w.store.GetMemory(
        pb.GetMemoryRequest(namespace=ns, id=w.ids["get"]), metadata=md, timeout=TIMEOUT
    ),
    "/engram.store.v1.MemoryStoreService/ListMemories": lambda w, ns, md: w.store.ListMemories(
        pb.ListMemoriesRequest(namespace=ns), metadata=md, timeout=TIMEOUT
    ),
    "/engram.store.v1.MemoryStoreService/ModifyMemories": lambda w, ns, md: w.store.ModifyMemories(
        pb.ModifyMemoriesRequest(
            namespace=ns,
            reason="table",
            patches=[pb.MemoryPatch(id=w.ids["modify"], content="modified text")],
        ),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/DeleteMemory": lambda w, ns, md: w.store.DeleteMemory(
        pb.DeleteMemoryRequest(namespace=ns, id=w.ids["delete"], reason="table"),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/ForgetMemories": lambda w, ns, md: w.store.ForgetMemories(
        pb.ForgetMemoriesRequest(
            namespace=ns, mode=pb.FORGET_MODE_EXECUTE, ids=[w.ids["forget"]], reason="table"
        ),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/RecoverMemory": lambda w, ns, md: w.store.RecoverMemory(
        pb.RecoverMemoryRequest(namespace=ns, id=w.ids["recover"], reason="table"),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.store.v1.MemoryStoreService/ExplainMemory": lambda w, ns, md: w.store.ExplainMemory(
        pb.ExplainMemoryRequest(namespace=ns, id=w.ids["get"]), metadata=md, timeout=TIMEOUT
    ),
    "/engram.store.v1.MemoryStoreService/ListMemoryLinks": lambda w, ns, md: (
        w.store.ListMemoryLinks(
            pb.ListMemoryLinksRequest(namespace=ns, memory_id=w.ids["get"]),
            metadata=md,
            timeout=TIMEOUT,
        )
    ),
    "/engram.store.v1.MemoryStoreService/GetEntity": lambda w, ns, md: _past_auth(
        lambda: w.store.GetEntity(
            pb.GetEntityRequest(namespace=ns, name="nobody"), metadata=md, timeout=TIMEOUT
        )
    ),
    "/engram.store.v1.MemoryStoreService/ListEntities": lambda w, ns, md: w.store.ListEntities(
        pb.ListEntitiesRequest(namespace=ns), metadata=md, timeout=TIMEOUT
    ),
    "/engram.store.v1.MemoryStoreService/ListWeakMemories": lambda w, ns, md: (
        w.store.ListWeakMemories(
            pb.ListWeakMemoriesRequest(namespace=ns), metadata=md, timeout=TIMEOUT
        )
    ),
    "/engram.store.v1.MemoryStoreService/ListMemoryHistory": lambda w, ns, md: (
        w.store.ListMemoryHistory(
            pb.ListMemoryHistoryRequest(namespace=ns, memory_id=w.ids["get"]),
            metadata=md,
            timeout=TIMEOUT,
        )
    ),
    "/engram.store.v1.MemoryStoreService/AppendTurn": lambda w, ns, md: w.store.AppendTurn(
        pb.AppendTurnRequest(
            namespace=ns, session_id="table", role=pb.TURN_ROLE_USER, content="a table turn"
        ),
        metadata=md,
        timeout=TIMEOUT,
    ),
    # (a turn first: a session without one has nothing to summarise)
    "/engram.store.v1.MemoryStoreService/SummarizeSession": lambda w, ns, md: (
        w.store.AppendTurn(
            pb.AppendTurnRequest(
                namespace=ns, session_id="summed", role=pb.TURN_ROLE_USER, content="to summarise"
            ),
            metadata=md,
            timeout=TIMEOUT,
        ),
        w.store.SummarizeSession(
            pb.SummarizeSessionRequest(namespace=ns, session_id="summed"),
            metadata=md,
            timeout=TIMEOUT,
        ),
    )[1],
    "/engram.store.v1.MemoryStoreService/GetSession": lambda w, ns, md: w.store.GetSession(
        pb.GetSessionRequest(namespace=ns, session_id="table-session"),
        metadata=md,
        timeout=TIMEOUT,
    ),
    # a preview (the table's namespace must live on for the other calls)
    "/engram.store.v1.MemoryStoreService/DeleteNamespace": lambda w, ns, md: (
        w.store.DeleteNamespace(
            pb.DeleteNamespaceRequest(namespace=ns), metadata=md, timeout=TIMEOUT
        )
    ),
    "/engram.store.v1.MemoryStoreService/RecoverNamespace": lambda w, ns, md: _past_auth(
        lambda: w.store.RecoverNamespace(
            pb.RecoverNamespaceRequest(namespace=ns, reason="table"), metadata=md, timeout=TIMEOUT
        )
    ),
    "/engram.search.v1.SearchService/Recall": lambda w, ns, md: w.search.Recall(
        spb.RecallRequest(namespace=ns, query="table"), metadata=md, timeout=TIMEOUT
    ),
    "/engram.search.v1.SearchService/AssembleContext": lambda w, ns, md: w.search.AssembleContext(
        spb.AssembleContextRequest(namespaces=[ns], query="table"),
        metadata=md,
        timeout=TIMEOUT,
    ),
    "/engram.pipeline.v1.PipelineService/GetStatus": lambda w, ns, md: w.pipeline.GetStatus(
        ppb.GetStatusRequest(), metadata=md, timeout=TIMEOUT
    ),
    "/engram.store.v1.SuiteService/GetSuite": lambda w, ns, md: store_pb2_grpc.SuiteServiceStub(
        w.suite.channel("store")
    ).GetSuite(pb.GetSuiteRequest(), metadata=md, timeout=TIMEOUT),
    "/engram.pipeline.v1.PipelineService/Extract": lambda w, ns, md: w.pipeline.Extract(
        ppb.ExtractRequest(namespace=ns, content="Alice likes tea."), metadata=md, timeout=TIMEOUT
    ),
    "/engram.pipeline.v1.PipelineService/CreateDocument": lambda w, ns, md: _created_and_done(
        w,
        w.pipeline.CreateDocument(
            ppb.CreateDocumentRequest(namespace=ns, content="A short document.", title="doc"),
            metadata=md,
            timeout=TIMEOUT,
        ).document,
        md,
    ),
    "/engram.pipeline.v1.PipelineService/GetDocument": lambda w, ns, md: w.pipeline.GetDocument(
        ppb.GetDocumentRequest(namespace=ns, id=w.ids["document"]), metadata=md, timeout=TIMEOUT
    ),
    "/engram.pipeline.v1.PipelineService/ListDocumentChunks": lambda w, ns, md: (
        w.pipeline.ListDocumentChunks(
            ppb.ListDocumentChunksRequest(namespace=ns, document_id=w.ids["document"]),
            metadata=md,
            timeout=TIMEOUT,
        )
    ),
    "/engram.pipeline.v1.PipelineService/WatchDocument": lambda w, ns, md: _stream_first(
        w.pipeline.WatchDocument(
            ppb.WatchDocumentRequest(namespace=ns, id=w.ids["document"]),
            metadata=md,
            timeout=TIMEOUT,
        )
    ),
    "/engram.maintenance.v1.MaintenanceService/GetDiagnostics": lambda w, ns, md: (
        w.maintenance.GetDiagnostics(mpb.GetDiagnosticsRequest(), metadata=md, timeout=TIMEOUT)
    ),
    "/engram.maintenance.v1.MaintenanceService/RunMaintenance": lambda w, ns, md: (
        w.maintenance.RunMaintenance(
            mpb.RunMaintenanceRequest(mode=mpb.MAINTENANCE_MODE_OBSERVE),
            metadata=md,
            timeout=TIMEOUT,
        )
    ),
    "/engram.maintenance.v1.MaintenanceService/RunRetention": lambda w, ns, md: (
        w.maintenance.RunRetention(mpb.RunRetentionRequest(), metadata=md, timeout=TIMEOUT)
    ),
}


def _public_methods() -> set[str]:
    """Every RPC of every public service, read from the protos."""
    from engram.maintenance.v1 import maintenance_pb2
    from engram.pipeline.v1 import pipeline_pb2
    from engram.search.v1 import search_pb2
    from engram.store.v1 import store_pb2

    found = set()
    for module in (store_pb2, search_pb2, pipeline_pb2, maintenance_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            found |= {f"/{service.full_name}/{m.name}" for m in service.methods}
    return found


def test_the_table_names_every_public_rpc_and_the_issue_roles() -> None:
    assert set(CALLS) == set(auth.PUBLIC_RPCS) == _public_methods()
    by_role = {
        role: {m.rsplit("/", 1)[1] for m, r in auth.PUBLIC_RPCS.items() if r == role}
        for role in auth.Role
    }
    assert by_role[auth.Role.READER] == {
        "Recall",
        "AssembleContext",
        "GetMemory",
        "ListMemories",
        "ListMemoryHistory",
        "ExplainMemory",
        "ListMemoryLinks",
        "GetEntity",
        "ListEntities",
        "GetSession",
        "ListWeakMemories",
        "GetDocument",
        "ListDocumentChunks",
        "WatchDocument",
        "Extract",
        "GetStatus",
        "GetSuite",
    }
    assert by_role[auth.Role.WRITER] == {
        "Remember",
        "ImportMemories",
        "ModifyMemories",
        "DeleteMemory",
        "ForgetMemories",
        "RecoverMemory",
        "AppendTurn",
        "SummarizeSession",
        "DeleteNamespace",
        "RecoverNamespace",
        "CreateDocument",
    }
    assert by_role[auth.Role.ADMIN] == {"GetDiagnostics", "RunMaintenance", "RunRetention"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, llm: LlmServer) -> Iterator[World]:
    # session consolidation on: GetSession has a session to show
    suite = start_auth_suite(
        tmp_path_factory.mktemp("auth"), llm.url, {"sessions.consolidate": "on"}
    )
    try:
        keys = {
            "reader": suite.key("reader", "team-a*", name="reader-a"),
            "writer": suite.key("writer", "team-a*", name="writer-a"),
            "admin": suite.key("admin", "*", name="admin-all"),
            "admin-a": suite.key("admin", "team-a*", name="admin-a"),
            "writer-all": suite.key("writer", "*", name="writer-all"),
            "revoked": suite.key("admin", "*", name="revoked"),
        }
        auth.revoke_key(suite.keys_file, "revoked")
        w = World(
            suite,
            store_pb2_grpc.MemoryStoreServiceStub(suite.channel("store")),
            search_pb2_grpc.SearchServiceStub(suite.channel("search")),
            pipeline_pb2_grpc.PipelineServiceStub(suite.channel("pipeline")),
            maintenance_pb2_grpc.MaintenanceServiceStub(suite.channel("maintenance")),
            keys,
            {},
        )
        admin = bearer(keys["admin"])
        for name in ("get", "modify", "delete", "forget", "recover"):
            w.ids[name] = w.store.Remember(
                pb.RememberRequest(namespace=NS, content=f"table memory {name}"), metadata=admin
            ).memory.id
        w.store.AppendTurn(
            pb.AppendTurnRequest(
                namespace=NS, session_id="table-session", role=pb.TURN_ROLE_USER, content="hi"
            ),
            metadata=admin,
        )
        w.ids["elsewhere"] = w.store.Remember(
            pb.RememberRequest(namespace="team-c", content="a memory in team-c"), metadata=admin
        ).memory.id
        w.store.DeleteMemory(
            pb.DeleteMemoryRequest(namespace=NS, id=w.ids["recover"], reason="setup"),
            metadata=admin,
        )
        document = w.pipeline.CreateDocument(
            ppb.CreateDocumentRequest(namespace=NS, content="A document for the table."),
            metadata=admin,
            timeout=TIMEOUT,
        ).document
        w.ids["document"] = document.id
        updates = list(  # the stream ends once the document is done (or failed)
            w.pipeline.WatchDocument(
                ppb.WatchDocumentRequest(namespace=NS, id=document.id), metadata=admin, timeout=60
            )
        )
        assert updates[-1].document.status == DOCUMENT_STATUS_DONE
        yield w
    finally:
        suite.close()


def _past_auth(call: Callable[[], Any]) -> Any:
    """The call's reply, or NOT_FOUND's code when the servicer (past the auth
    check) found nothing: the table's namespaces hold no entity."""
    try:
        return call()
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return error.code()


def _role_of(method: str) -> str:
    return auth.PUBLIC_RPCS[method].name.lower()


def _refusals(method: str) -> dict[str, tuple[str | None, str, tuple[grpc.StatusCode, str]]]:
    """case -> (key name or a literal credential, namespace, expected code and reason)."""
    role = _role_of(method)
    right = {"reader": "reader", "writer": "writer", "admin": "admin"}[role]
    cases: dict[str, tuple[str | None, str, tuple[grpc.StatusCode, str]]] = {
        "no key": (None, NS, UNAUTHENTICATED),
        "bad key": ("!engram_00112233445566778899aabbccddeeff" + "0" * 48, NS, UNAUTHENTICATED),
        "malformed key": ("!not-a-key", NS, UNAUTHENTICATED),
        "revoked key": ("revoked", NS, UNAUTHENTICATED),
    }
    if method in auth.ALL_NAMESPACE_RPCS:
        cases["wrong namespace"] = ("admin-a", NS, DENIED)  # an admin of team-a* only
    elif method not in auth.SUITE_WIDE_READS:
        cases["wrong namespace"] = (right, OTHER, DENIED)
    lower = {"writer": "reader", "admin": "writer-all"}.get(role)
    if lower is not None:
        cases["too-low role"] = (lower, NS, DENIED)
    return cases


def _metadata(w: World, credential: str | None) -> tuple[tuple[str, str], ...]:
    if credential is None:
        return ()
    if credential.startswith("!"):
        return bearer(credential[1:])
    return bearer(w.keys[credential])


@pytest.mark.parametrize("method", sorted(CALLS))
def test_refused_calls_write_nothing_and_the_right_key_is_served(world: World, method: str) -> None:
    call = CALLS[method]
    for case, (credential, namespace, expected) in _refusals(method).items():
        before = world.counts()
        code, reason, _ = error_of(
            lambda ns=namespace, cred=credential: call(world, ns, _metadata(world, cred))
        )
        assert (code, reason) == expected, f"{method} with {case}"
        assert world.counts() == before, f"{method} with {case} wrote something"
    right = {"reader": "reader", "writer": "writer", "admin": "admin"}[_role_of(method)]
    assert call(world, NS, _metadata(world, right)) is not None


def test_a_read_of_several_namespaces_needs_every_one_covered(world: World) -> None:
    """Recall and AssembleContext over namespaces the key covers only in part:
    PERMISSION_DENIED, nothing returned; covered in full (team-a*): served, each
    result naming its namespace."""
    md = _metadata(world, "reader")
    admin = _metadata(world, "admin")
    world.store.Remember(
        pb.RememberRequest(namespace="team-a2", content="table of the second team"),
        metadata=admin,
    )
    for namespaces in ([NS, "team-c"], ["team-c", NS], [NS, "team-a2", OTHER]):
        for call in (
            lambda ns=namespaces: world.search.Recall(
                spb.RecallRequest(namespaces=ns, query="table"), metadata=md, timeout=TIMEOUT
            ),
            lambda ns=namespaces: world.search.AssembleContext(
                spb.AssembleContextRequest(namespaces=ns, query="table"),
                metadata=md,
                timeout=TIMEOUT,
            ),
        ):
            code, reason, _ = error_of(call)
            assert (code, reason) == DENIED, namespaces
    # `namespace` and `namespaces` both set: every one named is checked (before the
    # request is refused as invalid), so the pair never widens what a key reaches
    code, reason, _ = error_of(
        lambda: world.search.Recall(
            spb.RecallRequest(namespace="team-c", namespaces=[NS], query="table"),
            metadata=md,
            timeout=TIMEOUT,
        )
    )
    assert (code, reason) == DENIED
    reply = world.search.Recall(
        spb.RecallRequest(namespaces=[NS, "team-a2"], query="table", min_score=0.0),
        metadata=md,
        timeout=TIMEOUT,
    )
    assert {r.memory.namespace for r in reply.results} == {NS, "team-a2"}


def test_a_refusal_does_not_tell_whether_a_namespace_or_id_exists(world: World) -> None:
    md = _metadata(world, "reader")

    def get(namespace: str, memory_id: str) -> Any:
        with pytest.raises(grpc.RpcError) as caught:
            world.store.GetMemory(
                pb.GetMemoryRequest(namespace=namespace, id=memory_id), metadata=md
            )
        return caught.value.code(), caught.value.details(), caught.value.trailing_metadata()

    existing = get("team-c", world.ids["elsewhere"])
    missing = get("team-nobody", "00000000-0000-0000-0000-000000000000")
    assert existing[:2] == missing[:2]
    assert existing[0] == grpc.StatusCode.PERMISSION_DENIED
    assert world.ids["elsewhere"] not in existing[1] and "team-c" not in existing[1]


def test_health_is_open_and_reflection_answers_any_valid_key(world: World) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    for service in ("store", "search", "pipeline", "maintenance"):
        channel = world.suite.channel(service)
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        code, reason, _ = error_of(lambda r=reflect, a=ask: list(r.ServerReflectionInfo(iter([a]))))
        assert (code, reason) == UNAUTHENTICATED
        answers = list(
            reflect.ServerReflectionInfo(iter([ask]), metadata=_metadata(world, "reader"))
        )
        names = {s.name for s in answers[0].list_services_response.service}
        assert "grpc.health.v1.Health" in names


def test_every_public_request_has_a_namespace_or_is_suite_wide() -> None:
    """The namespace check reads `namespace` (and `namespaces`) from each request: an
    RPC without either must be one of the suite-wide ones the guard knows."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    for method in auth.PUBLIC_RPCS:
        service, name = method.strip("/").split("/")
        request = pool.FindServiceByName(service).FindMethodByName(name).input_type
        if not {"namespace", "namespaces"} & set(request.fields_by_name):
            assert method in auth.ALL_NAMESPACE_RPCS | auth.SUITE_WIDE_READS, method


def test_the_key_name_is_the_actor_of_every_mutation(world: World) -> None:
    md = _metadata(world, "writer")
    created = world.store.Remember(
        pb.RememberRequest(namespace=NS, content="actor check memory", who="someone else"),
        metadata=md,
    ).memory
    world.store.ModifyMemories(
        pb.ModifyMemoriesRequest(
            namespace=NS,
            actor="claimed-actor",
            reason="t",
            patches=[pb.MemoryPatch(id=created.id, content="actor check memory changed")],
        ),
        metadata=md,
    )
    world.store.DeleteMemory(
        pb.DeleteMemoryRequest(namespace=NS, id=created.id, actor="claimed-actor", reason="t"),
        metadata=md,
    )
    world.store.RecoverMemory(
        pb.RecoverMemoryRequest(namespace=NS, id=created.id, reason="t"), metadata=md
    )
    events = world.store.ListMemoryHistory(
        pb.ListMemoryHistoryRequest(namespace=NS, memory_id=created.id), metadata=md
    ).events
    assert len(events) == 4
    assert {e.actor for e in events} == {"writer-a"}
    imported = world.store.ImportMemories(
        iter(
            [pb.ImportMemoriesRequest(namespace=NS, items=[pb.ImportItem(content="actor import")])]
        ),
        metadata=md,
    ).results[0]
    world.store.ForgetMemories(
        pb.ForgetMemoriesRequest(
            namespace=NS, mode=pb.FORGET_MODE_EXECUTE, ids=[imported.memory_id], reason="t"
        ),
        metadata=md,
    )
    events = world.store.ListMemoryHistory(
        pb.ListMemoryHistoryRequest(namespace=NS, memory_id=imported.memory_id), metadata=md
    ).events
    assert [e.actor for e in events] == ["writer-a", "writer-a"]


def test_every_service_sees_a_revocation(world: World) -> None:
    """Each service re-reads the keys file itself (here every 100 ms; at most 5 s
    is allowed, which test_auth_store checks at that setting)."""
    key = world.suite.key("admin", "*", name="soon-revoked")
    md = bearer(key)
    calls = {
        "store": lambda: world.store.ListMemories(
            pb.ListMemoriesRequest(namespace=NS), metadata=md, timeout=TIMEOUT
        ),
        "search": lambda: world.search.Recall(
            spb.RecallRequest(namespace=NS, query="table"), metadata=md, timeout=TIMEOUT
        ),
        "pipeline": lambda: world.pipeline.GetStatus(
            ppb.GetStatusRequest(), metadata=md, timeout=TIMEOUT
        ),
        "maintenance": lambda: world.maintenance.GetDiagnostics(
            mpb.GetDiagnosticsRequest(), metadata=md, timeout=TIMEOUT
        ),
    }
    for call in calls.values():
        call()
    auth.revoke_key(world.suite.keys_file, "soon-revoked")
    deadline = time.monotonic() + 5.5
    for service, call in calls.items():
        while True:
            try:
                call()
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED, service
                break
            assert time.monotonic() < deadline, f"{service} still takes the revoked key"
            time.sleep(0.05)
