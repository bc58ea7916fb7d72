"""The PII gate on the store's write path, through the public gRPC API: redact
and reject keep the original values out of the database file (rows, FTS index,
history, job payloads, WAL) and the server's logs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

import backend_db
from engram.common.v1 import job_pb2
from engram.common.v1 import pii_policy_pb2 as pii_pb
from engram.store.internal.v1 import documents_pb2 as dpb
from engram.store.internal.v1 import documents_pb2_grpc, job_queue_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember, table_counts

# One of each kind, with the placeholder REDACT gives it.
VALUES = {
    "jane.doe@example.com": "[EMAIL_1]",
    "+44 20 7946 0958": "[PHONE_1]",
    "4111 1111 1111 1111": "[CARD_1]",
    "DE89 3704 0044 0532 0130 00": "[IBAN_1]",
    "536-22-1234": "[SSN_1]",
    "192.168.40.17": "[IP_1]",
    "AKIAIOSFODNN7EXAMPLE": "[SECRET_1]",
}
TEXT = (
    "Contact jane.doe@example.com or +44 20 7946 0958; card 4111 1111 1111 1111, "
    "IBAN DE89 3704 0044 0532 0130 00, SSN 536-22-1234, host 192.168.40.17, "
    "key AKIAIOSFODNN7EXAMPLE. Again: jane.doe@example.com"
)
REDACTED = (
    "Contact [EMAIL_1] or [PHONE_1]; card [CARD_1], IBAN [IBAN_1], SSN [SSN_1], "
    "host [IP_1], key [SECRET_1]. Again: [EMAIL_1]"
)


def _leaks(db_path: Path, caplog: pytest.LogCaptureFixture) -> set[str]:
    """The original values found anywhere in the database (its file and WAL, or
    every row of a Postgres database) or the logs."""
    stored = backend_db.stored_bytes(db_path)
    logged = "\n".join(repr(record.__dict__) for record in caplog.records)
    leaked = {v for v in VALUES if v.encode() in stored or v.replace(" ", "").encode() in stored}
    return leaked | {v for v in VALUES if v in logged}


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def test_redact_replaces_every_kind_and_no_original_is_stored_or_logged(
    store: Any, db_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    memory = remember(store, TEXT, pii_policy=pii_pb.PII_POLICY_REDACT).memory
    assert memory.content == REDACTED
    got = store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory
    assert got.content == REDACTED
    history = store.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id=memory.id))
    assert [e.new_content for e in history.events] == [REDACTED]
    assert _leaks(db_path, logs) == set()
    # the redacted text is what the namespace's dedup and hash see
    assert remember(store, REDACTED).deduplicated


def test_reject_names_each_kind_writes_nothing_and_echoes_no_value(
    store: Any, db_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    remember(store, "something harmless")
    before = table_counts(db_path)
    with pytest.raises(grpc.RpcError) as caught:
        remember(store, TEXT, pii_policy=pii_pb.PII_POLICY_REJECT)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not any(v in (caught.value.details() or "") for v in VALUES)
    code, reason, fields = error_of(
        lambda: remember(store, TEXT, pii_policy=pii_pb.PII_POLICY_REJECT)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PII_DETECTED")
    assert fields == ["content"] * len(VALUES)  # one violation per kind
    assert table_counts(db_path) == before
    assert _leaks(db_path, logs) == set()


def test_by_default_secrets_are_redacted_and_the_rest_is_kept(store: Any) -> None:
    memory = remember(store, "Deploy key AKIAIOSFODNN7EXAMPLE belongs to ops@example.com").memory
    assert memory.content == "Deploy key [SECRET_1] belongs to ops@example.com"
    allowed = remember(store, "key AKIAIOSFODNN7EXAMPLE", pii_policy=pii_pb.PII_POLICY_ALLOW)
    assert allowed.memory.content == "key AKIAIOSFODNN7EXAMPLE"


def test_rejection_alongside_other_bad_fields_is_plain_invalid_argument(store: Any) -> None:
    code, reason, fields = error_of(
        lambda: remember(
            store, "ssn 536-22-1234", importance=3, pii_policy=pii_pb.PII_POLICY_REJECT
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert sorted(fields) == ["content", "importance"]


def test_an_unknown_policy_value_is_invalid(store: Any) -> None:
    code, reason, fields = error_of(lambda: remember(store, "hello", pii_policy=9))
    assert (code, reason, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["pii_policy"],
    )


def test_namespace_policy_from_configuration(
    make_config: Callable[..., Any], start_store_server: Any
) -> None:
    _, stub = start_store_server(
        make_config(
            **{
                "pii.default_policy": {"email": "redact"},
                "pii.namespaces": {"vault": "reject"},
            }
        )
    )
    assert remember(stub, "mail a@x.io").memory.content == "mail [EMAIL_1]"
    _, reason, _ = error_of(lambda: remember(stub, "mail a@x.io", namespace="vault"))
    assert reason == "PII_DETECTED"
    # a request's own policy overrides the namespace's
    kept = remember(stub, "mail a@x.io", namespace="vault", pii_policy=pii_pb.PII_POLICY_ALLOW)
    assert kept.memory.content == "mail a@x.io"


def test_import_applies_item_then_message_then_namespace_policy(
    store: Any, db_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    Item = store_pb2.ImportItem
    response = store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    pii_policy=pii_pb.PII_POLICY_REDACT,
                    items=[
                        Item(content="first jane.doe@example.com"),
                        Item(content="second 536-22-1234", pii_policy=pii_pb.PII_POLICY_REJECT),
                    ],
                ),
                store_pb2.ImportMemoriesRequest(
                    items=[Item(content="fourth +44 20 7946 0958 AKIAIOSFODNN7EXAMPLE")]
                ),
            ]
        )
    )
    statuses = [r.status for r in response.results]
    assert statuses == [
        store_pb2.IMPORT_STATUS_CREATED,
        store_pb2.IMPORT_STATUS_FAILED,
        store_pb2.IMPORT_STATUS_CREATED,
    ]
    assert "ssn" in response.results[1].error and "536-22-1234" not in response.results[1].error
    contents = [
        store.GetMemory(store_pb2.GetMemoryRequest(id=response.results[i].memory_id)).memory.content
        for i in (0, 2)
    ]
    assert contents == ["first [EMAIL_1]", "fourth +44 20 7946 0958 [SECRET_1]"]
    leaked = _leaks(db_path, logs)
    assert leaked == {"+44 20 7946 0958"}  # allowed by the namespace's default policy


def test_modify_content_patches_pass_the_gate(
    store: Any, db_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    memory = remember(store, "deploy notes").memory
    patch = store_pb2.MemoryPatch(id=memory.id, content="deploy with AKIAIOSFODNN7EXAMPLE")
    store.ModifyMemories(store_pb2.ModifyMemoriesRequest(patches=[patch], reason="add key"))
    got = store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory
    assert got.content == "deploy with [SECRET_1]"
    before = table_counts(db_path)
    rejected = store_pb2.MemoryPatch(id=memory.id, content="mail jane.doe@example.com")
    code, reason, fields = error_of(
        lambda: store.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                patches=[rejected], reason="r", pii_policy=pii_pb.PII_POLICY_REJECT
            )
        )
    )
    assert (code, reason, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PII_DETECTED",
        ["patches[0].content"],
    )
    assert table_counts(db_path) == before
    assert _leaks(db_path, logs) == set()


def test_documents_are_gated_at_creation_and_per_chunk(
    make_config: Callable[..., Any],
    start_store_server: Any,
    db_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    server, stub = start_store_server(
        make_config(**{"pii.namespaces": {"hr": {"email": "redact", "ssn": "reject"}}})
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    docs = documents_pb2_grpc.DocumentStoreServiceStub(channel)
    jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
    try:
        _, reason, fields = error_of(
            lambda: docs.CreateDocument(
                dpb.CreateDocumentRequest(namespace="hr", content="SSN 536-22-1234")
            )
        )
        assert (reason, fields) == ("PII_DETECTED", ["content"])
        docs.CreateDocument(
            dpb.CreateDocumentRequest(namespace="hr", content="Mail jane.doe@example.com")
        )
        [job] = jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
        ).jobs
        lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
        source = docs.ReadDocumentSource(dpb.ReadDocumentSourceRequest(lease=lease))
        assert source.raw_content == "Mail [EMAIL_1]"
        # a URL's fetched text is first seen as chunks: the same gate applies there
        written = docs.WriteDocumentChunk(
            dpb.WriteDocumentChunkRequest(
                lease=lease, chunk_index=0, content="Also AKIAIOSFODNN7EXAMPLE"
            )
        )
        got = stub.GetMemory(
            store_pb2.GetMemoryRequest(namespace="hr", id=written.memory_id)
        ).memory
        assert got.content == "Also [SECRET_1]"
        _, reason, _ = error_of(
            lambda: docs.WriteDocumentChunk(
                dpb.WriteDocumentChunkRequest(lease=lease, chunk_index=1, content="536-22-1234")
            )
        )
        assert reason == "PII_DETECTED"
    finally:
        channel.close()
    assert _leaks(db_path, logs) == set()


def test_turns_and_session_summaries_follow_the_namespace_policy(
    make_config: Callable[..., Any],
    start_store_server: Any,
    db_path: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    server, stub = start_store_server(
        make_config(**{"pii.default_policy": {"email": "redact"}, "providers.llm.model": "m"})
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
    try:
        turn = stub.AppendTurn(
            store_pb2.AppendTurnRequest(
                session_id="s1", role=store_pb2.TURN_ROLE_USER, content="mail jane.doe@example.com"
            )
        )
        assert turn.memory.content == "mail [EMAIL_1]"
        stub.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="s1"))
        [job] = jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_SUMMARIZE_SESSION, max_jobs=1)
        ).jobs
        assert "jane.doe@example.com" not in job.content
        done = jobs.CompleteSummarizeJob(
            jq.CompleteSummarizeJobRequest(
                lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
                summary="The user (jane.doe@example.com) asked for mail.",
                model="test-llm",
            )
        )
        summary = stub.GetMemory(store_pb2.GetMemoryRequest(id=done.memory_id)).memory
        assert summary.content == "The user ([EMAIL_1]) asked for mail."
    finally:
        channel.close()
    assert _leaks(db_path, logs) == set()


def test_who_why_and_tags_pass_the_gate_like_the_content(
    store: Any, db_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    """Free text a caller fills besides the content: a redacted who, why or tag keeps
    its placeholder; rejection names each field; source ids are identifiers, kept."""
    memory = remember(
        store,
        "the quarterly plan",
        who="jane.doe@example.com",
        why="asked by +44 20 7946 0958",
        tags=["AKIAIOSFODNN7EXAMPLE", "planning"],
        source_id="msg-17",
        pii_policy=pii_pb.PII_POLICY_REDACT,
    ).memory
    assert (memory.who, memory.why) == ("[EMAIL_1]", "asked by [PHONE_1]")
    assert list(memory.tags) == ["[secret_1]", "planning"]
    assert memory.source_id == "msg-17"
    before = table_counts(db_path)
    code, reason, fields = error_of(
        lambda: remember(
            store,
            "another plan",
            who="jane.doe@example.com",
            tags=["ok", "536-22-1234"],
            pii_policy=pii_pb.PII_POLICY_REJECT,
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PII_DETECTED")
    assert sorted(fields) == ["tags[1]", "who"]
    patch = store_pb2.MemoryPatch(
        id=memory.id, who="jane.doe@example.com", tags=store_pb2.TagList(values=["536-22-1234"])
    )
    code, reason, fields = error_of(
        lambda: store.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                patches=[patch], reason="r", pii_policy=pii_pb.PII_POLICY_REJECT
            )
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PII_DETECTED")
    assert sorted(fields) == ["patches[0].tags[0]", "patches[0].who"]
    assert table_counts(db_path) == before
    assert _leaks(db_path, logs) == set()
